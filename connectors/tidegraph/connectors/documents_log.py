"""Which documents the documents topic says are live: what a truncate must delete.

A truncate names a table, not its rows. The documents topic is the system of record (kept
forever), and every version a source published is there once acknowledged, so folding the
realm's partition — highest ``source_version`` per doc_key wins, as the indexer decides —
gives exactly the documents of the table that are live at that point of the log, whether
the indexer has applied them yet or not. It reads the whole partition: a truncate costs
a scan of the realm's partition, which suits an operation that is rare.
"""

from __future__ import annotations

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from tidegraph.schemas import (
    compare_source_versions,
    kafka_client_options,
    realm_partition,
    topic_partitions,
)

__all__ = ["live_documents"]


async def live_documents(
    bootstrap: str, topic: str, realm: str, *, space: str, prefix: str, source: str
) -> dict[str, str | None]:
    """doc_key → highest ``source_version`` of every live document of ``realm`` and
    ``space`` whose doc_key starts with ``prefix`` and that ``source`` published."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        client_id="tidegraph-documents-log",
        **kafka_client_options(),
    )
    await consumer.start()
    try:
        partitions = await topic_partitions(bootstrap, topic, **kafka_client_options())
        tp = TopicPartition(topic, realm_partition(realm, len(partitions)))
        end = (await consumer.end_offsets([tp]))[tp]
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        state: dict[str, tuple[bool, str | None]] = {}
        while end > 0 and await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for record in batch.get(tp, []):
                if record.offset >= end or record.key != realm.encode() or record.value is None:
                    continue
                _fold(state, record.value, space, prefix, source)
        return {key: version for key, (live, version) in state.items() if live}
    finally:
        await consumer.stop()


def _fold(
    state: dict[str, tuple[bool, str | None]], value: bytes, space: str, prefix: str, source: str
) -> None:
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return
    if not isinstance(doc, dict) or doc.get("source") != source:
        return
    key = doc.get("doc_key")
    if (
        doc.get("space", "default") != space
        or not isinstance(key, str)
        or not key.startswith(prefix)
    ):
        return
    version = doc.get("source_version")
    held = state.get(key)
    if held is not None and held[1] is not None and version is not None:
        if compare_source_versions(str(version), held[1]) < 0:
            return
    keep = held[1] if held is not None and version is None else version
    state[key] = (doc.get("op") == "upsert", keep)
