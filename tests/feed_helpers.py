"""Reading a realm's changes back from the changes topic, and checking them against what
the database holds."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from tidegraph.schemas.changes import GraphChange
from tidegraph.schemas.kafka_security import kafka_client_options


async def consume(
    bootstrap: str, topic: str, realm: str, want: int, limit: float = 30
) -> list[GraphChange]:
    """Every record of ``realm`` on its partition, until ``want`` distinct ids were seen
    (or ``limit`` seconds passed)."""
    consumer = AIOKafkaConsumer(
        **kafka_client_options(), bootstrap_servers=bootstrap, enable_auto_commit=False
    )
    await consumer.start()
    try:
        parts = sorted(consumer.partitions_for_topic(topic) or [])
        for _ in range(50):
            if parts:
                break
            await asyncio.sleep(0.1)
            await consumer._client.force_metadata_update()
            parts = sorted(consumer.partitions_for_topic(topic) or [])
        key = realm.encode()
        tp = TopicPartition(topic, DefaultPartitioner()(key, parts, parts))
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        out: list[GraphChange] = []
        ids: set[str] = set()
        deadline = time.monotonic() + limit
        while len(ids) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500)
            for record in batch.get(tp, []):
                assert record.key == key
                change = GraphChange.from_json(record.value)
                out.append(change)
                ids.add(change.id)
        return out
    finally:
        await consumer.stop()


def check_stream(received: list[GraphChange], expected: list[str]) -> int:
    """Deduplicated by id the stream equals the outbox, in order; repeats are identical.
    Returns how many duplicates there were."""
    first: dict[str, GraphChange] = {}
    order: list[str] = []
    for change in received:
        if change.id in first:
            assert change == first[change.id], "a repeat must be the same change"
            continue
        first[change.id] = change
        order.append(change.id)
    assert order == expected
    return len(received) - len(order)
