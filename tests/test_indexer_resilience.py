"""Fail closed, lose nothing; replayable history (DESIGN invariants 6 and 8)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from aiokafka import TopicPartition

from tidegraph.indexer.consumer.indexer import Indexer, metrics
from tidegraph.infra import local_pg
from tidegraph.schemas.realm_config import preset

from indexer_helpers import (
    believed_at,
    make_topics,
    outbox,
    publish,
    realm_snapshot,
    running_indexer,
    stored_position,
    upsert,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_partition_pauses_while_postgres_is_down_and_loses_nothing(
    kafka_bootstrap: str,
    tmp_path: Path,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tidegraph.indexer")
    layout = local_pg.PgLayout.under(tmp_path)
    port = _free_port()
    process = local_pg.launch(layout, port=port)
    local_pg.wait_ready(layout, process, timeout=60)
    dsn = process.dsn
    local_pg.ensure_vector(dsn)
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    first = [
        upsert(realm, f"a{i}.md", f"Ada Lovelace worked with Person{i} Smith.") for i in range(5)
    ]
    second = [
        upsert(realm, f"b{i}.md", f"Charles Babbage worked with Person{i} Jones.") for i in range(5)
    ]
    try:
        async with running_indexer(topics, dsn, group, backoff_initial=0.2, backoff_max=1.0):
            await publish(topics, first)

            async def first_done() -> bool:
                return await stored_position(dsn, group, topics.documents) >= 5

            await wait_for(first_done, 60, "first batch")

            paused_before = metrics.TRANSIENT_FAILURES.labels("DatabaseUnavailable")._value.get()
            local_pg.stop(layout)
            await publish(topics, second)
            await asyncio.sleep(4)  # the indexer keeps failing and pausing meanwhile
            paused_after = metrics.TRANSIENT_FAILURES.labels("DatabaseUnavailable")._value.get()
            assert paused_after > paused_before

            process = local_pg.launch(layout, port=port, credentials=process.credentials)
            local_pg.wait_ready(layout, process, timeout=60)

            async def all_done() -> bool:
                try:
                    return await stored_position(dsn, group, topics.documents) >= 10
                except psycopg.OperationalError:
                    return False

            await wait_for(all_done, 90, "resumed after the database returned")
        snap = await realm_snapshot(dsn, realm)
        assert sorted(d[1] for d in snap["documents"]) == sorted(
            [f"a{i}.md" for i in range(5)] + [f"b{i}.md" for i in range(5)]
        )
        assert all(d[2] == "indexed" for d in snap["documents"])
        seqs = sorted({s for s, _, _ in await outbox(dsn, realm)})
        assert seqs == list(range(1, 11))
        # Each pause and each resumption is one line saying why.
        lines = [r.getMessage() for r in caplog.records if r.name == "tidegraph.indexer"]
        paused = [line for line in lines if "partition paused, retrying in" in line]
        resumed = [line for line in lines if " resumes at offset " in line]
        assert paused and all("DatabaseUnavailable" in line for line in paused), lines
        assert resumed and all("retrying after DatabaseUnavailable" in line for line in resumed)
        assert len(resumed) <= len(paused)
    finally:
        local_pg.stop(layout)


async def test_replaying_the_log_into_a_fresh_database_reproduces_graph_and_history(
    kafka_bootstrap: str, pg_dsn: str, own_database: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=2)
    realm = unique_name("r")
    narrative = preset("narrative", embedder="hashing:64")
    batches = [
        [
            upsert(
                realm,
                "d1.md",
                "Arthur is an ally of Mordred. Lancelot worked with Arthur.",
                order_key="1",
            )
        ],
        [upsert(realm, "d2.md", "Arthur is an enemy of Mordred.", order_key="2")],
        [
            upsert(realm, "d1.md", "Lancelot worked with Gawain.", order_key="1"),
            upsert(realm, "d3.md", "Arthur is an ally of Mordred.", order_key="3"),
        ],
    ]
    instants: list[datetime] = []
    group = unique_name("g")
    applied = 0
    async with running_indexer(topics, pg_dsn, group, default_realm=narrative):
        for batch in batches:
            await publish(topics, batch)
            applied += len(batch)

            async def done(n: int = applied) -> bool:
                return await stored_position(pg_dsn, group, topics.documents) >= n

            await wait_for(done, 60, "batch applied")
            await asyncio.sleep(0.05)
            instants.append(datetime.now(UTC))
    fresh = own_database
    replay_group = unique_name("g")
    async with running_indexer(topics, fresh, replay_group, default_realm=narrative):

        async def replayed() -> bool:
            return await stored_position(fresh, replay_group, topics.documents) >= applied

        await wait_for(replayed, 60, "replay")
    assert await realm_snapshot(fresh, realm) == await realm_snapshot(pg_dsn, realm)
    assert await outbox(fresh, realm) == await outbox(pg_dsn, realm)
    probes = [*instants, instants[0] - timedelta(seconds=30)]
    for t in probes:
        assert await believed_at(fresh, realm, t) == await believed_at(pg_dsn, realm, t)
    # The first instant saw ally as current, the second enemy, the third ally again.
    states = [
        {r[:3] for r in await believed_at(pg_dsn, realm, t) if r[4] == "current"} for t in instants
    ]
    assert ("Arthur", "ally_of", "Mordred") in states[0]
    assert ("Arthur", "enemy_of", "Mordred") in states[1]
    assert ("Arthur", "ally_of", "Mordred") in states[2]


async def test_document_without_any_valid_structure_is_failed_not_placeholder(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    async with running_indexer(topics, pg_dsn, group):
        await publish(
            topics,
            [
                upsert(realm, "ok.md", "Ada Lovelace worked with Charles Babbage."),
                upsert(realm, "empty.md", "it was raining all day and nobody came."),
            ],
        )

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 2

        await wait_for(done, 60, "both applied")
    snap = await realm_snapshot(pg_dsn, realm)
    status = {d[1]: d[2] for d in snap["documents"]}
    assert status == {"ok.md": "indexed", "empty.md": "failed"}
    assert not [c for c in snap["live_chunks"] if c[1] == "empty.md"]
    kinds = [k for _, _, k in await outbox(pg_dsn, realm)]
    assert "document_failed" in kinds


class _SlowClaim(Indexer):
    """Claims its partitions only after the fetcher has had time to fetch from them."""

    async def on_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        await asyncio.sleep(2.0)
        await super().on_assigned(assigned)


async def test_records_fetched_before_the_claim_are_fetched_again_after_it(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    # The consumer fetches as soon as a partition is assigned, while the claim of its
    # stored position is still under way; such a batch must not leave the partition idle.
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=2)
    realm, group = unique_name("r"), unique_name("g")
    records = [
        upsert(realm, f"d{i}.md", f"Ada Lovelace worked with Person{i} Smith.") for i in range(6)
    ]
    await publish(topics, records)
    async with running_indexer(topics, pg_dsn, group, indexer_class=_SlowClaim) as indexer:

        async def done() -> bool:
            return indexer.applied == len(records)

        await wait_for(done, 30, "every record applied")
    snap = await realm_snapshot(pg_dsn, realm)
    assert sorted(d[1] for d in snap["documents"]) == sorted(f"d{i}.md" for i in range(6))
