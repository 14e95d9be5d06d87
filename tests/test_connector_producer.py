"""The one producer path: key, headers, acknowledged positions, size limit, unreachable broker."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable

import aiokafka.producer.message_accumulator as accumulator
import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from tidegraph.connectors.errors import DeliveryError, DocumentTooLargeError
from tidegraph.connectors.producer import LZ4_LEVEL, DocumentProducer, _use_fast_lz4, encode
from tidegraph.connectors.topics import ensure_topics
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.settings import load_settings


def test_oversize_document_refused_naming_doc_and_size() -> None:
    doc = DocumentVersion.for_upsert("acme", "big.md", "x" * 2000)
    with pytest.raises(DocumentTooLargeError) as info:
        encode(doc, max_document_bytes=1000)
    message = str(info.value)
    assert "'big.md'" in message and f"{len(doc.to_json())} bytes" in message
    assert "1000-byte limit" in message and "never truncated" in message


def test_headers_and_key() -> None:
    doc = DocumentVersion.for_upsert("acme", "a/b.md", "hi")
    record = encode(doc)
    assert record.key == b"acme"
    assert dict(record.headers) == {
        "tg-schema": b"tidegraph.document.v1",
        "tg-doc-key": b"a/b.md",
        "tg-content-hash": doc.content_hash.encode(),  # type: ignore[union-attr]
    }
    gone = encode(DocumentVersion.for_delete("acme", "a/b.md"))
    assert "tg-content-hash" not in dict(gone.headers)


@pytest.mark.kafka
async def test_acknowledged_positions_are_where_records_are(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    settings = load_settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=unique_name("tp"))
    await ensure_topics(kafka_bootstrap, settings, partitions=3)
    docs = [DocumentVersion.for_upsert("acme", f"d{i}", f"text {i}") for i in range(50)]
    async with DocumentProducer.from_settings(settings) as producer:
        first = await producer.publish(docs[0], ack_timeout=30)
        futures = [await producer.submit(d) for d in docs[1:]]
        rest = await asyncio.gather(*futures)
    deliveries = [first, *rest]
    assert len({d.partition for d in deliveries}) == 1  # key = realm: one partition
    offsets = [d.offset for d in deliveries]
    assert offsets == sorted(offsets) and len(set(offsets)) == 50

    consumer = AIOKafkaConsumer(
        **kafka_client_options(), bootstrap_servers=kafka_bootstrap, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(settings.documents_topic, first.partition)
        consumer.assign([tp])
        consumer.seek(tp, first.offset)
        got: list[ConsumerRecord[bytes, bytes]] = []
        while len(got) < 50:
            batch = await consumer.getmany(tp, timeout_ms=5000)
            got.extend(batch.get(tp, []))
    finally:
        await consumer.stop()
    assert [DocumentVersion.from_json(m.value) for m in got] == docs
    assert [m.offset for m in got] == offsets
    assert all(m.key == b"acme" for m in got)


@pytest.mark.kafka
async def test_unreachable_broker_fails_start_and_can_retry() -> None:
    producer = DocumentProducer("127.0.0.1:1", "nowhere.documents")
    for _ in range(2):
        with pytest.raises(DeliveryError, match="unreachable") as info:
            await producer.start(connect_timeout=5)
        assert info.value.retriable
        assert not producer.started
    with pytest.raises(DeliveryError, match="not started"):
        await producer.submit(DocumentVersion.for_upsert("acme", "k", "x"))


@pytest.mark.kafka
async def test_submit_many_batches_in_order_and_refuses_oversize(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    settings = load_settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=unique_name("tm"))
    await ensure_topics(kafka_bootstrap, settings, partitions=3)
    docs = [
        DocumentVersion.for_upsert(realm, f"{realm}-{i}", ("x" * 3000) if i == 7 else f"t{i}")
        for i in range(40)
        for realm in ("acme", "beta")
    ]
    producer = DocumentProducer(
        kafka_bootstrap, settings.documents_topic, max_document_bytes=2048, batch_bytes=4096
    )
    async with producer:
        submitted = await producer.submit_many(docs)
        deliveries = await submitted.acked
    assert sorted(d.doc_key for d, _ in submitted.refused) == ["acme-7", "beta-7"]
    assert "bytes encoded" in str(submitted.refused[0][1])
    assert [d.doc_key for d in deliveries] == [d.doc_key for d in submitted.accepted]
    assert len(deliveries) == 78

    consumer = AIOKafkaConsumer(
        **kafka_client_options(), bootstrap_servers=kafka_bootstrap, enable_auto_commit=False
    )
    await consumer.start()
    try:
        for realm in ("acme", "beta"):
            mine = [d for d in deliveries if d.realm == realm]
            assert len({d.partition for d in mine}) == 1
            offsets = [d.offset for d in mine]
            assert offsets == sorted(offsets)
            tp = TopicPartition(settings.documents_topic, mine[0].partition)
            consumer.assign([tp])
            consumer.seek(tp, mine[0].offset)
            got: list[ConsumerRecord[bytes, bytes]] = []
            while len(got) < len(mine):
                batch = await consumer.getmany(tp, timeout_ms=5000)
                got.extend(m for m in batch.get(tp, []) if m.key == realm.encode())
            by_offset = {m.offset: m for m in got}
            for delivery in mine:
                record = by_offset[delivery.offset]
                assert DocumentVersion.from_json(record.value).doc_key == delivery.doc_key
    finally:
        await consumer.stop()


def test_the_lz4_level_patch_still_applies_to_the_builder_producers_use() -> None:
    """Fails when an aiokafka upgrade makes the process-wide LZ4 patch stop applying: the
    builder the producer's accumulator uses must compress through ``lz4_encode`` looked up
    in its module at call time, and that must be our level."""
    builder = accumulator.DefaultRecordBatchBuilder
    module = importlib.import_module(builder.__module__)
    _use_fast_lz4()
    patched = module.lz4_encode
    assert getattr(patched, "keywords", None) == {"level": LZ4_LEVEL}, patched
    calls: list[int] = []

    def spy(data: bytes, *args: object, **kwargs: object) -> bytes:
        calls.append(len(data))
        return bytes(patched(data, *args, **kwargs))

    module.lz4_encode = spy
    try:
        batch = builder(
            magic=2, compression_type=3, is_transactional=0, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
        )  # fmt: skip  # compression_type 3: LZ4
        batch.append(0, timestamp=None, key=b"k", value=b"x" * 10_000, headers=[])
        built = batch.build()
    finally:
        module.lz4_encode = patched
    assert calls and calls[0] >= 10_000  # the builder compressed through the patched name
    assert len(built) < 1_000
