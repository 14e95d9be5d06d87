"""Options shared by the commands that publish documents (`publish`, `connect …`)."""

from __future__ import annotations

import argparse

from tidegraph.connectors import (
    ORDER_SOURCES,
    ConnectorSettings,
    ensure_topics,
    load_connector_settings,
)
from tidegraph.schemas import Settings, load_settings


def add_kafka_options(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap``, ``--topic-prefix``, ``--max-document-bytes``, ``--no-create-topics``."""
    group = parser.add_argument_group("Kafka")
    group.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default: $TIDEGRAPH_KAFKA_BOOTSTRAP)"
    )
    group.add_argument(
        "--topic-prefix", help="topic name prefix (default: $TIDEGRAPH_TOPIC_PREFIX or tidegraph)"
    )
    group.add_argument(
        "--max-document-bytes",
        type=int,
        help="refuse documents whose encoded record is larger (default: 8 MiB)",
    )
    group.add_argument(
        "--no-create-topics",
        action="store_true",
        help="do not create missing topics before publishing",
    )


def add_order_option(parser: argparse.ArgumentParser) -> None:
    """``--order-key-from``: where a text file's document order comes from."""
    parser.add_argument(
        "--order-key-from",
        choices=ORDER_SOURCES,
        default="front-matter",
        help="a file's order_key, which supersession follows: its front matter's order_key:"
        " or date: (else its mtime; the default), its mtime, or its name",
    )


def settings_from(args: argparse.Namespace) -> tuple[Settings, ConnectorSettings]:
    """Shared and connector settings with this command's flags on top."""
    settings = load_settings(kafka_bootstrap=args.bootstrap, topic_prefix=args.topic_prefix)
    connector = load_connector_settings(max_document_bytes=args.max_document_bytes)
    return settings, connector


async def prepare_topics(
    args: argparse.Namespace, settings: Settings, connector: ConnectorSettings
) -> None:
    """Create missing topics unless told not to (differences are logged as warnings)."""
    if not args.no_create_topics:
        await ensure_topics(
            settings.kafka_bootstrap,
            settings,
            max_document_bytes=connector.max_document_bytes,
        )
