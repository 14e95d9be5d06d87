"""A realm's partition has one home, and a reader waits for its topic on the public API.

The rule is checked against two models that are not the code: aiokafka's own default
partitioner over any key and partition count, and the broker itself — records published
with no partition named land where :func:`realm_partition` says they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.schemas import (
    REALM_PATTERN,
    TopicMissing,
    partition_for_key,
    realm_partition,
    topic_partitions,
    topic_ready,
)
from tidegraph.schemas.kafka_security import kafka_client_options, producer_options

from fix_kafka import until_described


@given(key=st.binary(max_size=64), count=st.integers(min_value=1, max_value=500))
def test_any_key_goes_where_kafkas_default_partitioner_sends_it(key: bytes, count: int) -> None:
    parts = list(range(count))
    assert partition_for_key(key, count) == DefaultPartitioner()(key, parts, parts)


@given(realm=st.from_regex(REALM_PATTERN, fullmatch=True), count=st.integers(1, 64))
def test_a_realm_is_keyed_by_its_utf8_name(realm: str, count: int) -> None:
    parts = list(range(count))
    assert realm_partition(realm, count) == DefaultPartitioner()(realm.encode(), parts, parts)


def test_a_topic_has_at_least_one_partition() -> None:
    with pytest.raises(ValueError, match="at least one"):
        partition_for_key(b"acme", 0)


@pytest.mark.kafka
async def test_the_broker_puts_each_realm_where_the_rule_says(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("parts")
    realms = [unique_name("r") for _ in range(24)]
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, **kafka_client_options())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=7, replication_factor=1)])
        await until_described(admin, topic, 7)
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, **producer_options())
    await producer.start()
    try:
        landed = {
            r: (await producer.send_and_wait(topic, b"x", key=r.encode())).partition for r in realms
        }
    finally:
        await producer.stop()
    assert landed == {r: realm_partition(r, 7) for r in realms}
    assert len(set(landed.values())) > 1, "24 realms over 7 partitions spread out"


@pytest.mark.kafka
async def test_a_topic_that_never_appears_is_one_clear_error_and_is_not_created(
    kafka_bootstrap: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topic_ready, "TOPIC_WAIT_SECONDS", 1.0)
    topic = unique_name("absent")
    with pytest.raises(TopicMissing, match=f"topic {topic} does not exist after 1 s"):
        await topic_partitions(kafka_bootstrap, topic, **kafka_client_options())
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, **kafka_client_options())
    await admin.start()
    try:
        assert topic not in await admin.list_topics()
    finally:
        await admin.close()


@pytest.mark.kafka
async def test_a_topic_created_while_waiting_is_found_with_all_its_partitions(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("late")
    waiting = asyncio.ensure_future(
        topic_partitions(kafka_bootstrap, topic, **kafka_client_options())
    )
    await asyncio.sleep(1.0)
    assert not waiting.done()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, **kafka_client_options())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=5, replication_factor=1)])
    finally:
        await admin.close()
    assert await asyncio.wait_for(waiting, timeout=15) == [0, 1, 2, 3, 4]
