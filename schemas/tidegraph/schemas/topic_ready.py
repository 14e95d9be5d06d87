"""Waiting for a topic to exist, then learning its partitions: one budget, one error.

A reader may start just before the topic it reads is created (``tidegraph serve`` creates the
changes topic as it starts; ``tidegraph up`` the others), so it waits a bounded while and then
fails with :class:`~tidegraph.schemas.errors.TopicMissing`. The broker is asked through
aiokafka's public admin client for the metadata of *every* topic: asking for one topic by
name would let a broker with ``auto.create.topics.enable`` create it, with the wrong settings.

aiokafka is imported when the wait runs, so the contracts still install without it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tidegraph.schemas.errors import TopicMissing

TOPIC_WAIT_SECONDS = 10.0
"""How long a reader waits for a topic to appear before giving up."""
_POLL_SECONDS = 0.2


async def topic_partitions(bootstrap: str, topic: str, **client_options: Any) -> list[int]:
    """The partition numbers of ``topic``, sorted, once it exists; ``client_options`` are
    the connection's (security) keyword arguments, as every client of tidegraph takes them."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options)
    await admin.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TOPIC_WAIT_SECONDS
        while True:
            found = _partitions_of(await admin.describe_topics(), topic)
            if found:
                return found
            if loop.time() >= deadline:
                raise TopicMissing(topic, TOPIC_WAIT_SECONDS)
            await asyncio.sleep(_POLL_SECONDS)
    finally:
        await admin.close()


def _partitions_of(described: list[dict[str, Any]], topic: str) -> list[int]:
    """The topic's partitions once the broker lists all of them (numbered 0..n-1 without a
    gap): a partial list would send a reader to the wrong partition."""
    for entry in described:
        if entry.get("topic") == topic and entry.get("error_code") == 0:
            found = sorted(int(p["partition"]) for p in entry.get("partitions", []))
            return found if found == list(range(len(found))) else []
    return []
