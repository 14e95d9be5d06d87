"""The model asked about the residue through the real pipeline (Kafka → indexer →
PostgreSQL, the scripted model endpoint): shuffled arrivals give one graph, record by record
and in catch-up runs; an outage pauses the realm and loses nothing; the feed names the
mechanism; a replay reads the cached answers and asks the model nothing."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.indexer.models.client import LLMClient
from tidegraph.indexer.replay.diff import diff_schemas
from tidegraph.indexer.replay.rebuild import ReplayOptions, ReplayResult, replay_realm
from tidegraph.infra.composition import ModelRegistry
from tidegraph.schemas.realm_config import RealmConfig

from indexer_helpers import (
    Topics,
    delete,
    make_topics,
    publish,
    stored_position,
    upsert,
    wait_for,
)
from llm_server import ScriptedLLMServer
from model_helpers import running_model_indexer

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

CONFIG = RealmConfig(embedder="hashing:64", contradiction_model=True)
DOCS = [
    ("d1.md", "2019", "Ada Byron lives in London. Ada Byron founded Acme Corp."),
    ("d2.md", "2023", "Ada Byron lives in Paris."),
    ("d3.md", "2021", "Ada Byron lives in Rome. Ada Byron founded Beta Labs."),
    ("d4.md", "2020", "Ada Byron lives in Oslo."),
]
EXPECTED = [  # d2 withdrawn: Rome is the latest residence; founding two companies is fine
    ("Ada Byron", "lives_in", "London", "superseded", "model"),
    ("Ada Byron", "lives_in", "Oslo", "superseded", "model"),
    ("Ada Byron", "lives_in", "Paris", "retracted", None),
    ("Ada Byron", "lives_in", "Rome", "current", None),
    ("Ada Byron", "founded", "Acme Corp", "current", None),
    ("Ada Byron", "founded", "Beta Labs", "current", None),
]


async def _graph(pg_dsn: str, schema: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.status, r.superseded_via"
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
            if kind == "relation_superseded":
                held[payload["relation"]["id"]] = ("superseded", payload["superseded_via"])
            elif kind == "relation_retracted":
                held[payload["relation"]["id"]] = ("retracted", None)
            elif kind.startswith("relation_"):
                held[payload["relation"]["id"]] = ("current", None)
        cur = await conn.execute(
            sql.SQL("SELECT id::text, status, superseded_via FROM {}.relations").format(
                sql.Identifier(schema)
            )
        )
        stored = {rid: (st, via) for rid, st, via in await cur.fetchall()}
        assert held == stored
        return held


@pytest.mark.parametrize("catch_up_run", [0, 2])
async def test_shuffled_arrivals_an_outage_and_a_replay_asking_nothing(
    catch_up_run: int,
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    llm_server.add_contradiction("Ada Byron lives in", "Ada Byron lives in")
    topics = await make_topics(kafka_bootstrap, unique_name("t"))
    group = unique_name("g")
    realms = [unique_name("r") for _ in range(3)]
    records = []
    for i, realm in enumerate(realms):
        order = list(DOCS)
        random.Random(i).shuffle(order)
        records.extend(upsert(realm, k, text, order_key=o) for k, o, text in order)
        records.append(delete(realm, "d2.md"))
    client = make_llm_client(deadline=0.5, attempt_timeout=0.3)
    async with running_model_indexer(
        topics,
        pg_dsn,
        group,
        llm=client,
        default_realm=CONFIG,
        catch_up_run=catch_up_run,
        backoff_initial=0.2,
        backoff_max=1.0,
    ):
        llm_server.outage(6)
        await publish(topics, records)
        await asyncio.sleep(4)
        # Paused at the first record that needs an answer: nothing guessed, nothing skipped.
        assert await stored_position(pg_dsn, group, topics.documents) < len(records)
        during = [await _graph(pg_dsn, f"realm_{r}") for r in realms]
        assert all(via is None for graph in during for *_, via in graph)

        async def applied() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        await wait_for(applied, 90, f"{len(records)} records applied")

    graphs = [await _graph(pg_dsn, f"realm_{r}") for r in realms]
    assert graphs == [sorted(EXPECTED)] * len(realms)
    founded = ("Ada Byron founded Acme Corp", "Ada Byron founded Beta Labs")
    assert llm_server.contradiction_questions.count(founded) == len(realms)  # asked: no
    for realm in realms:
        await _feed_fold(pg_dsn, f"realm_{realm}")
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            cur = await conn.execute(
                sql.SQL("SELECT status, count(*) FROM {}.documents GROUP BY 1").format(
                    sql.Identifier(f"realm_{realm}")
                )
            )
            assert dict(await cur.fetchall()) == {"indexed": 3, "deleted": 1}

    # A replay of one realm: the live realm's answers, read through, ask nothing.
    asked = llm_server.contradiction_calls
    live = f"realm_{realms[0]}"
    cached = await _answers(pg_dsn, live)
    assert len(cached) == 7  # 6 pairs of residences, 1 pair of companies
    rebuilt = await _replay(topics, pg_dsn, group, realms[0], make_llm_client(), swap=False)
    assert llm_server.contradiction_calls == asked
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        assert await diff_schemas(conn, live, rebuilt.schema) == []
    assert await _graph(pg_dsn, rebuilt.schema) == sorted(EXPECTED)

    # Swapped in, the rebuilt realm keeps every answer, those it did not need included
    # (the cache moves with the realm).
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(
            sql.SQL(
                "INSERT INTO {} (key, first_text, second_text, prompt_version, contradicts, model)"
                " VALUES ('0', 'Ada Byron likes tea', 'Ada Byron likes coffee', 'v', false, 'm')"
            ).format(sql.Identifier(live, "contradiction_answers"))
        )
    cached = await _answers(pg_dsn, live)
    swapped = await _replay(topics, pg_dsn, group, realms[0], make_llm_client(), swap=True)
    assert llm_server.contradiction_calls == asked
    assert swapped.retired is not None
    assert await _answers(pg_dsn, live) == cached
    assert await _answers(pg_dsn, swapped.retired) == []


async def _answers(pg_dsn: str, schema: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT key, first_text, second_text, contradicts FROM {} ORDER BY key").format(
                sql.Identifier(schema, "contradiction_answers")
            )
        )
        return list(await cur.fetchall())


async def _replay(
    topics: Topics, pg_dsn: str, group: str, realm: str, client: LLMClient, *, swap: bool
) -> ReplayResult:
    """A replay composed as ``tidegraph replay`` composes it."""
    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        pg_dsn, min_size=1, max_size=4, open=False, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    try:
        registry = ModelRegistry(pool=pool, llm=client, read_through=(f"realm_{realm}",))
        pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
        return await replay_realm(
            ReplayOptions(
                realm=realm,
                bootstrap=topics.bootstrap,
                pg_dsn=pg_dsn,
                topic=topics.documents,
                swap=swap,
                label="contradictions" if not swap else None,
            ),
            pipeline.prepare,
            registry.embedder_for,
            judge_for=registry.judge_for,
        )
    finally:
        await pool.close()
