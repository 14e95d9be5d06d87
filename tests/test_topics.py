"""Topic specs are the contract's; ensure_topics creates idempotently and never alters."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tidegraph.connectors.errors import DeliveryError
from tidegraph.connectors.topics import ensure_topics
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.settings import Settings, load_settings
from tidegraph.schemas.topics import MAX_DOCUMENT_BYTES, topic_specs


def test_specs_follow_the_contract() -> None:
    documents, changes, dlq = topic_specs("acme_prefix")
    assert (documents.name, changes.name, dlq.name) == (
        "acme_prefix.documents",
        "acme_prefix.changes",
        "acme_prefix.documents.dlq",
    )
    assert documents.partitions == 12
    assert documents.configs["cleanup.policy"] == "delete"
    assert documents.configs["retention.ms"] == "-1"
    assert documents.configs["message.timestamp.type"] == "LogAppendTime"
    assert int(documents.configs["max.message.bytes"]) > MAX_DOCUMENT_BYTES
    assert "retention.ms" not in changes.configs
    assert topic_specs(changes_retention_ms=1000)[1].configs["retention.ms"] == "1000"


def test_specs_are_immutable() -> None:
    spec = topic_specs()[0]
    with pytest.raises(TypeError):
        spec.configs["retention.ms"] = "1"  # type: ignore[index]


@pytest.fixture
async def admin(kafka_bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(**kafka_client_options(), bootstrap_servers=kafka_bootstrap)
    await client.start()
    yield client
    await client.close()


@pytest.fixture
def settings(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Settings:
    return load_settings(kafka_bootstrap=kafka_bootstrap, topic_prefix=unique_name("tt"))


async def _configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    [resource] = response.to_object()["resources"]
    return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}


async def _drop(admin: AIOKafkaAdminClient, settings: Settings) -> None:
    names = [settings.documents_topic, settings.changes_topic, settings.dlq_topic]
    present = set(await admin.list_topics())
    await admin.delete_topics([n for n in names if n in present])


@pytest.mark.kafka
async def test_creates_all_three_then_is_idempotent(
    admin: AIOKafkaAdminClient, settings: Settings
) -> None:
    try:
        assert await ensure_topics(settings.kafka_bootstrap, settings, partitions=2) == []
        topics = {
            t["topic"]: t
            for t in await admin.describe_topics(
                [settings.documents_topic, settings.changes_topic, settings.dlq_topic]
            )
        }
        assert all(len(t["partitions"]) == 2 for t in topics.values())
        docs = await _configs(admin, settings.documents_topic)
        assert docs["retention.ms"] == "-1"
        assert docs["message.timestamp.type"] == "LogAppendTime"
        assert docs["cleanup.policy"] == "delete"
        assert int(docs["max.message.bytes"]) > MAX_DOCUMENT_BYTES
        assert await ensure_topics(settings.kafka_bootstrap, settings, partitions=2) == []
    finally:
        await _drop(admin, settings)


@pytest.mark.kafka
async def test_differing_existing_topic_is_reported_not_altered(
    admin: AIOKafkaAdminClient, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    await admin.create_topics(
        [
            NewTopic(
                settings.documents_topic,
                2,
                1,
                topic_configs={"retention.ms": "86400000", "message.timestamp.type": "CreateTime"},
            )
        ]
    )
    try:
        warnings = await ensure_topics(settings.kafka_bootstrap, settings, partitions=2)
        assert len(warnings) == 2, warnings
        joined = "\n".join(warnings)
        assert "retention.ms=86400000" in joined and "retention.ms=-1" in joined
        assert "message.timestamp.type=CreateTime" in joined
        assert "message.timestamp.type=LogAppendTime" in joined
        assert settings.documents_topic in joined
        assert any("retention.ms=86400000" in r.getMessage() for r in caplog.records)
        configs = await _configs(admin, settings.documents_topic)
        assert configs["retention.ms"] == "86400000"
        assert configs["message.timestamp.type"] == "CreateTime"
        assert settings.changes_topic in await admin.list_topics()
    finally:
        await _drop(admin, settings)


@pytest.mark.kafka
async def test_unreachable_broker_is_a_delivery_error(settings: Settings) -> None:
    with pytest.raises(DeliveryError, match="unreachable"):
        await ensure_topics("127.0.0.1:1", settings)


@pytest.mark.kafka
async def test_topics_command(
    admin: AIOKafkaAdminClient, settings: Settings, kafka_bootstrap: str
) -> None:
    command = [
        sys.executable, "-m", "tidegraph.infra.cli", "topics", "--bootstrap", kafka_bootstrap,
        "--topic-prefix", settings.topic_prefix, "--partitions", "2",
    ]  # fmt: skip
    try:
        outputs = []
        for _ in range(2):
            proc = await asyncio.create_subprocess_exec(
                *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err.decode()
            outputs.append(out.decode())
        assert f"created  {settings.documents_topic}" in outputs[0]
        assert f"exists   {settings.dlq_topic}" in outputs[1]
    finally:
        await _drop(admin, settings)
