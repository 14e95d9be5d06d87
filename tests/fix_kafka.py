"""The Kafka broker for the test session.

Order: ``TIDEGRAPH_KAFKA_BOOTSTRAP`` when set; testcontainers when a Docker engine answers;
else the project's own local broker (``tidegraph up`` into ``.tidegraph/test``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from local_services import docker_engine_answers, kafka_container, local_service


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``host:port`` of a real broker; use unique topic names (``unique_name``) per test."""
    bootstrap = os.environ.get("TIDEGRAPH_KAFKA_BOOTSTRAP")
    if bootstrap:
        yield bootstrap
    elif docker_engine_answers():
        with kafka_container() as bootstrap:
            yield bootstrap
    else:
        with local_service("kafka") as bootstrap:
            yield bootstrap


async def until_described(
    admin: AIOKafkaAdminClient, topic: str, partitions: int, limit: float = 30.0
) -> dict[str, Any]:
    """The topic as the broker describes it once its metadata lists every partition.

    Right after ``create_topics`` returns, the controller may not have propagated the topic
    yet: listing or describing it at once fails now and then.
    """
    deadline = time.monotonic() + limit
    while True:
        if topic in await admin.list_topics():
            (described,) = await admin.describe_topics([topic])
            if described["error_code"] == 0 and len(described["partitions"]) == partitions:
                return dict(described)
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} not described with {partitions} partitions")
        await asyncio.sleep(0.1)
