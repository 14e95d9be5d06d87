"""Crash, restart and rebalance: every record applied exactly once (DESIGN invariant 2)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections import Counter
from collections.abc import Callable

import pytest

from tidegraph.schemas.documents import DocumentVersion

from indexer_helpers import (
    Topics,
    indexer_log,
    make_topics,
    outbox,
    publish,
    realm_snapshot,
    spawn_indexer,
    stored_position,
    upsert,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

NAMES = [
    "Ada Lovelace",
    "Charles Babbage",
    "Mary Somerville",
    "Augustus De Morgan",
    "Michael Faraday",
    "John Herschel",
    "Caroline Herschel",
    "George Boole",
]


def _version(realm: str, doc: int, version: int) -> DocumentVersion:
    a = NAMES[(doc + version) % len(NAMES)]
    b = NAMES[(doc + 2 * version + 1) % len(NAMES)]
    if a == b:
        b = NAMES[(NAMES.index(a) + 1) % len(NAMES)]
    text = f"{a} worked with {b}. Version {version} of note {doc}."
    return upsert(realm, f"note-{doc}.md", text)


def _stream(realms: list[str], docs: int, versions: int) -> list[DocumentVersion]:
    """Versions of each document in order, documents and realms interleaved."""
    return [_version(r, d, v) for v in range(versions) for d in range(docs) for r in realms]


async def _assert_exactly_once(pg_dsn: str, realm: str, records: list[DocumentVersion]) -> None:
    mine = [r for r in records if r.realm == realm]
    changes = await outbox(pg_dsn, realm)
    seqs = sorted({s for s, _, _ in changes})
    doc_changes = Counter(k for _, _, k in changes if k.startswith("document_"))
    # One transaction (one sequence number) per record, none missing, none repeated.
    assert seqs == list(range(1, len(mine) + 1))
    assert sum(doc_changes.values()) == len(mine)
    final = {r.doc_key: r.content_hash for r in mine}
    snap = await realm_snapshot(pg_dsn, realm)
    assert {d[1]: d[3] for d in snap["documents"]} == final


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


async def _when_position_reaches(
    pg_dsn: str, group: str, topic: str, threshold: int, proc: subprocess.Popen[bytes]
) -> None:
    """Wait until the stored positions cross ``threshold`` records (the process must still
    be running): a kill that follows lands mid-stream, not before the first record or after
    the last."""

    async def crossed() -> bool:
        assert proc.poll() is None, "the indexer exited before the kill"
        return await stored_position(pg_dsn, group, topic) >= threshold

    await wait_for(crossed, 120, f"the stored position to reach {threshold}", interval=0.02)


async def _kill_at_then_finish(
    topics: Topics, pg_dsn: str, group: str, n: int, thresholds: tuple[int, ...], *extra: str
) -> None:
    """SIGKILL an indexer process each time the stored position crosses a threshold (so
    the kill lands mid-stream), then let a last one apply all ``n`` records."""
    for threshold in thresholds:
        proc = spawn_indexer(topics, pg_dsn, group, *extra)
        await _when_position_reaches(pg_dsn, group, topics.documents, threshold, proc)
        _kill(proc)
        at_kill = await stored_position(pg_dsn, group, topics.documents)
        assert threshold <= at_kill < n
    proc = spawn_indexer(topics, pg_dsn, group)
    try:

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= n

        await wait_for(done, 180, "all records applied after restarts")
    finally:
        proc.terminate()
        proc.wait(30)


async def test_sigkill_at_random_points_applies_each_record_once(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=2)
    group = unique_name("g")
    realms = [unique_name("r") for _ in range(2)]
    records = _stream(realms, docs=25, versions=10)  # 500 records
    await publish(topics, records)
    # record by record (each realm's records arrive back to back on its partition, which
    # would otherwise be caught up in runs: test_sigkill_mid_catch_up_… covers that)
    await _kill_at_then_finish(
        topics, pg_dsn, group, len(records), (40, 160, 280, 400), "--catch-up-run", "0"
    )
    for realm in realms:
        await _assert_exactly_once(pg_dsn, realm, records)


async def test_sigkill_mid_catch_up_applies_each_record_once(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """One realm's backlog is written in catch-up runs (many records per transaction); a
    kill between or inside them loses and repeats nothing."""
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    group = unique_name("g")
    realm = unique_name("r")
    records = _stream([realm], docs=40, versions=10)  # 400 records
    await publish(topics, records)
    await _kill_at_then_finish(
        topics, pg_dsn, group, len(records), (60, 200), "--max-poll-records", "32"
    )
    await _assert_exactly_once(pg_dsn, realm, records)
    assert "in one transaction" in indexer_log(group).read_text()


async def test_second_member_joins_then_first_is_killed(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics: Topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=4)
    group = unique_name("g")
    realms = [unique_name("r") for _ in range(6)]
    records = _stream(realms, docs=5, versions=6)  # 180 records over up to 4 partitions
    half = len(records) // 2
    first = spawn_indexer(topics, pg_dsn, group)
    second: subprocess.Popen[bytes] | None = None
    try:
        await publish(topics, records[:half])
        await asyncio.sleep(2)
        second = spawn_indexer(topics, pg_dsn, group)
        await publish(topics, records[half:])
        await _when_position_reaches(pg_dsn, group, topics.documents, half, first)
        _kill(first)
        at_kill = await stored_position(pg_dsn, group, topics.documents)
        assert 0 < at_kill < len(records)

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        await wait_for(done, 180, "all records applied by the survivor")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(30)
    for realm in realms:
        await _assert_exactly_once(pg_dsn, realm, records)


async def test_sigterm_finishes_in_flight_and_leaves_the_group(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    group = unique_name("g")
    realm = unique_name("r")
    records = _stream([realm], docs=10, versions=5)
    await publish(topics, records)
    # record by record, so that SIGTERM lands between records; the restart catches up
    proc = spawn_indexer(topics, pg_dsn, group, "--catch-up-run", "0")
    await _when_position_reaches(pg_dsn, group, topics.documents, 5, proc)
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0
    applied = await stored_position(pg_dsn, group, topics.documents)
    assert 0 < applied < len(records)
    changes = await outbox(pg_dsn, realm)
    # Every applied record's transaction is complete: one sequence per applied record.
    assert len({s for s, _, _ in changes}) == applied
    proc = spawn_indexer(topics, pg_dsn, group)
    try:

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        await wait_for(done, 120, "the rest applied after a clean restart")
    finally:
        proc.terminate()
        proc.wait(30)
    await _assert_exactly_once(pg_dsn, realm, records)
