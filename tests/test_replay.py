"""Replay: a realm rebuilt from the log equals the live one, swaps in without losing a record,
and an audit copy shows the realm as it stood at an instant (DESIGN invariants 6 and 7)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.communities.store import build_communities
from tidegraph.indexer.extraction.chunking import chunk_document
from tidegraph.indexer.extraction.fanout import LOOKAHEAD
from tidegraph.indexer.extraction.pipeline import Pipeline, PipelineConfig
from tidegraph.indexer.models.client import LLMClient
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.indexer.replay.applier import ShadowApplier
from tidegraph.indexer.replay.diff import diff_schemas, feed_changes
from tidegraph.indexer.replay.errors import ReplayBusy, ShadowExists
from tidegraph.indexer.replay.rebuild import ReplayOptions, ReplayResult, replay_realm
from tidegraph.indexer.replay.swap import baseline, rebuild_differences
from tidegraph.indexer.retention.archive import archive
from tidegraph.infra.composition import ModelRegistry
from tidegraph.infra.package_files import sample_corpus
from tidegraph.query_service.reads import change_from_row
from tidegraph.schemas.realm_config import RealmConfig, preset
from tidegraph.store import positions, realm_positions
from tidegraph.store.errors import Fenced
from tidegraph.store.realms import (
    create_realm,
    ensure_control,
    open_realm,
    set_coverage_telemetry,
)

from indexer_helpers import (
    Topics,
    believed_at,
    dead_letters,
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
from llm_server import ScriptedLLMServer
from model_helpers import load_corpus, running_model_indexer, sample
from query_helpers import api_client, open_pool, query_data

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

NARRATIVE = preset("narrative", embedder="hashing:64")
CORPUS = [(p.name, p.read_text()) for p in sorted(sample_corpus().glob("*.md"))]
"""The sample corpus (file name, text): enough of a graph to make communities of."""


def options(topics: Topics, pg_dsn: str, realm: str, group: str, **kw: Any) -> ReplayOptions:
    return ReplayOptions(
        realm=realm,
        bootstrap=topics.bootstrap,
        pg_dsn=pg_dsn,
        topic=topics.documents,
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


async def schema_layout(dsn: str, schema: str) -> set[str]:
    """Index and constraint definitions of a schema, with its name taken out."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %(s)s"
            " UNION ALL SELECT conrelid::regclass::text || ' ' || conname || ' '"
            " || pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE connamespace = %(s)s::regnamespace",
            {"s": schema},
        )
        layout = {str(r[0]).replace(schema, "<schema>") for r in await cur.fetchall()}
    assert any("FOREIGN KEY" in d for d in layout) and any("hnsw" in d for d in layout)
    return layout


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
    # Up to the live realm's own position: past its last record, before the other
    # realm's record that follows it.
    assert kept.written == 6 and kept.realm_records == 6 and kept.records_read == 9
    assert await schema_diff(pg_dsn, live, kept.schema) == []
    # Loaded without them, the shadow ends with the live realm's indexes and foreign keys.
    assert await schema_layout(pg_dsn, kept.schema) == await schema_layout(pg_dsn, live)

    # A reader holding the feed table makes the first swap attempt time out; it changes
    # nothing, and the next attempt goes through once the reader is done.
    swapping = asyncio.Event()

    async def reader() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            await conn.execute(
                sql.SQL("LOCK TABLE {}.outbox IN ACCESS SHARE MODE").format(sql.Identifier(live))
            )
            await swapping.wait()
            await asyncio.sleep(0.8)
            await conn.rollback()

    holding = asyncio.create_task(reader())
    await asyncio.sleep(0.2)
    registry = ModelRegistry()
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
    result = await replay_realm(
        options(topics, pg_dsn, realm, group, lock_timeout=0.3),
        pipeline.prepare,
        registry.embedder_for,
        on_progress=lambda p: swapping.set() if p.phase == "swapping" else None,
    )
    await holding
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


def _doc(i: int) -> str:
    return (
        f"Knight{i} Pendragon is an ally of Squire{i} Vale. "
        f"Squire{i} Vale worked with Knight{(i + 1) % 7} Pendragon."
    )


async def test_records_published_during_the_replay_all_reach_the_swapped_in_realm(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    live = f"realm_{realm}"
    initial = [upsert(realm, f"a{i}.md", _doc(i), order_key=str(i)) for i in range(40)]
    during = [upsert(realm, f"b{i}.md", _doc(100 + i), order_key=str(100 + i)) for i in range(30)]
    during += [upsert(realm, f"a{i}.md", _doc(200 + i), order_key=str(i)) for i in range(5)]
    during.append(delete(realm, "a7.md"))
    registry = ModelRegistry()
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)

    async def slow_prepare(record: Any, info: Any) -> Any:
        await asyncio.sleep(0.01)  # so the rebuild overlaps the publishing below
        return await pipeline.prepare(record, info)

    reads: list[float] = []
    failures: list[BaseException] = []
    stop = asyncio.Event()

    async def query_loop() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            while not stop.is_set():
                started = asyncio.get_running_loop().time()
                try:
                    cur = await conn.execute(
                        sql.SQL(
                            "SELECT count(*) FROM {}.relations WHERE status = 'current'"
                        ).format(sql.Identifier(live))
                    )
                    row = await cur.fetchone()
                    assert row is not None and row[0] > 0
                except BaseException as exc:
                    failures.append(exc)
                reads.append(asyncio.get_running_loop().time() - started)
                await asyncio.sleep(0.01)

    async with running_indexer(
        topics, pg_dsn, group, default_realm=NARRATIVE, backoff_initial=0.05
    ):
        await publish(topics, initial)

        async def initial_done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(initial)

        await wait_for(initial_done, 60, "initial documents")

        replayed = asyncio.Event()

        async def trickle() -> None:
            # Keeps publishing across the swap, and a little after it.
            for rec in during:
                await publish(topics, [rec])
                await asyncio.sleep(0.02)
            i = 0
            while not replayed.is_set() or i % 10:
                rec = upsert(realm, f"c{i}.md", _doc(300 + i), order_key=str(300 + i))
                during.append(rec)
                await publish(topics, [rec])
                await asyncio.sleep(0.02)
                i += 1

        querying = asyncio.create_task(query_loop())
        publishing = asyncio.create_task(trickle())
        result = await asyncio.wait_for(
            replay_realm(
                options(topics, pg_dsn, realm, group, swap_margin=2),
                slow_prepare,
                registry.embedder_for,
            ),
            120,
        )
        replayed.set()
        await publishing
        total = len(initial) + len(during)

        async def all_done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= total

        await wait_for(all_done, 60, "documents published during the replay")
        stop.set()
        await querying

    assert result.swapped and result.swap is not None
    assert not failures, failures[:3]
    assert max(reads) < 2.0
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT doc_key, status FROM {}.documents").format(sql.Identifier(live))
        )
        docs = dict(await cur.fetchall())
    assert set(docs) == {r.doc_key for r in initial + during}
    assert docs["a7.md"] == "deleted"
    # What the indexer did after the swap, on top of the rebuild, is what the log says:
    # a fresh rebuild of the whole log equals it, history included.
    check = await replay(topics, pg_dsn, realm, group, swap=False, label="check")
    assert await schema_diff(pg_dsn, live, check.schema) == []
    # The rebuild refreshed the statistics of the tables it grew (autovacuum's own runs
    # are recorded apart, as last_autoanalyze).
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT relname FROM pg_stat_user_tables WHERE schemaname = %s"
            " AND last_analyze IS NOT NULL ORDER BY relname",
            (check.schema,),
        )
        assert {r[0] for r in await cur.fetchall()} >= {"relations", "entities", "mentions"}


async def test_until_builds_the_realm_as_it_stood_at_that_instant(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    instants, _ = await build_live(topics, pg_dsn, realm, group)
    until = instants[1]  # after "Arthur is an enemy of Mordred", before d1 changed
    audit = await replay(topics, pg_dsn, realm, group, until=until, swap=True)
    assert not audit.swapped and audit.schema == f"realm_{realm}__audit_1"
    assert audit.realm_records == 3 and audit.records_read == 5
    then = await believed_at(pg_dsn, realm, until)
    assert await current_in(pg_dsn, audit.schema) == then
    assert ("Arthur", "enemy_of", "Mordred", False, "current") in then
    assert ("Arthur", "ally_of", "Mordred", False, "superseded") in then
    for t in (instants[0] - timedelta(seconds=30), instants[0], until):
        assert await believed_in(pg_dsn, audit.schema, t) == await believed_at(pg_dsn, realm, t)
    # The live realm went on; the copy did not.
    assert await current_in(pg_dsn, f"realm_{realm}") != then
    # Audit copies may run beside a rebuild; two rebuilds of one realm may not.
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as other:
        await other.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"tidegraph:replay:{realm}",))
        second = await replay(topics, pg_dsn, realm, group, until=until, label="again")
        assert second.schema == f"realm_{realm}__audit_again"
        with pytest.raises(ReplayBusy):
            await replay(topics, pg_dsn, realm, group)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM tidegraph.realms WHERE schema_name = %s", (audit.schema,)
        )
        assert await cur.fetchone() == (0,)


async def test_replay_of_a_model_built_realm_extracts_from_the_cache_only(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
    llm_fixtures_dir: Path,
) -> None:
    corpus = load_corpus(llm_fixtures_dir)
    # Extraction by the model, embeddings offline: every model call is an extraction call.
    config = RealmConfig.model_validate(
        {**corpus.realm_config.model_dump(), "embedder": "hashing:16"}
    )
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    live = f"realm_{realm}"
    records = corpus.records(realm) + corpus.records(realm, corpus.changed)
    async with running_model_indexer(
        topics, pg_dsn, group, llm=make_llm_client(), default_realm=config
    ):
        await publish(topics, records)

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        await wait_for(done, 120, "corpus indexed")
    assert llm_server.calls["chat"] > 0
    snapshot = await realm_snapshot(pg_dsn, realm)
    llm_server.reset()
    hits_before = sample("tidegraph_extraction_cache_hits_total", realm=realm)
    misses_before = sample("tidegraph_extraction_cache_misses_total", realm=realm)

    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        pg_dsn, min_size=1, max_size=4, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    try:
        registry = ModelRegistry(pool=pool, llm=make_llm_client(), read_through=(live,))
        pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
        result = await replay_realm(
            options(topics, pg_dsn, realm, group), pipeline.prepare, registry.embedder_for
        )
    finally:
        await pool.close()

    assert sum(llm_server.calls.values()) == 0, llm_server.calls
    assert sample("tidegraph_extraction_cache_misses_total", realm=realm) == misses_before
    assert sample("tidegraph_extraction_cache_hits_total", realm=realm) - hits_before == len(
        records
    )  # one chunk per corpus document
    assert result.swapped and result.retired is not None
    assert await realm_snapshot(pg_dsn, realm) == snapshot
    assert await schema_diff(pg_dsn, live, result.retired) == []
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT count(*) FROM {}.extraction_cache").format(sql.Identifier(live))
        )
        row = await cur.fetchone()
    assert row is not None and row[0] == len(records)  # the cache moved with the realm


@pytest.mark.parametrize("lookahead", [None, 3], ids=["whole-document", "lookahead-3"])
async def test_a_long_document_is_extracted_side_by_side_and_replayed_from_the_cache(
    lookahead: int | None,
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
    llm_fixtures_dir: Path,
) -> None:
    """The corpus as one long document in small chunks: the indexer extracts its chunks
    several at a time, each against the names of the chunks its rule gives it — the lead's
    when the lookahead covers the whole document, a prefix growing with its position when
    it does not; a replay computes the same contexts, so it asks the model nothing and
    rebuilds the same realm."""
    corpus = load_corpus(llm_fixtures_dir)
    config = RealmConfig.model_validate(
        {**corpus.realm_config.model_dump(), "embedder": "hashing:16"}
    )
    chunking = PipelineConfig(chunk_chars=300)
    if lookahead is not None:
        chunking = PipelineConfig(chunk_chars=300, lookahead=lookahead)
    text = "\n\n".join(d.content.split("\n\n", 1)[1].strip() for d in corpus.documents)
    chunks = chunk_document(text, chunking.chunk_chars, chunking.overlap_chars)
    assert 12 <= len(chunks) <= LOOKAHEAD + 1
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    live = f"realm_{realm}"
    llm_server.latency = 0.05
    async with running_model_indexer(
        topics,
        pg_dsn,
        group,
        # attempts long enough that a loaded machine never turns a slow answer into a retry,
        # which the call count below would take for an extra question
        llm=make_llm_client(max_in_flight=8, deadline=60.0, attempt_timeout=30.0),
        default_realm=config,
        pipeline_config=chunking,
    ):
        await publish(topics, [upsert(realm, "saga.md", text, title="The Ellison saga")])

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 1

        await wait_for(done, 120, "the document indexed")
    assert llm_server.calls["chat"] == 2 * len(chunks)  # a first pass and a gleaning each
    # one document: every slot busy, or the lookahead's chunks after the lead
    assert llm_server.max_concurrent == min(8, chunking.lookahead + 1)
    known = dict(
        _chunk_and_known(body["messages"][-1]["content"])
        for route, body in llm_server.requests
        if route == "chat" and "<already_extracted>" not in body["messages"][-1]["content"]
    )
    assert known.pop(chunks[0].text) == ""  # the lead: title and source only
    lead_names = known[chunks[1].text]
    assert "Mara Ellison" in lead_names
    for k, chunk in enumerate(chunks[1:], start=1):
        if k <= chunking.lookahead + 1:
            assert known[chunk.text] == lead_names  # the lead's names
        else:  # the names of the chunks before k - lookahead: more than the lead's
            assert len(known[chunk.text]) >= len(lead_names)
    if lookahead is not None:
        assert len(set(known.values())) > 1
    snapshot = await realm_snapshot(pg_dsn, realm)
    llm_server.reset()

    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        pg_dsn, min_size=1, max_size=4, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    try:
        registry = ModelRegistry(pool=pool, llm=make_llm_client(), read_through=(live,))
        pipeline = Pipeline(registry.extractor_for, registry.embedder_for, chunking)
        result = await replay_realm(
            options(topics, pg_dsn, realm, group), pipeline.prepare, registry.embedder_for
        )
    finally:
        await pool.close()
    assert sum(llm_server.calls.values()) == 0, llm_server.calls
    assert result.swapped and result.retired is not None
    assert await realm_snapshot(pg_dsn, realm) == snapshot
    assert await schema_diff(pg_dsn, live, result.retired) == []


def _chunk_and_known(prompt: str) -> tuple[str, str]:
    """The chunk of a first-pass extraction prompt, and its known-entities block."""
    chunk = prompt.partition("<chunk>\n")[2].rpartition("\n</chunk>")[0]
    return chunk, prompt.partition("<known_entities>")[2].partition("</known_entities>")[0]


async def _cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tidegraph.infra.cli",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_changed_configuration_rebuilds_and_the_feed_tells_what_changed(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    live = f"realm_{realm}"
    await build_live(topics, pg_dsn, realm, group)
    feed = await outbox(pg_dsn, realm)
    env = {
        **os.environ,
        "TIDEGRAPH_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TIDEGRAPH_PG_DSN": pg_dsn,
        "TIDEGRAPH_TOPIC_PREFIX": topics.prefix,
    }

    # An unchanged rebuild kept for inspection, through the command line.
    code, out, err = await _cli(
        "replay",
        "--realm",
        realm,
        "--no-swap",
        "--shadow-name",
        "cli",
        "--json",
        env=env,
    )
    assert code == 0, err
    kept = json.loads(out)
    assert kept["schema"] == f"{live}__shadow_cli" and kept["swapped"] is False
    assert "records read" in err and "ETA" in err
    code, out, err = await _cli(
        "diff", "--realm", realm, "--against", kept["schema"], "--history", env=env
    )
    assert (code, out) == (0, ""), err
    with pytest.raises(ShadowExists):
        await replay(topics, pg_dsn, realm, group, swap=False, label="cli")

    # Without exclusive groups "enemy of" no longer supersedes "ally of"; another embedder.
    changed = RealmConfig.model_validate({**NARRATIVE.model_dump(), "exclusive_groups": []})
    result = await replay(topics, pg_dsn, realm, group, config=changed, embedder="hashing:32")
    assert result.swapped and result.swap is not None and result.retired is not None
    assert result.config_changed and not kept["config_changed"]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        info = await open_realm(conn, realm)
        assert (info.embedder, info.dimension, info.exclusive_groups) == ("hashing:32", 32, ())
        cur = await conn.execute(
            sql.SQL(
                "SELECT seq, idx, kind, space, belief_time, payload FROM {}.outbox"
                " WHERE seq > %s ORDER BY seq, idx"
            ).format(sql.Identifier(live)),
            (feed[-1][0],),
        )
        rebuild = [change_from_row(realm, tuple(r)) for r in await cur.fetchall()]
    assert [c.seq for c in rebuild] == [feed[-1][0] + 1] * len(rebuild)
    assert rebuild[0].kind == "communities_stale"
    restored = [
        (c.kind, c.relation.subject, c.relation.predicate, c.relation.object)
        for c in rebuild[1:]
        if c.relation is not None
    ]
    assert ("relation_restored", "Arthur", "enemy_of", "Mordred") in restored
    assert result.swap.changes == len(rebuild)
    # The command line reports the difference with exit status 1.
    code, out, err = await _cli("diff", "--realm", realm, "--against", result.retired, env=env)
    assert code == 1 and "Arthur enemy_of Mordred" in out, (out, err)
    code, _, err = await _cli("diff", "--realm", realm, "--against", "nosuchschema", env=env)
    assert code == 2 and "neither a realm" in err
    # Copies are dropped by name; the live realm never is.
    code, out, err = await _cli("replay", "--realm", realm, "--drop", kept["schema"], env=env)
    assert code == 0, err
    code, _, err = await _cli("replay", "--realm", realm, "--drop", live, env=env)
    assert code == 2 and "not a shadow" in err
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (kept["schema"],)
        )
        assert await cur.fetchone() == (0,)
        cur = await conn.execute(
            "SELECT count(*) FROM tidegraph.consumer_positions WHERE group_id = %s",
            (f"tidegraph-replay:{kept['schema']}",),
        )
        assert await cur.fetchone() == (0,)


async def test_differences_known_before_the_lock_are_brought_up_to_date_by_key(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    # Two realms fed the same documents, one without exclusive groups, stand for the old
    # graph and a rebuild with a changed configuration: the baseline comparison patched
    # with what either changed since must equal a full comparison made afterwards.
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    old, new, group = unique_name("r"), unique_name("r"), unique_name("g")
    changed = RealmConfig.model_validate({**NARRATIVE.model_dump(), "exclusive_groups": []})
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(conn, new, changed)
    sent = 0
    base = None
    async with running_indexer(topics, pg_dsn, group, default_realm=NARRATIVE):
        for n, batch in enumerate(BATCHES):
            records = [
                delete(realm, key) if not text else upsert(realm, key, text, order_key=order)
                for key, text, order in batch
                for realm in (old, new)
            ]
            await publish(topics, records)
            sent += len(records)

            async def done(n: int = sent) -> bool:
                return await stored_position(pg_dsn, group, topics.documents) >= n

            await wait_for(done, 60, "batch applied")
            if n == 1:
                async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as c:
                    base = await baseline(c, f"realm_{old}", f"realm_{new}")
    assert base is not None
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        patched = await rebuild_differences(conn, f"realm_{old}", f"realm_{new}", base)
        full = await diff_schemas(conn, f"realm_{old}", f"realm_{new}")
    assert patched == full and full and base.differences != full
    assert ("relation_restored", "default", "enemy_of") in {
        (k, s, p["relation"]["predicate"]) for k, s, p in feed_changes(full) if "relation" in p
    }


def _unindexable_key() -> str:
    """1,000 random supplementary-plane characters: 4,000 bytes in UTF-8, beyond the 2,704
    bytes of a B-tree entry even after compression, yet within the contract's 1,024
    characters."""
    rng = random.Random(11)
    return "".join(chr(rng.randrange(0x20000, 0x2A6DF)) for _ in range(1000))


async def test_values_postgresql_refuses_fail_the_version_and_never_hold_up_the_partition(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    live = f"realm_{realm}"
    records = [
        upsert(realm, "ada.md", "Ada Lovelace worked with Charles Babbage."),
        # a NUL in the title: the version fails and withdraws what the first one taught
        upsert(realm, "ada.md", "Ada Lovelace worked with Mary Somerville.", title="Notes\0"),
        upsert(realm, "meta.md", "Mary Somerville knew Ada Lovelace.").model_copy(
            update={"metadata": {"note": "a\0b"}}
        ),  # jsonb has no NUL either
        upsert(realm, _unindexable_key(), "Charles Babbage designed the Analytical Engine."),
        delete(realm, "gone\0.md"),  # no such document can exist: a no-op
        upsert(realm, "version.md", "Ada Lovelace knew Mary Somerville.", source_version="7\0"),
        # a NUL in the text only reads as a space: the document is indexed
        upsert(realm, "text.md", "Grace Hopper\0worked with Howard Aiken.\0"),
        upsert(realm, "after.md", "Mary Somerville worked with Charles Babbage."),
    ]
    async with running_indexer(topics, pg_dsn, group, default_realm=NARRATIVE):
        await publish(topics, records)

        async def all_passed() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        await wait_for(all_passed, 60, "every record, refused ones included")

    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT doc_key, status, error, title, source_version FROM {}.documents"
            ).format(sql.Identifier(live))
        )
        docs = {k: (s, e, t, v) for k, s, e, t, v in await cur.fetchall()}
    assert set(docs) == {"ada.md", "meta.md", "version.md", "text.md", "after.md"}
    assert docs["after.md"][0] == "indexed" and docs["text.md"][0] == "indexed"
    for key in ("ada.md", "meta.md", "version.md"):
        status, error, title, version = docs[key]
        assert status == "failed" and error.startswith("cannot be stored: ") and title is None
        assert version is None
    assert "NUL" in docs["ada.md"][1]
    current = await current_in(pg_dsn, live)
    assert ("Ada Lovelace", "worked_with", "Charles Babbage", False, "current") not in current
    assert ("Grace Hopper", "worked_with", "Howard Aiken", False, "current") in current

    dead = [headers for _, headers in await dead_letters(topics, 4)]
    assert [h["tg-error-class"] for h in dead] == [b"unstorable"] * 4
    assert [h["tg-origin"].rsplit(b"/", 1)[1] for h in dead] == [b"1", b"2", b"3", b"5"]
    assert all(h["tg-error"].startswith(b"PostgreSQL refused a value") for h in dead)

    # A rebuild meets the same refusals and records them the same way.
    copy = await replay(topics, pg_dsn, realm, group, swap=False, label="refused")
    assert copy.realm_records == len(records)
    assert await schema_diff(pg_dsn, live, copy.schema) == []


async def test_a_second_claim_fences_the_replays_batch_and_its_position_stays(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """DESIGN invariant 2 for the replay: a batch moves the shadow's position once, by
    compare-and-set, under the epoch it claimed; after another claim it commits nothing."""
    realm, group, topic = unique_name("r"), unique_name("g"), unique_name("t")
    async with await AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        info = await create_realm(conn, realm, RealmConfig(embedder="hashing:32"))
        claim, start = await positions.claim(conn, group, topic, 0, 0)
        await realm_positions.ensure(conn, info.schema, realm, topic, 0)
        registry = ModelRegistry()
        applier = ShadowApplier(
            conn,
            info,
            claim,
            start,
            Pipeline(registry.extractor_for, registry.embedder_for).prepare,
            registry.embedder_for,
        )
        await applier.write(await applier.plan(0, 5, []))
        assert await stored_position(pg_dsn, group, topic) == 5
        assert await realm_positions.stand(conn, info.schema, topic, 0) == 5
        await positions.claim(conn, group, topic, 0, 0)  # another replay into the schema
        with pytest.raises(Fenced):
            await applier.write(await applier.plan(5, 9, []))
        assert await stored_position(pg_dsn, group, topic) == 5
        assert await realm_positions.stand(conn, info.schema, topic, 0) == 5


async def _retention_state(
    pg_dsn: str, schema: str
) -> tuple[dict[str, tuple[int, datetime]], list[tuple[Any, ...]], dict[int, str]]:
    """(archived name → (id, archived_since), retrieval rows without their own ids, entity
    id → name)."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        s = sql.Identifier(schema)
        cur = await conn.execute(
            sql.SQL(
                "SELECT name, id, archived_since FROM {}.entities WHERE archived_since IS NOT NULL"
            ).format(s)
        )
        archived = {str(n): (int(i), t) for n, i, t in await cur.fetchall()}
        cur = await conn.execute(
            sql.SQL(
                "SELECT at, query_hash, mode, entity_ids, community_ids FROM {}.retrievals"
                " ORDER BY id"
            ).format(s)
        )
        rows = [tuple(r) for r in await cur.fetchall()]
        cur = await conn.execute(sql.SQL("SELECT id, name FROM {}.entities").format(s))
        names = {int(i): str(n) for i, n in await cur.fetchall()}
    return archived, rows, names


async def test_a_swap_keeps_archival_and_coverage_telemetry(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """Retention state is not in the log: the swap carries it into the rebuilt realm by
    entity id (the same ids: they derive from log offsets), drops what resolves to no
    entity, and announces nothing for it on the feed. A document naming an archived
    entity again restored it through the live indexer, and the rebuild agrees."""
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    live = f"realm_{realm}"
    _, applied = await build_live(topics, pg_dsn, realm, group)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        info = await set_coverage_telemetry(conn, realm, True)
        async with (
            open_pool(pg_dsn) as pool,
            api_client(pool, embedder=HashingEmbedder(64)) as client,
        ):
            for q in ("Who worked with Lancelot?", "Who is an enemy of Mordred?"):
                await query_data(client, realm, query=q, mode="local")
        cur = await conn.execute(
            sql.SQL("SELECT id, name FROM {}.entities WHERE name = ANY(%s)").format(
                sql.Identifier(live)
            ),
            (["Mordred", "Lancelot", "Gawain"],),
        )
        ids = {str(n): int(i) for i, n in await cur.fetchall()}
        assert len(ids) == 3
        await archive(conn, info, list(ids.values()))
        # a row naming an id no entity has keeps only the ids that resolve; one naming
        # none is dropped
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.retrievals (query_hash, mode, entity_ids, community_ids)"
                " VALUES ('h1', 'local', %s, '{{7}}'), ('h2', 'local', '{{42}}', '{{}}')"
            ).format(sql.Identifier(live)),
            ([42, ids["Mordred"]],),
        )
    # Lancelot is named again: the live indexer restores him
    async with running_indexer(topics, pg_dsn, group, default_realm=NARRATIVE):
        await publish(
            topics, [upsert(realm, "d5.md", "Lancelot worked with Arthur.", order_key="4")]
        )

        async def restored() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= applied + 1

        await wait_for(restored, 60, "d5 applied")
    archived, rows, names = await _retention_state(pg_dsn, live)
    assert set(archived) == {"Mordred", "Gawain"}
    assert len(rows) == 4
    feed = await outbox(pg_dsn, realm)
    assert "entity_unarchived" in {k for _, _, k in feed[-3:]}

    result = await replay(topics, pg_dsn, realm, group)
    assert result.swapped and result.swap is not None and not result.config_changed
    assert (result.swap.archived_carried, result.swap.retrievals_carried) == (2, 3)
    archived_after, rows_after, names_after = await _retention_state(pg_dsn, live)
    assert archived_after == archived, "same ids, same instants"
    expected = [
        (at, h, mode, [i for i in e if i in names and names_after.get(i) == names[i]], [])
        for at, h, mode, e, _ in rows
    ]
    assert rows_after == [r for r in expected if r[3]]
    assert [r[1] for r in rows_after] == [rows[0][1], rows[1][1], "h1"]
    # nothing on the feed for it: the rebuild commit is the notice alone
    new_feed = await outbox(pg_dsn, realm)
    assert new_feed == [*feed, (feed[-1][0] + 1, 0, "communities_stale")]
    # archived in the rebuilt realm means withheld from retrieval there
    async with open_pool(pg_dsn) as pool, api_client(pool, embedder=HashingEmbedder(64)) as client:
        found = await query_data(client, realm, query="Who is an enemy of Mordred?", mode="local")
    assert "Mordred" not in {x for r in found["relations"] for x in (r["subject"], r["object"])}


async def _community_answers(
    pool: AsyncConnectionPool[AsyncConnection[Any]], realm: str, at: datetime | None = None
) -> tuple[Any, Any]:
    """The communities endpoint and a ``global`` answer (ids included: a rebuild of the
    same log and configuration keeps them)."""
    async with api_client(pool, embedder=HashingEmbedder(64)) as client:
        listed = (await client.get(f"/v1/realms/{realm}/communities")).json()
        body: dict[str, Any] = {"query": "Arthur and his allies", "mode": "global"}
        if at is not None:
            body["as_believed_at"] = at.isoformat()
        answer = await query_data(client, realm, **body)
    reports = [{k: v for k, v in c.items() if k != "score"} for c in answer["communities"]]
    return listed, (reports, answer["stats"]["warnings"])


async def test_a_replay_keeps_the_realms_community_builds(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """Communities are not in the log: the swap carries every build the realm kept, so the
    communities endpoint and ``global`` answers — now and as believed before the latest
    build — are the same after the replay; `tidegraph diff` compares them."""
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    live = f"realm_{realm}"
    records = [upsert(realm, name, text, order_key=str(i)) for i, (name, text) in enumerate(CORPUS)]
    await publish(topics, records)
    async with running_indexer(topics, pg_dsn, group, default_realm=NARRATIVE):

        async def applied() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        await wait_for(applied, 60, "the corpus applied")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        info = await open_realm(conn, realm)
        first = await build_communities(conn, info, HashingEmbedder(64))
        assert first is not None
        between = datetime.now(UTC)
        await asyncio.sleep(0.05)
        second = await build_communities(conn, info, HashingEmbedder(64))
        assert second is not None
    async with open_pool(pg_dsn) as pool:
        before = await _community_answers(pool, realm)
        before_at = await _community_answers(pool, realm, between)
        assert before[0]["communities"] and before[1][0], before
        assert before_at[1][0] and before_at[1][0] != before[1][0]  # the earlier build

        # A shadow holds no communities until the swap: diff says where they differ.
        kept = await replay(topics, pg_dsn, realm, group, swap=False, label="nocomm")
        differences = await schema_diff(pg_dsn, live, kept.schema, history=False)
        assert differences and {d.kind for d in differences} == {"community"}

        swapped = await replay(topics, pg_dsn, realm, group)
        assert swapped.swap is not None and swapped.swap.communities_carried > 0
        assert await _community_answers(pool, realm) == before
        assert await _community_answers(pool, realm, between) == before_at
    assert swapped.retired is not None
    assert await schema_diff(pg_dsn, swapped.retired, live, history=False) == []
