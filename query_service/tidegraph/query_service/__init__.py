"""tidegraph.query_service: the HTTP query API over realm graphs, and the change publisher.

Imports only ``tidegraph.schemas``; embedders and the chat model are injected by the
composition root (``tidegraph serve``).
"""

from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings, load_query_settings
from tidegraph.query_service.db import make_pool
from tidegraph.query_service.embedding import EmbedderFactory, QueryEmbedder
from tidegraph.query_service.errors import QueryServiceError
from tidegraph.query_service.export_formats import (
    FORMATS,
    ExportRefused,
    FormatName,
    GraphInfo,
    format_named,
)
from tidegraph.query_service.gate import DatabaseGate
from tidegraph.query_service.graph_export import export_graph
from tidegraph.query_service.keywords import (
    KEYWORD_PROMPT,
    KeywordModel,
    Keywords,
    parse_model_keywords,
)
from tidegraph.query_service.publisher import ChangePublisher, ChangeSink, KafkaChangeSink
from tidegraph.query_service.rerank_endpoint import (
    RerankEndpoint,
    Reranker,
    RerankFailed,
    RerankSettings,
)
from tidegraph.query_service.retrieval import (
    MODES,
    RetrievalLimits,
    RetrievalParams,
    retrieve,
)
from tidegraph.query_service.synthesis import ChatModel, Prompt, build_prompt

__all__ = [
    "FORMATS",
    "KEYWORD_PROMPT",
    "MODES",
    "ChangePublisher",
    "ChangeSink",
    "ChatModel",
    "DatabaseGate",
    "Deps",
    "EmbedderFactory",
    "ExportRefused",
    "FormatName",
    "GraphInfo",
    "KafkaChangeSink",
    "KeywordModel",
    "Keywords",
    "Prompt",
    "QueryEmbedder",
    "QueryServiceError",
    "QuerySettings",
    "RerankEndpoint",
    "RerankFailed",
    "RerankSettings",
    "Reranker",
    "RetrievalLimits",
    "RetrievalParams",
    "build_prompt",
    "create_app",
    "export_graph",
    "format_named",
    "load_query_settings",
    "make_pool",
    "parse_model_keywords",
    "retrieve",
]
