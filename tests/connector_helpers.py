"""Shared by the connector tests: fresh topics, reading a topic back, schema validation."""

from __future__ import annotations

import asyncio
from typing import Any, TypeAlias

import orjson
from aiokafka import AIOKafkaConsumer
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from tidegraph.connectors.topics import ensure_topics
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.jsonschema_export import load
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.settings import Settings, load_settings

DOCUMENT_VALIDATOR = Draft202012Validator(load("document.v1.json"))

Record: TypeAlias = Any
"""An aiokafka ``ConsumerRecord[bytes, bytes]`` (aiokafka ships no types)."""


async def fresh_settings(bootstrap: str, prefix: str, partitions: int = 3) -> Settings:
    """Settings on a new topic prefix, its topics created."""
    settings = load_settings(kafka_bootstrap=bootstrap, topic_prefix=prefix)
    await ensure_topics(bootstrap, settings, partitions=partitions)
    return settings


async def read_topic(
    bootstrap: str, topic: str, *, expected: int, within: float = 30.0
) -> list[Record]:
    """Every record of ``topic`` from the beginning, once at least ``expected`` arrived."""
    consumer = AIOKafkaConsumer(
        topic,
        **kafka_client_options(),
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    records: list[Record] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while len(records) < expected and loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for part in batch.values():
                records.extend(part)
        # whatever else is already there (to catch extras)
        batch = await consumer.getmany(timeout_ms=300)
        for part in batch.values():
            records.extend(part)
    finally:
        await consumer.stop()
    return records


def validated(record: Record) -> DocumentVersion:
    """The record's document, after checking it against the committed JSON Schema."""
    assert record.value is not None
    body: Any = orjson.loads(record.value)
    DOCUMENT_VALIDATOR.validate(body)
    doc = DocumentVersion.from_json(record.value)
    assert record.key == doc.realm.encode()
    headers = dict(record.headers)
    assert headers["tg-schema"] == b"tidegraph.document.v1"
    assert headers["tg-doc-key"] == doc.doc_key.encode()
    if doc.content_hash is not None:
        assert headers["tg-content-hash"] == doc.content_hash.encode()
        assert doc.hash_matches()
    return doc
