"""Partition leaders lost under load, on a three-broker cluster (`up --brokers 3`): HTTP
ingest, an indexer and the change publisher run while the broker leading the realm's
documents partition, its changes partition, or both at once, is SIGKILLed mid-stream.

Every case ends with the fault matrix's invariants (:func:`fault_helpers.check_invariants`):
every acknowledged document stored once with its hash, the outbox gapless, and the changes
topic holding each outbox change exactly once, in order, with unique ids.

Repeats on the changes topic are not allowed here, although the publisher's delivery is at
least once: a same-id repeat comes only from a publisher that sent a batch and died (or
gave up on the send) before recording it. Here the publisher lives, and its producer is
idempotent: aiokafka retries an idempotent batch across the leader change for as long as it
takes, and the new leader, which holds the producer's sequence numbers with the log, answers
a batch it already has as a duplicate instead of writing it twice. A repeat would be a bug.

One cluster for the module; each case brings its victim back and waits until every replica
is in sync again, so the next case can lose a broker too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from aiokafka.partitioner import murmur2

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.infra import _proc
from tidegraph.schemas.topics import changes_topic, dlq_topic, documents_topic

from cluster_helpers import (
    LocalCluster,
    describe,
    local_cluster,
    wait_in_sync,
    wait_led_elsewhere,
)
from fault_helpers import (
    Recovery,
    Writer,
    check_invariants,
    cli,
    published_seq,
    running_publisher,
    stop,
    stored_documents,
    wait_http,
    wait_indexed,
)
from indexer_helpers import Topics, running_indexer, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

PARTITIONS = {"documents": 3, "changes": 4}
"""Unlike counts, so that a realm's two partitions are led by one broker for some realms
and by two for others (topics created alike put partition i's leader on one broker)."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with local_cluster() as running:
        yield running


def _partition(realm: str, partitions: int) -> int:
    """Where the producers' default partitioner puts the realm's records."""
    return (murmur2(realm.encode()) & 0x7FFFFFFF) % partitions


async def _make_topics(bootstrap: str, prefix: str) -> Topics:
    specs = [
        documents_topic(prefix, partitions=PARTITIONS["documents"]),
        changes_topic(prefix, partitions=PARTITIONS["changes"]),
        dlq_topic(prefix, partitions=PARTITIONS["documents"]),
    ]
    assert await ensure_topic_specs(bootstrap, specs) == []
    return Topics(prefix, bootstrap)


def _realm_and_victim(
    prefix: str, described: dict[str, list[dict[str, Any]]], topics: Topics, case: str
) -> tuple[str, int]:
    """A realm whose documents and changes partitions are led by different brokers (or by
    the same one, for ``both``), and the broker to kill."""
    for i in range(1000):
        realm = f"r{prefix}{i}"
        docs = described[topics.documents][_partition(realm, PARTITIONS["documents"])]["leader"]
        changes = described[topics.changes][_partition(realm, PARTITIONS["changes"])]["leader"]
        if case == "both" and docs == changes:
            return realm, docs
        if case != "both" and docs != changes:
            return realm, docs if case == "documents" else changes
    raise AssertionError(f"no realm name fits {case}")


def _longest_gap(times: list[float], start: float) -> float:
    """The longest wait between acknowledgements from ``start`` on (a second before the
    kill), the last one before it included."""
    around = [t for t in times if t >= start - 1.0]
    return max((b - a for a, b in zip(around, around[1:], strict=False)), default=0.0)


async def _published(pg_dsn: str, realm: str) -> int:
    """The realm's published sequence; 0 before the publisher made its table."""
    try:
        return await published_seq(pg_dsn, realm)
    except psycopg.errors.UndefinedTable:
        return 0


async def _first_publish_after(pg_dsn: str, realm: str, since: float) -> float:
    """Seconds from ``since`` until the publisher records a new published sequence."""
    at_kill = await published_seq(pg_dsn, realm)

    async def moved() -> bool:
        return await published_seq(pg_dsn, realm) > at_kill

    await wait_for(moved, 180, "the publisher to publish after the kill", interval=0.05)
    return time.monotonic() - since


@pytest.mark.parametrize("case", ["documents", "changes", "both"])
async def test_partition_leader_sigkilled_under_ingest(
    cluster: LocalCluster, pg_dsn: str, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    env = cluster.env()
    for key, value in env.items():  # this process's clients (the indexer) use the cluster
        monkeypatch.setenv(key, value)
    suffix = uuid.uuid4().hex[:8]
    topics = await _make_topics(cluster.bootstrap, f"fl{suffix}")
    names = [topics.documents, topics.changes, topics.dlq]
    await wait_in_sync(cluster.bootstrap, names)
    described = await describe(cluster.bootstrap, names)
    realm, victim = _realm_and_victim(suffix, described, topics, case)
    part = {
        topics.documents: _partition(realm, PARTITIONS["documents"]),
        topics.changes: _partition(realm, PARTITIONS["changes"]),
    }
    group, port = f"gl{suffix}", _proc.free_port()
    base = f"http://127.0.0.1:{port}"
    args = ("connect", "http", "--port", str(port), "--topic-prefix", topics.prefix)
    ingest = cli(*args, env=env, name=f"ingest-{group}")
    writer, halt = Writer(base, realm), asyncio.Event()
    try:
        await wait_http(base)
        async with (
            running_publisher(topics, pg_dsn, [realm], env=env),
            running_indexer(topics, pg_dsn, group),
        ):
            writing = asyncio.create_task(writer.run(halt))

            async def flowing() -> bool:  # ingest, indexer and publisher all mid-stream
                stored = len(await stored_documents(pg_dsn, realm))
                published = await _published(pg_dsn, realm)
                return len(writer.acknowledged) >= 40 and stored >= 10 and published >= 5

            await wait_for(flowing, 120, "documents acknowledged, applied and published")
            now = await describe(cluster.bootstrap, [topics.documents, topics.changes])
            leaders = {t: now[t][part[t]]["leader"] for t in now}
            expected = {"documents": [topics.documents], "changes": [topics.changes]}
            for topic in expected.get(case, [topics.documents, topics.changes]):
                assert leaders[topic] == victim, f"leadership moved before the kill: {leaders}"
            acked_before = len(writer.acknowledged)
            stored_before = len(await stored_documents(pg_dsn, realm))
            killed_at = cluster.kill(victim)
            publish_after = await _first_publish_after(pg_dsn, realm, killed_at)

            async def acked_after() -> bool:  # well past the election, not answers in flight
                return sum(t > killed_at + 1.0 for t in writer.ack_times) >= 40

            await wait_for(acked_after, 180, "documents acknowledged after the kill")
            halt.set()
            await writing
            for topic in (topics.documents, topics.changes):
                elected = await wait_led_elsewhere(cluster.bootstrap, topic, part[topic], victim)
                assert elected != victim
            await wait_indexed(pg_dsn, realm, writer.acknowledged, 180)
            duplicated = await check_invariants(pg_dsn, realm, writer.acknowledged, topics)
    finally:
        halt.set()
        stop(ingest)
    gap = _longest_gap(writer.ack_times, killed_at)
    # mid-stream: the indexer had applied some and had more to apply
    assert 10 <= stored_before < len(writer.acknowledged)
    cluster.restore()
    await wait_in_sync(cluster.bootstrap, [*names, "__consumer_offsets"])
    print(
        f"\n{case} leader (broker {victim}) killed: {acked_before} acknowledged before, "
        f"{len(writer.acknowledged) - acked_before} after; longest wait for an ingest ack "
        f"{gap:.1f}s; publisher's next record {publish_after:.1f}s after the kill"
    )
    Recovery(f"Kafka {case} partition leader SIGKILL (3 brokers)", gap, 0, duplicated).show()
