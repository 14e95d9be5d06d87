"""``tidegraph changes --realm R [--follow]``: print a realm's graph changes from the topic.

One ``GraphChange`` JSON object per line on stdout (pipe it into ``jq``), a count on stderr.
The realm's changes all live on the partition its key hashes to (the producer's default
partitioner), so only that partition is read. Without ``--follow`` the command stops at the
end of the partition as it stood at start; with it, it waits for new changes until
interrupted. ``--dedupe`` drops same-id repeats (delivery is at least once).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from tidegraph.infra.reach import kafka_unreachable
from tidegraph.infra.runtime import on_termination
from tidegraph.schemas import (
    GraphChange,
    RecordValidationError,
    Settings,
    kafka_client_options,
    load_settings,
    realm_partition,
    topic_partitions,
    validate_realm,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "changes",
        help="print a realm's graph changes from the changes topic",
        description="Print GraphChange records of one realm, one JSON object per line.",
    )
    p.add_argument("--realm", required=True, help="realm whose changes to print")
    p.add_argument("--follow", "-f", action="store_true", help="keep waiting for new changes")
    p.add_argument("--after-seq", type=int, default=0, help="skip commits up to this sequence")
    p.add_argument("--dedupe", action="store_true", help="drop repeats of an already seen id")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEGRAPH_KAFKA_BOOTSTRAP)")
    p.add_argument("--topic-prefix", help="topic prefix (TIDEGRAPH_TOPIC_PREFIX)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    validate_realm(args.realm)
    settings = load_settings(kafka_bootstrap=args.bootstrap, topic_prefix=args.topic_prefix)
    count = asyncio.run(tail(args, settings))
    print(f"{count} change(s) of realm {args.realm}", file=sys.stderr)
    return 0


async def tail(args: argparse.Namespace, settings: Settings) -> int:
    topic = settings.changes_topic
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id="tidegraph-changes",
        **kafka_client_options(),
    )
    try:
        await consumer.start()
    except (KafkaError, OSError) as exc:
        await consumer.stop()
        raise kafka_unreachable(settings.kafka_bootstrap, exc) from None
    stop = asyncio.Event()
    if args.follow:
        on_termination(stop.set)
    try:
        partitions = await topic_partitions(
            settings.kafka_bootstrap, topic, **kafka_client_options()
        )
        key = args.realm.encode()
        tp = TopicPartition(topic, realm_partition(args.realm, len(partitions)))
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        return await _print(consumer, tp, key, end, args, stop)
    finally:
        await consumer.stop()


async def _print(
    consumer: Any,
    tp: TopicPartition,
    key: bytes,
    end: int,
    args: argparse.Namespace,
    stop: asyncio.Event,
) -> int:
    seen: set[str] = set()
    count = 0
    out = sys.stdout
    while not stop.is_set():
        position = await consumer.position(tp)
        if not args.follow and position >= end:
            break
        batches = await consumer.getmany(tp, timeout_ms=500, max_records=1000)
        for record in batches.get(tp, []):
            if record.key != key:
                continue
            try:
                change = GraphChange.from_json(record.value)
            except RecordValidationError as exc:
                print(f"offset {record.offset}: not a GraphChange ({exc})", file=sys.stderr)
                continue
            if change.seq <= args.after_seq or (args.dedupe and change.id in seen):
                continue
            seen.add(change.id)
            out.write(record.value.decode() + "\n")
            count += 1
        out.flush()
    return count
