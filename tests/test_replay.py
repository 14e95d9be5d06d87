"""Replay: a realm rebuilt from the log equals the live one, swaps in without losing a record,
and an audit copy shows the realm as it stood at an instant (DESIGN invariants 6 and 7)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tidegraph.indexer.diff import diff_schemas
from tidegraph.indexer.pipeline import Pipeline
from tidegraph.indexer.replay import ReplayOptions, ReplayResult, replay_realm
from tidegraph.infra.composition import ModelRegistry
from tidegraph.schemas.realm_config import preset

from indexer_helpers import (
    Topics,
    believed_at,
    delete,
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

NARRATIVE = preset("narrative", embedder="hashing:64")


def options(topics: Topics, pg_dsn: str, realm: str, group: str, **kw: Any) -> ReplayOptions:
    return ReplayOptions(
        realm=realm,
        bootstrap=topics.bootstrap,
        pg_dsn=pg_dsn,
        topic=topics.documents,
        live_group=group,
        **kw,
    )


async def replay(topics: Topics, pg_dsn: str, realm: str, group: str, **kw: Any) -> ReplayResult:
    registry = ModelRegistry()
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
    return await replay_realm(
        options(topics, pg_dsn, realm, group, **kw), pipeline.prepare, registry.embedder_for
    )


async def schema_diff(pg_dsn: str, a: str, b: str, *, history: bool = True) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        return await diff_schemas(conn, a, b, history=history)


async def believed_in(pg_dsn: str, schema: str, t: datetime) -> list[tuple[Any, ...]]:
    """``believed_at`` for any schema (a shadow, an audit copy, a retired realm)."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.negated, h.state"
                " FROM {s}.relation_history h"
                " JOIN {s}.relations r ON r.id = h.relation_id"
                " JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id"
                " WHERE h.t_created <= %s AND (h.t_expired IS NULL OR h.t_expired > %s)"
            ).format(s=sql.Identifier(schema)),
            (t, t),
        )
        return sorted(tuple(r) for r in await cur.fetchall())


async def current_in(pg_dsn: str, schema: str) -> list[tuple[Any, ...]]:
    """The schema's present belief, in ``believed_at``'s shape."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.negated, r.status FROM {s}.relations r"
                " JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id WHERE r.status <> 'retracted'"
            ).format(s=sql.Identifier(schema))
        )
        return sorted(tuple(r) for r in await cur.fetchall())


BATCHES: list[list[tuple[str, str, str]]] = [
    [
        ("d1.md", "Arthur is an ally of Mordred. Lancelot worked with Arthur.", "1"),
        ("d4.md", "Gawain worked with Percival. Percival is a friend of Galahad.", "1"),
    ],
    [("d2.md", "Arthur is an enemy of Mordred.", "2")],
    [
        ("d1.md", "Lancelot worked with Gawain.", "1"),
        ("d3.md", "Arthur is an ally of Mordred.", "3"),
    ],
    [("d4.md", "", "")],  # deleted
]


async def build_live(
    topics: Topics, pg_dsn: str, realm: str, group: str
) -> tuple[list[datetime], int]:
    """Index BATCHES through the live indexer; return an instant after each batch."""
    instants: list[datetime] = []
    applied = 0
    async with running_indexer(topics, pg_dsn, group, default_realm=NARRATIVE):
        for batch in BATCHES:
            records = [
                delete(realm, key) if not text else upsert(realm, key, text, order_key=order)
                for key, text, order in batch
            ]
            # Another realm on the same topic: the replay must pass its records by.
            records.append(upsert(realm + "x", "noise.md", f"Noise worked with Batch{applied}."))
            await publish(topics, records)
            applied += len(records)

            async def done(n: int = applied) -> bool:
                return await stored_position(pg_dsn, group, topics.documents) >= n

            await wait_for(done, 60, "batch applied")
            await asyncio.sleep(0.05)
            instants.append(datetime.now(UTC))
            await asyncio.sleep(0.05)
    return instants, applied


async def test_replay_reproduces_graph_and_belief_history_then_swaps_in(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    live = f"realm_{realm}"
    instants, _ = await build_live(topics, pg_dsn, realm, group)
    probes = [instants[0] - timedelta(seconds=30), *instants]
    before = {t: await believed_at(pg_dsn, realm, t) for t in probes}
    snapshot = await realm_snapshot(pg_dsn, realm)
    feed = await outbox(pg_dsn, realm)

    kept = await replay(topics, pg_dsn, realm, group, swap=False, label="inspect")
    assert kept.schema == f"{live}__shadow_inspect" and not kept.swapped
    assert kept.written == 6 and kept.realm_records == 6 and kept.records_read == 10
    assert await schema_diff(pg_dsn, live, kept.schema) == []

    result = await replay(topics, pg_dsn, realm, group)
    assert result.swapped and result.schema == live and result.retired is not None
    assert result.built_in == f"{live}__shadow_1"
    assert await realm_snapshot(pg_dsn, realm) == snapshot
    for t in probes:
        assert await believed_at(pg_dsn, realm, t) == before[t]
    assert await schema_diff(pg_dsn, live, result.retired) == []
    # The feed continues the old sequence with one rebuild commit, nothing else changed.
    assert result.swap is not None
    new_feed = await outbox(pg_dsn, realm)
    head = feed[-1][0]
    assert new_feed == [*feed, (head + 1, 0, "communities_stale")]
    assert result.swap.rebuild_seq == head + 1
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT seq, swapped_out FROM {}.meta").format(sql.Identifier(live))
        )
        assert await cur.fetchone() == (head + 1, False)
        cur = await conn.execute(
            sql.SQL("SELECT swapped_out FROM {}.meta").format(sql.Identifier(result.retired))
        )
        assert await cur.fetchone() == (True,)
        cur = await conn.execute(
            "SELECT count(*) FROM tidegraph.consumer_positions WHERE group_id LIKE %s",
            (f"tidegraph-replay:{live}__shadow_1",),
        )
        assert await cur.fetchone() == (0,)
