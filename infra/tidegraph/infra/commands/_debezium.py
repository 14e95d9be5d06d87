"""`tidegraph connect debezium`: Debezium's change topics as document versions of a realm."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

import psycopg

from tidegraph.connectors import (
    DeadLetters,
    DebeziumSource,
    DocumentProducer,
    EventMapper,
    SqlReferences,
    load_row_mapping,
)
from tidegraph.infra.commands._connector_args import (
    add_kafka_options,
    prepare_topics,
    settings_from,
)
from tidegraph.schemas import (
    DEFAULT_SPACE,
    ConfigError,
    max_message_bytes,
    validate_realm,
    validate_space,
)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def register_debezium(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dbz = kinds.add_parser(
        "debezium",
        help="Debezium change topics (any database Debezium streams, through Kafka Connect)",
        description=(
            "Read Debezium change events (Kafka Connect's JsonConverter, with or without "
            "schemas) from the topics matching --topics and publish each row as a document "
            "version of --realm, per the mapping file (text columns or facts per table; the "
            "format of `connect postgres --facts`). Offsets are committed only after Kafka "
            "acknowledged the documents; a record that cannot be read or mapped goes to the "
            "dead-letter topic with the reason. docs/debezium.md has the whole path."
        ),
    )
    dbz.add_argument(
        "--topics", required=True, metavar="PATTERN",
        help="regular expression matched against whole topic names, e.g. 'shop\\.public\\..*'",
    )  # fmt: skip
    dbz.add_argument("--realm", required=True)
    dbz.add_argument("--mapping", required=True, type=Path, help="YAML or JSON mapping file")
    dbz.add_argument("--space", default=DEFAULT_SPACE)
    dbz.add_argument("--group", help="consumer group (default: tidegraph-debezium-<realm>)")
    dbz.add_argument(
        "--lookup-dsn",
        help="PostgreSQL DSN of the source database, to read the rows a facts mapping's "
        "references name (needed only when the mapping has references)",
    )
    add_kafka_options(dbz)
    dbz.set_defaults(func=run_debezium)


def run_debezium(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    space = validate_space(args.space)
    mapping = load_row_mapping(args.mapping)
    if mapping.references and not args.lookup_dsn:
        raise ConfigError(
            f"the mapping {args.mapping} names rows of other tables (subject or references): "
            "give --lookup-dsn so they can be read from the source database"
        )
    return asyncio.run(_debezium(args, realm, space))


async def _progress(source: DebeziumSource, stop: asyncio.Event, every: float = 5.0) -> None:
    last = -1
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
        s = source.stats
        if s.consumed != last:
            last = s.consumed
            passed = ", ".join(f"{n} {k}" for k, n in sorted(s.passed.items())) or "none"
            _say(
                f"{s.consumed} events read, {s.published} documents published, "
                f"{s.dead_lettered} dead-lettered, {s.truncates} truncates; passed over: {passed}"
            )


async def _debezium(args: argparse.Namespace, realm: str, space: str) -> int:
    settings, connector_settings = settings_from(args)
    await prepare_topics(args, settings, connector_settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    lookups = (
        await psycopg.AsyncConnection.connect(args.lookup_dsn, autocommit=True)
        if args.lookup_dsn
        else None
    )
    mapping = load_row_mapping(args.mapping)
    mapper = EventMapper(
        mapping, realm, space=space,
        references=SqlReferences(mapping, lookups) if lookups is not None else None,
    )  # fmt: skip
    producer = DocumentProducer.from_settings(
        settings, max_document_bytes=connector_settings.max_document_bytes
    )
    dead = DeadLetters(
        settings.kafka_bootstrap,
        settings.dlq_topic,
        max_request_size=max_message_bytes(connector_settings.max_document_bytes),
    )
    source = DebeziumSource(
        settings.kafka_bootstrap, args.topics, args.group or f"tidegraph-debezium-{realm}",
        mapper, producer, dead, on_event=_say,
    )  # fmt: skip
    progress = asyncio.create_task(_progress(source, stop))
    try:
        async with producer:
            await dead.start()
            try:
                await source.run(stop)
            finally:
                await dead.stop()
    finally:
        stop.set()
        await progress
        if lookups is not None:
            await lookups.close()
    s = source.stats
    _say(
        f"stopped: {s.consumed} events read, {s.published} published, "
        f"{s.dead_lettered} dead-lettered"
    )
    return 0
