"""Functional predicates through the real pipeline (Kafka → indexer → PostgreSQL): shuffled
arrival orders give one graph, the change feed tells each supersession's mechanism, and a
replay of the log rebuilds the same graph."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.indexer.replay.diff import diff_schemas
from tidegraph.indexer.replay.rebuild import ReplayOptions, replay_realm
from tidegraph.infra.composition import ModelRegistry
from tidegraph.schemas.realm_config import RealmConfig

from indexer_helpers import (
    delete,
    make_topics,
    publish,
    realm_snapshot,
    running_indexer,
    stored_position,
    upsert,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

CONFIG = RealmConfig(
    embedder="hashing:64",
    exclusive_groups=(frozenset({"ally_of", "enemy_of"}),),
    functional_predicates={"lives_in": "subject", "chairman_of": "object"},
)
DOCS = [
    ("d1.md", "2019", "Ada Byron lives in London. Ann Smith is the chairman of Acme Corp."),
    ("d2.md", "2023", "Ada Byron lives in Paris."),
    ("d3.md", "2021", "Ada Byron lives in Rome. Tom Hardy is the chairman of Acme Corp."),
    ("d4.md", "2018", "Ada Byron never lived in London. Arthur is an ally of Mordred."),
    ("d5.md", "2020", "Ada Byron lives in Oslo. Arthur is an enemy of Mordred."),
]


async def _superseded_via(pg_dsn: str, schema: str) -> list[tuple[Any, ...]]:
    """(subject, predicate, object, negated, status, mechanism) by names."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.negated, r.status, r.superseded_via"
                " FROM {s}.relations r JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id"
            ).format(s=sql.Identifier(schema))
        )
        return sorted(tuple(r) for r in await cur.fetchall())


async def _feed_fold(pg_dsn: str, schema: str) -> dict[str, tuple[str, str | None]]:
    """Relation id → (state, mechanism) as a consumer folding the feed holds them."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT kind, payload FROM {}.outbox ORDER BY seq, idx").format(
                sql.Identifier(schema)
            )
        )
        held: dict[str, tuple[str, str | None]] = {}
        for kind, payload in await cur.fetchall():
            if not kind.startswith("relation_"):
                continue
            rid = payload["relation"]["id"]
            if kind == "relation_superseded":
                held[rid] = ("superseded", payload["superseded_via"])
            elif kind == "relation_retracted":
                held[rid] = ("retracted", None)
            else:
                held[rid] = ("current", None)
        return held


async def _stored(pg_dsn: str, schema: str) -> dict[str, tuple[str, str | None]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT id::text, status, superseded_via FROM {}.relations").format(
                sql.Identifier(schema)
            )
        )
        return {rid: (st, via) for rid, st, via in await cur.fetchall()}


async def test_shuffled_arrivals_one_graph_feed_and_replay(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"))
    group = unique_name("g")
    realms = [unique_name("r") for _ in range(4)]
    records = []
    for i, realm in enumerate(realms):
        order = list(DOCS)
        random.Random(i).shuffle(order)
        records.extend(upsert(realm, k, text, order_key=o) for k, o, text in order)
        records.append(delete(realm, "d2.md"))  # the newest residence withdrawn: Rome again
    async with running_indexer(topics, pg_dsn, group, default_realm=CONFIG):
        await publish(topics, records)

        async def applied() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        await wait_for(applied, 90, f"{len(records)} records applied")

    graphs = [await _superseded_via(pg_dsn, f"realm_{r}") for r in realms]
    assert all(g == graphs[0] for g in graphs)
    snaps = [await realm_snapshot(pg_dsn, r) for r in realms]
    assert all(s["relations"] == snaps[0]["relations"] for s in snaps)
    assert graphs[0] == [
        ("Ada Byron", "lives_in", "London", False, "superseded", "functional"),
        ("Ada Byron", "lives_in", "London", True, "superseded", "negation"),
        ("Ada Byron", "lives_in", "Oslo", False, "superseded", "functional"),
        ("Ada Byron", "lives_in", "Paris", False, "retracted", None),
        ("Ada Byron", "lives_in", "Rome", False, "current", None),
        ("Ann Smith", "chairman_of", "Acme Corp", False, "superseded", "functional"),
        ("Arthur", "ally_of", "Mordred", False, "superseded", "exclusive_group"),
        ("Arthur", "enemy_of", "Mordred", False, "current", None),
        ("Tom Hardy", "chairman_of", "Acme Corp", False, "current", None),
    ]
    for realm in realms:  # the feed, folded, holds every relation's state and mechanism
        schema = f"realm_{realm}"
        assert await _feed_fold(pg_dsn, schema) == await _stored(pg_dsn, schema)

    registry = ModelRegistry()
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
    rebuilt = await replay_realm(
        ReplayOptions(
            realm=realms[0],
            bootstrap=topics.bootstrap,
            pg_dsn=pg_dsn,
            topic=topics.documents,
            swap=False,
            label="functional",
        ),
        pipeline.prepare,
        registry.embedder_for,
    )
    live = f"realm_{realms[0]}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        assert await diff_schemas(conn, live, rebuilt.schema) == []
    assert await _superseded_via(pg_dsn, rebuilt.schema) == graphs[0]
