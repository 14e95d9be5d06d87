"""The real broker through aiokafka: what the connectors and the indexer rely on."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tidegraph.schemas.kafka_security import kafka_client_options

from fix_kafka import until_described

pytestmark = pytest.mark.kafka


async def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(**kafka_client_options(), bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def test_produce_consume_round_trip(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("rt")
    sent = [(f"realm{i % 3}".encode(), f"value-{i}".encode()) for i in range(50)]
    async with AIOKafkaProducer(
        **kafka_client_options(), bootstrap_servers=kafka_bootstrap, acks="all"
    ) as producer:
        for key, value in sent:
            await producer.send(topic, value, key=key, headers=[("tg-schema", b"t.v1")])
        await producer.flush()

    got: list[tuple[bytes, bytes]] = []
    consumer = AIOKafkaConsumer(
        topic,
        **kafka_client_options(),
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        group_id=None,
    )
    async with consumer:
        async with asyncio.timeout(30):
            while len(got) < len(sent):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for record in records:
                        assert record.headers == (("tg-schema", b"t.v1"),)
                        got.append((record.key, record.value))
    assert got == sent


async def test_large_document_round_trip(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Documents go up to 8 MiB: the broker's message.max.bytes must allow them."""
    topic = unique_name("big")
    payload = os.urandom(8 * 1024 * 1024)
    async with AIOKafkaProducer(
        **kafka_client_options(),
        bootstrap_servers=kafka_bootstrap,
        max_request_size=10 * 1024 * 1024,
        acks="all",
    ) as producer:
        await (await producer.send(topic, payload, key=b"acme"))
    consumer = AIOKafkaConsumer(
        topic,
        **kafka_client_options(),
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=10 * 1024 * 1024,
        fetch_max_bytes=16 * 1024 * 1024,
    )
    async with consumer:
        record = await asyncio.wait_for(consumer.getone(), 30)
    assert record.value == payload


class _Recorder(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.assigned: set[TopicPartition] = set()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.assigned -= set(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned |= set(assigned)


async def test_consumer_group_rebalances_when_a_member_joins(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("reb"), unique_name("g")
    await _create_topic(kafka_bootstrap, topic, partitions=4)
    everything = {TopicPartition(topic, p) for p in range(4)}

    def member() -> tuple[AIOKafkaConsumer, _Recorder]:
        consumer = AIOKafkaConsumer(
            **kafka_client_options(),
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
        )
        listener = _Recorder()
        consumer.subscribe([topic], listener=listener)
        return consumer, listener

    first, first_seen = member()
    await first.start()
    second, second_seen = member()
    try:
        async with asyncio.timeout(30):
            while first_seen.assigned != everything:
                await first.getmany(timeout_ms=200)
        await second.start()
        async with asyncio.timeout(45):
            while not (
                first_seen.assigned
                and second_seen.assigned
                and first_seen.assigned | second_seen.assigned == everything
                and not first_seen.assigned & second_seen.assigned
            ):
                await asyncio.gather(first.getmany(timeout_ms=200), second.getmany(timeout_ms=200))
    finally:
        await second.stop()
        await first.stop()
    assert len(first_seen.assigned) == len(second_seen.assigned) == 2


async def test_idempotent_producer_writes_each_record_once_in_order(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("idem")
    count = 2_000
    async with AIOKafkaProducer(
        **kafka_client_options(),
        bootstrap_servers=kafka_bootstrap,
        enable_idempotence=True,
        acks="all",
        compression_type="lz4",
        linger_ms=5,
    ) as producer:
        futures = [await producer.send(topic, str(i).encode(), key=b"acme") for i in range(count)]
        offsets = [(await f).offset for f in futures]
        # The broker handed this producer an id: sequence numbers are being checked.
        assert producer._txn_manager is not None
        assert producer._txn_manager.producer_id >= 0
    assert offsets == list(range(count))

    values: list[int] = []
    consumer = AIOKafkaConsumer(
        topic,
        **kafka_client_options(),
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
    )
    async with consumer:
        async with asyncio.timeout(30):
            while len(values) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values.extend(int(r.value) for r in records)
    assert values == list(range(count))


async def test_admin_client_creates_topic_with_contract_settings(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("adm")
    settings = {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "message.timestamp.type": "LogAppendTime",
    }
    admin = AIOKafkaAdminClient(**kafka_client_options(), bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 3, 1, topic_configs=settings)])
        described = await until_described(admin, topic, 3)  # metadata lags the creation
        assert len(described["partitions"]) == 3
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)]
        )
        resource = response.to_object()["resources"][0]
        configs = {c["config_names"]: c["config_value"] for c in resource["config_entries"]}
    finally:
        await admin.close()
    for key, value in settings.items():
        assert configs[key] == value
