"""`tidegraph publish --realm R PATH…`: files, folders and JSONL onto the documents topic."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from tidegraph.connectors import DocumentProducer, publish_paths
from tidegraph.infra.commands._connector_args import (
    add_kafka_options,
    add_order_option,
    prepare_topics,
    settings_from,
)
from tidegraph.schemas import DEFAULT_SPACE, validate_realm, validate_space


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "publish",
        help="publish files, folders or JSONL as document versions",
        description=(
            "Publish text/Markdown files, folders (recursively) and JSONL files (one "
            "DocumentVersion-shaped object per line; content_hash computed when absent). "
            "Shows progress with rate and prints a summary of what was published and refused."
        ),
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    parser.add_argument("--realm", required=True, help="realm of every document")
    parser.add_argument("--space", default=DEFAULT_SPACE, help="space when a line names none")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    add_order_option(parser)
    add_kafka_options(parser)
    parser.set_defaults(func=run_publish)


def run_publish(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    space = validate_space(args.space)
    return asyncio.run(_publish(args, realm, space))


async def _publish(args: argparse.Namespace, realm: str, space: str) -> int:
    settings, connector = settings_from(args)
    await prepare_topics(args, settings, connector)
    producer = DocumentProducer.from_settings(
        settings, max_document_bytes=connector.max_document_bytes
    )
    async with producer:
        report = await publish_paths(
            producer,
            args.paths,
            realm,
            space=space,
            show_progress=not args.no_progress,
            order_from=args.order_key_from,
        )
    print(report.summary(), file=sys.stdout)
    return 0 if report.ok else 1
