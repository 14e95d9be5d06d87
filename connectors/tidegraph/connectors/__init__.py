"""tidegraph.connectors."""

from tidegraph.connectors.bulk import Input, Refusal, publish_items, publish_paths, read_inputs
from tidegraph.connectors.config import ConnectorSettings, load_connector_settings
from tidegraph.connectors.dead_letters import DeadLetters
from tidegraph.connectors.debezium_documents import EventMapper
from tidegraph.connectors.debezium_source import DebeziumSource
from tidegraph.connectors.errors import DeliveryError
from tidegraph.connectors.fs import FsConnector, SyncReport, default_state_path
from tidegraph.connectors.postgres_cdc import CaptureSpec, PostgresCdc
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.connectors.row_facts import SqlReferences
from tidegraph.connectors.row_mapping import load_row_mapping
from tidegraph.connectors.textfiles import ORDER_SOURCES, TEXT_GLOBS
from tidegraph.connectors.topics import TopicsReport, ensure_topics, topics_report

__all__ = [
    "ORDER_SOURCES",
    "TEXT_GLOBS",
    "CaptureSpec",
    "ConnectorSettings",
    "DeadLetters",
    "DebeziumSource",
    "DeliveryError",
    "DocumentProducer",
    "EventMapper",
    "FsConnector",
    "Input",
    "PostgresCdc",
    "Refusal",
    "SqlReferences",
    "SyncReport",
    "TopicsReport",
    "default_state_path",
    "ensure_topics",
    "load_connector_settings",
    "load_row_mapping",
    "publish_items",
    "publish_paths",
    "read_inputs",
    "topics_report",
]
