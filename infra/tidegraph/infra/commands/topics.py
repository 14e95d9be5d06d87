"""`tidegraph topics`: create the documents, changes and DLQ topics with the contract's settings."""

from __future__ import annotations

import argparse
import asyncio
import sys

from tidegraph.connectors import TopicsReport, topics_report
from tidegraph.schemas import DEFAULT_PARTITIONS, MAX_DOCUMENT_BYTES, load_settings, topic_specs


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "topics",
        help="create the three topics (idempotent; reports, never alters, differences)",
        description=(
            "Create <prefix>.documents, <prefix>.changes and <prefix>.documents.dlq with the "
            "contract's settings. Existing topics are left as they are; a setting that differs "
            "(retention, timestamp type, …) is reported as a warning."
        ),
    )
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers")
    parser.add_argument("--topic-prefix", help="topic name prefix (default: tidegraph)")
    parser.add_argument(
        "--partitions", type=int, default=DEFAULT_PARTITIONS, help="partitions of new topics"
    )
    parser.add_argument(
        "--changes-retention-ms",
        type=int,
        help="retention of the changes topic (default: broker's)",
    )
    parser.add_argument(
        "--max-document-bytes",
        type=int,
        default=MAX_DOCUMENT_BYTES,
        help="largest document the topics must admit (default: 8 MiB)",
    )
    parser.set_defaults(func=run_topics)


def _print(report: TopicsReport) -> None:
    for name in report.created:
        print(f"created  {name}")
    for name in report.existing:
        print(f"exists   {name}")
    if report.warnings:  # each one is logged as it is found
        print(f"{len(report.warnings)} setting(s) differ; left unchanged", file=sys.stderr)


def run_topics(args: argparse.Namespace) -> int:
    settings = load_settings(kafka_bootstrap=args.bootstrap, topic_prefix=args.topic_prefix)
    specs = topic_specs(
        settings.topic_prefix,
        partitions=args.partitions,
        max_document_bytes=args.max_document_bytes,
        changes_retention_ms=args.changes_retention_ms,
    )
    report = asyncio.run(topics_report(settings.kafka_bootstrap, specs))
    _print(report)
    return 0
