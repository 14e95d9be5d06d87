"""The model path end to end: the fixture corpus through the real indexer, with the
scripted OpenAI-compatible server for extraction and embeddings, the extraction cache in
PostgreSQL, real Kafka (issue 5; DESIGN invariants 3, 6 and 8).

The expected graph is the one ``tests/fixtures/llm/README.md`` states, written out here
by names so a difference shows which entity, relation or mention is wrong.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from tidegraph.indexer.extraction.chunking import chunk_document
from tidegraph.indexer.extraction.pipeline import PipelineConfig
from tidegraph.indexer.models.client import LLMClient
from tidegraph.indexer.models.errors import LLMUnavailable
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.names import realm_schema
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import holds, positions, realm_positions
from tidegraph.store.realms import create_realm, ensure_control

from indexer_helpers import Topics, make_topics, outbox, publish, stored_position, upsert, wait_for
from llm_server import Fault, ScriptedLLMServer
from model_helpers import (
    Corpus,
    StoredEntity,
    StoredGraph,
    StoredRelation,
    Triple,
    dead_letter_count,
    load_corpus,
    realm_counts,
    realm_embedder,
    running_model_indexer,
    sample,
    stored_graph,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

MakeClient = Callable[..., LLMClient]


# -- the expected graph (tests/fixtures/llm/README.md) ---------------------------------


def _e(typ: str, description: str, *aliases: str) -> StoredEntity:
    return StoredEntity(typ, frozenset(aliases), description, dormant=False)


EXPECTED_ENTITIES: dict[str, StoredEntity] = {
    "Ada Quill": _e(
        "Person", "Director of the Northgate Institute since 1879 and mentor of Lena Ellison."
    ),
    "Corran Line": _e("Organization", "Shipping line that undercut both yards."),
    "Henrik Vale": _e(
        "Person",
        "Formerly master of the Kestrel; senior master at Rookwater Yard.",
        "Captain Vale",
        "H. Vale",
        "Vale",
    ),
    "Kestrel": _e("Artifact", "Clipper built by the yard, under repair in 1883."),
    "Lena Ellison": _e("Person", "Daughter of Mara Ellison; pupil of Ada Quill from 1887."),
    "Mara Ellison": _e(
        "Person",
        "Naval architect born in Port Alder; first woman to complete the Northgate"
        " Institute course.",
        "Ellison",
        "M. Ellison",
    ),
    "Northgate Institute": _e("Organization", "Institute where naval architecture was taught."),
    "Port Alder": _e("Place", "Fishing town on the northern coast."),
    "Rookwater Yard": _e("Organization", "Shipyard founded by Tobias Rook in 1885."),
    "Tobias Rook": _e(
        "Person", "Co-founder of Wrenfield Shipyard who put up most of the capital.", "Rook"
    ),
    "Wrenfield Shipyard": _e(
        "Organization", "Shipyard on the Alder estuary founded in March 1875.", "Wrenfield"
    ),
}

ME, TR = "Mara Ellison", "Tobias Rook"


def _r(
    subject: str,
    predicate: str,
    obj: str,
    docs: str,
    *,
    negated: bool = False,
    vf: str | None = None,
    vt: str | None = None,
    superseded_by: str | None = None,
) -> tuple[Triple, StoredRelation]:
    """One row of the README's relation table; ``superseded_by`` names the predicate of
    the relation on the same ordered pair that superseded it."""
    doc_set = frozenset(docs.split())
    return (subject, predicate, obj, negated), StoredRelation(
        vf,
        vt,
        len(doc_set),
        doc_set,
        "current" if superseded_by is None else "superseded",
        None if superseded_by is None else (subject, superseded_by, obj),
    )


EXPECTED_RELATIONS: dict[Triple, StoredRelation] = dict([
    _r(ME, "born_in", "Port Alder", "01"),                                         # 1
    _r(ME, "educated_at", "Northgate Institute", "01", vf="1868", vt="1872"),      # 2
    _r(ME, "founded", "Wrenfield Shipyard", "02", vf="1875-03"),                   # 3
    _r(TR, "founded", "Wrenfield Shipyard", "02", vf="1875-03"),                   # 4
    _r(ME, "friend_of", TR, "02", superseded_by="rival_of"),                       # 5
    _r(ME, "designed", "Kestrel", "03"),                                           # 6
    _r(TR, "worked_with", ME, "03"),                                               # 7
    _r("Wrenfield Shipyard", "built", "Kestrel", "03 07"),                         # 8
    _r("Henrik Vale", "captained", "Kestrel", "04", vf="1880", vt="1884"),         # 9
    _r("Ada Quill", "led", "Northgate Institute", "05 10", vf="1879"),             # 10
    _r("Henrik Vale", "worked_with", "Corran Line", "06", negated=True),           # 11
    _r(ME, "rival_of", TR, "08", superseded_by="ally_of"),                         # 12
    _r(TR, "founded", "Rookwater Yard", "08", vf="1885"),                          # 13
    _r("Henrik Vale", "member_of", "Rookwater Yard", "09"),                        # 14
    _r("Ada Quill", "mentored", "Lena Ellison", "10", vf="1887"),                  # 15
    _r("Lena Ellison", "child_of", ME, "10"),                                      # 16
    _r(ME, "ally_of", TR, "11", vf="1890"),                                        # 17
    _r(ME, "opponent_of", "Corran Line", "11"),                                    # 18
    _r(TR, "opponent_of", "Corran Line", "11"),                                    # 19
    _r("Corran Line", "undercut", "Wrenfield Shipyard", "11"),                     # 20
    _r("Corran Line", "undercut", "Rookwater Yard", "11"),                         # 21
    _r(ME, "led", "Wrenfield Shipyard", "12", vf="1875", vt="1899"),               # 22
    _r(ME, "died_in", "Port Alder", "12"),                                         # 23
])  # fmt: skip

EXPECTED_MENTIONS: dict[str, frozenset[str]] = {
    name: frozenset(docs.split())
    for name, docs in {
        "Ada Quill": "05 10",
        "Corran Line": "06 11",
        "Henrik Vale": "04 06 09",
        "Kestrel": "03 04 07 09",
        "Lena Ellison": "10",
        "Mara Ellison": "01 02 03 08 10 11 12",
        "Northgate Institute": "01 05 10",
        "Port Alder": "01 06 12",
        "Rookwater Yard": "08 09 11",
        "Tobias Rook": "02 03 08 11",
        "Wrenfield Shipyard": "02 03 05 07 08 11 12",
    }.items()
}

GATED_NAMES = {"He", "£48,000", "Mara Ellison and Tobias Rook"}
GATED_PREDICATES = {"associated_with", "praised", "reported_revenue"}
ALL_DOCS = [f"{i:02d}" for i in range(1, 13)]


def expected_after_change() -> tuple[
    dict[str, StoredEntity], dict[Triple, StoredRelation], dict[str, frozenset[str]]
]:
    """The README's "changed document" section applied to the expected graph."""
    entities = dict(EXPECTED_ENTITIES)
    entities["Lena Ellison"] = replace(
        entities["Lena Ellison"],
        description="Succeeded her mother at the head of Wrenfield Shipyard in 1899.",
    )
    relations = dict(EXPECTED_RELATIONS)
    relations.update([_r("Lena Ellison", "led", "Wrenfield Shipyard", "12", vf="1899")])
    mentions = dict(EXPECTED_MENTIONS)
    mentions["Lena Ellison"] = frozenset({"10", "12"})
    return entities, relations, mentions


def assert_graph(
    graph: StoredGraph,
    entities: dict[str, StoredEntity],
    relations: dict[Triple, StoredRelation],
    mentions: dict[str, frozenset[str]],
) -> None:
    """The stored graph is exactly the expected one; differences are reported by name."""
    assert graph.documents == dict.fromkeys(ALL_DOCS, "indexed")
    assert graph.live_chunks == dict.fromkeys(ALL_DOCS, 1)
    assert not GATED_NAMES & set(graph.entities)
    assert not GATED_PREDICATES & {p for _, p, _, _ in graph.relations}
    assert not [n for n, e in graph.entities.items() if e.type == "Concept"]
    extra, missing = set(graph.entities) - set(entities), set(entities) - set(graph.entities)
    assert not extra and not missing, f"entities: extra {extra}, missing {missing}"
    for name, want in entities.items():
        assert graph.entities[name] == want, name
    extra_r, missing_r = (
        set(graph.relations) - set(relations),
        set(relations) - set(graph.relations),
    )
    assert not extra_r and not missing_r, f"relations: extra {extra_r}, missing {missing_r}"
    for triple, rel in relations.items():
        assert graph.relations[triple] == rel, triple
    assert graph.mentions == mentions


@pytest.fixture(scope="module")
def corpus(llm_fixtures_dir: Path) -> Corpus:
    return load_corpus(llm_fixtures_dir)


async def _applied(pg_dsn: str, group: str, topics: Topics, n: int, limit: float = 60) -> None:
    async def done() -> bool:
        return await stored_position(pg_dsn, group, topics.documents) >= n

    await wait_for(done, limit, f"{n} records applied")


def _held(realm: str) -> float:
    """Times the indexer held ``realm`` at a record it cannot apply (this process)."""
    return sample("tidegraph_indexer_held_failures_total", realm=realm, error_class="ConfigError")


def _paused(error_class: str) -> float:
    """Times the indexer paused a partition on this error class (this process)."""
    return sample("tidegraph_indexer_transient_failures_total", error_class=error_class)


def _seqs_gap_free(changes: list[tuple[int, int, str]]) -> list[int]:
    seqs = sorted({seq for seq, _, _ in changes})
    assert seqs == list(range(1, len(seqs) + 1)), f"outbox sequence has gaps: {seqs}"
    return seqs


# -- 1. the corpus end to end ----------------------------------------------------------


async def test_corpus_indexed_end_to_end_is_exactly_the_expected_graph(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    corpus: Corpus,
    llm_server: ScriptedLLMServer,
    make_llm_client: MakeClient,
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    records = corpus.records(realm)
    hits_before = sample("tidegraph_extraction_cache_hits_total", realm=realm)
    async with running_model_indexer(
        topics, pg_dsn, group, llm=make_llm_client(), default_realm=corpus.realm_config
    ) as run:
        await publish(topics, records)
        await _applied(pg_dsn, group, topics, len(records))
    assert run.failures() == []
    assert await realm_embedder(pg_dsn, realm) == "llm:scripted-embed:16"
    assert_graph(
        await stored_graph(pg_dsn, realm), EXPECTED_ENTITIES, EXPECTED_RELATIONS, EXPECTED_MENTIONS
    )
    assert _seqs_gap_free(await outbox(pg_dsn, realm)) == list(range(1, 13))
    # Every chunk was answered by its scripted fixture: a first pass and one gleaning pass
    # per document, nothing unmatched, nothing retried; every answer is cached.
    assert llm_server.unmatched_chunks == []
    assert {d.short: llm_server.calls_for(d.match) for d in corpus.documents} == dict.fromkeys(
        ALL_DOCS, 2
    )
    assert llm_server.calls["chat"] == 24
    assert llm_server.gleaning_calls == 12
    assert (await realm_counts(pg_dsn, realm))["extraction_cache"] == 12
    assert sample("tidegraph_extraction_cache_misses_total", realm=realm) == 12
    assert sample("tidegraph_extraction_cache_hits_total", realm=realm) == hits_before
    assert sample("tidegraph_model_prompt_tokens_total", realm=realm, kind="chat") > 0
    assert sample("tidegraph_model_prompt_tokens_total", realm=realm, kind="embed") > 0
    # Structured output was asked for, and the realm's vocabulary reached the prompt.
    chat = [body for route, body in llm_server.requests if route == "chat"]
    assert all(body["response_format"]["type"] == "json_schema" for body in chat)
    assert all("ally_of" in body["messages"][-1]["content"] for body in chat)
    assert await dead_letter_count(topics) == 0


async def test_corpus_in_another_arrival_order_gives_the_same_graph(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    corpus: Corpus,
    make_llm_client: MakeClient,
) -> None:
    """The README's graph holds for any arrival order. This order sends doc 02 (whose
    model output names the founder only ``Ellison``) before doc 01 (which records
    ``Ellison`` as an alias of ``Mara Ellison``): the two stored entities must merge."""
    docs = list(corpus.documents)
    random.Random(5).shuffle(docs)
    order = [d.short for d in docs]
    assert order.index("02") < order.index("01") and order.index("12") < order.index("02")
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    async with running_model_indexer(
        topics, pg_dsn, group, llm=make_llm_client(), default_realm=corpus.realm_config
    ) as run:
        await publish(topics, corpus.records(realm, docs))
        await _applied(pg_dsn, group, topics, len(docs))
    assert run.failures() == []
    assert_graph(
        await stored_graph(pg_dsn, realm), EXPECTED_ENTITIES, EXPECTED_RELATIONS, EXPECTED_MENTIONS
    )


# -- 2. an outage in the middle of the stream ------------------------------------------


def _outage_when(
    server: ScriptedLLMServer,
    chat_calls: int,
    seconds: float,
    started: threading.Event,
    stop: threading.Event,
) -> threading.Thread:
    """Start a ``seconds`` outage once the server has seen ``chat_calls`` chat requests."""

    def watch() -> None:
        while not stop.is_set():
            if server.calls["chat"] >= chat_calls:
                server.outage(seconds)
                started.set()
                return
            time.sleep(0.001)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


async def test_outage_mid_stream_pauses_then_resumes_losing_nothing(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    corpus: Corpus,
    llm_server: ScriptedLLMServer,
    make_llm_client: MakeClient,
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    records = corpus.records(realm)
    outage_seconds = 4.0
    paused_before = _paused("LLMUnavailable")
    failed_before = sample("tidegraph_indexer_records_total", realm=realm, outcome="failed")
    started, stop = threading.Event(), threading.Event()
    # Four records per poll, so the first polls are written before the outage begins.
    watcher = _outage_when(llm_server, 10, outage_seconds, started, stop)
    try:
        async with running_model_indexer(
            topics,
            pg_dsn,
            group,
            llm=make_llm_client(deadline=1.0, attempt_timeout=0.5),
            default_realm=corpus.realm_config,
            max_poll_records=4,
            backoff_initial=0.2,
            backoff_max=0.5,
        ) as run:
            await publish(topics, records)
            assert await asyncio.to_thread(started.wait, 30), "the outage never started"
            outage_end = time.monotonic() + outage_seconds

            async def paused() -> bool:
                return _paused("LLMUnavailable") > paused_before

            await wait_for(paused, outage_seconds, "the partition to pause")
            # While the endpoint is down: the position stands, and what is written is
            # exactly the records before it, each complete.
            position = await stored_position(pg_dsn, group, topics.documents)
            graph = await stored_graph(pg_dsn, realm)
            assert 0 < position < len(records), "the outage did not fall mid-stream"
            written = [f"{i:02d}" for i in range(1, position + 1)]
            assert graph.documents == dict.fromkeys(written, "indexed")
            assert graph.live_chunks == dict.fromkeys(written, 1)
            assert {d for r in graph.relations.values() for d in r.docs} <= set(written)
            await asyncio.sleep(max(0.0, outage_end - time.monotonic() - 0.5))
            assert await stored_position(pg_dsn, group, topics.documents) == position
            # The endpoint is back: the partition resumes by itself.
            await _applied(pg_dsn, group, topics, len(records), limit=60)
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert run.indexer.applied == len(records)
    transient = [a for a in run.failures() if isinstance(a.error, LLMUnavailable)]
    assert transient, "the outage never reached the indexer"
    assert all(isinstance(a.error, LLMUnavailable) for a in run.failures())
    assert _paused("LLMUnavailable") > paused_before
    assert (
        sample(
            "tidegraph_model_failures_total", realm=realm, kind="chat", error_class="server_error"
        )
        > 0
    )
    assert (
        sample(
            "tidegraph_model_failures_total", realm=realm, kind="chat", error_class="unavailable"
        )
        > 0
    )
    # Nothing lost, nothing partial, nothing failed, nothing dead-lettered.
    assert_graph(
        await stored_graph(pg_dsn, realm), EXPECTED_ENTITIES, EXPECTED_RELATIONS, EXPECTED_MENTIONS
    )
    assert sample("tidegraph_indexer_records_total", realm=realm, outcome="failed") == failed_before
    changes = await outbox(pg_dsn, realm)
    assert _seqs_gap_free(changes) == list(range(1, len(records) + 1))
    assert "document_failed" not in {kind for _, _, kind in changes}
    assert await dead_letter_count(topics) == 0
    # Chunks extracted before the outage were not paid for again (their answers were cached).
    assert all(llm_server.calls_for(d.match) >= 2 for d in corpus.documents)
    assert (await realm_counts(pg_dsn, realm))["extraction_cache"] == 12


# -- 3. re-sending: only changed chunks cost model calls -------------------------------


async def test_resending_with_one_document_changed_calls_the_model_for_it_only(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    corpus: Corpus,
    llm_server: ScriptedLLMServer,
    make_llm_client: MakeClient,
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    (changed,) = corpus.changed
    (original,) = [d for d in corpus.documents if d.doc_key == changed.doc_key]
    async with running_model_indexer(
        topics,
        pg_dsn,
        group,
        llm=make_llm_client(),
        default_realm=corpus.realm_config,
    ):
        await publish(topics, corpus.records(realm))
        await _applied(pg_dsn, group, topics, 12)
        first_changes = await outbox(pg_dsn, realm)
        llm_server.reset()
        misses = sample("tidegraph_extraction_cache_misses_total", realm=realm)

        # The corpus again, the obituary in its new version.
        await publish(topics, corpus.records(realm, corpus.with_changes()))
        await _applied(pg_dsn, group, topics, 24)
        assert llm_server.calls["chat"] == 2  # its one chunk: a first pass and a gleaning
        assert llm_server.calls_for(changed.match) == 2
        assert {
            d.short: llm_server.calls_for(d.match) for d in corpus.documents if d is not original
        } == dict.fromkeys(ALL_DOCS[:-1], 0)
        embedded = [
            t for route, body in llm_server.requests if route == "embed" for t in body["input"]
        ]
        assert changed.content.strip() in embedded
        assert not {d.content.strip() for d in corpus.documents} & set(embedded)
        assert sample("tidegraph_extraction_cache_misses_total", realm=realm) == misses + 1
        assert_graph(await stored_graph(pg_dsn, realm), *expected_after_change())
        second_changes = await outbox(pg_dsn, realm)
        assert second_changes[: len(first_changes)] == first_changes
        assert _seqs_gap_free(second_changes) == list(range(1, 14))  # one new transaction

        # Unchanged documents re-sent: no-ops by hash, no model call of any kind.
        llm_server.reset()
        await publish(topics, corpus.records(realm, corpus.with_changes()))
        await _applied(pg_dsn, group, topics, 36)
        assert llm_server.calls == {}
        assert await outbox(pg_dsn, realm) == second_changes
        assert_graph(await stored_graph(pg_dsn, realm), *expected_after_change())
    assert await dead_letter_count(topics) == 0


def _body(fixtures_dir: Path, name: str) -> str:
    text = (fixtures_dir / "corpus" / name).read_text(encoding="utf-8")
    return text.split("\n\n", 1)[1].strip()


async def test_changed_document_reextracts_only_its_changed_chunks(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    corpus: Corpus,
    llm_server: ScriptedLLMServer,
    make_llm_client: MakeClient,
    llm_fixtures_dir: Path,
) -> None:
    """A document of several chunks whose last paragraph changes: the chunks before it
    are answered by the extraction cache (same text, same context), only the last calls."""
    config = PipelineConfig(chunk_chars=300)
    parts = [
        _body(llm_fixtures_dir, f"{name}.md")
        for name in ("01-mara-ellison-early-life", "03-kestrel-design", "04-kestrel-voyages")
    ]
    before = "\n\n".join([*parts, _body(llm_fixtures_dir, "12-obituary.md")])
    after = "\n\n".join([*parts, _body(llm_fixtures_dir, "changed/12-obituary.md")])
    old_chunks = [c.text for c in chunk_document(before, config.chunk_chars, config.overlap_chars)]
    new_chunks = [c.text for c in chunk_document(after, config.chunk_chars, config.overlap_chars)]
    assert len(new_chunks) == len(old_chunks) >= 3
    assert new_chunks[:-1] == old_chunks[:-1] and new_chunks[-1] != old_chunks[-1]
    (changed,) = corpus.changed

    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    async with running_model_indexer(
        topics,
        pg_dsn,
        group,
        llm=make_llm_client(),
        default_realm=corpus.realm_config,
        pipeline_config=config,
    ) as run:
        await publish(topics, [upsert(realm, "life.md", before, order_key="1902", title="A life")])
        await _applied(pg_dsn, group, topics, 1)
        assert llm_server.calls["chat"] == 2 * len(old_chunks)
        llm_server.reset()
        hits = sample("tidegraph_extraction_cache_hits_total", realm=realm)
        misses = sample("tidegraph_extraction_cache_misses_total", realm=realm)
        await publish(topics, [upsert(realm, "life.md", after, order_key="1902", title="A life")])
        await _applied(pg_dsn, group, topics, 2)
    assert run.failures() == []
    assert llm_server.calls["chat"] == 2
    assert llm_server.calls_for(changed.match) == 2
    assert (
        sample("tidegraph_extraction_cache_hits_total", realm=realm) == hits + len(old_chunks) - 1
    )
    assert sample("tidegraph_extraction_cache_misses_total", realm=realm) == misses + 1
    graph = await stored_graph(pg_dsn, realm)
    assert graph.documents == {"life.md": "indexed"}
    assert ("Lena Ellison", "led", "Wrenfield Shipyard", False) in graph.relations


# -- 4. a server that never answers ----------------------------------------------------


async def test_server_that_never_answers_pauses_the_partition_within_the_deadline(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    corpus: Corpus,
    llm_server: ScriptedLLMServer,
    make_llm_client: MakeClient,
) -> None:
    deadline, attempt_timeout, max_attempts = 1.5, 1.0, 8
    # Retrying every attempt to its timeout would take max_attempts × attempt_timeout = 8 s.
    client = make_llm_client(
        deadline=deadline, attempt_timeout=attempt_timeout, max_attempts=max_attempts
    )
    llm_server.enqueue(*[Fault.hang() for _ in range(50)])
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    paused_before = _paused("LLMUnavailable")
    async with running_model_indexer(
        topics,
        pg_dsn,
        group,
        llm=client,
        default_realm=corpus.realm_config,
        backoff_initial=0.5,
        backoff_max=1.0,
    ) as run:
        await publish(topics, corpus.records(realm)[:1])

        async def failed_once() -> bool:
            return bool(run.failures())

        await wait_for(failed_once, 30, "the first prepare to fail")
        first = run.failures()[0]
        assert isinstance(first.error, LLMUnavailable)
        assert first.error.failures == {"timeout": first.error.attempts}
        assert first.error.elapsed <= deadline + 0.3
        # The whole prepare (one chat call that never returns) took about the deadline.
        assert deadline - 0.1 <= first.seconds <= deadline + 1.0
        assert first.seconds < max_attempts * attempt_timeout / 2

        async def paused() -> bool:
            return _paused("LLMUnavailable") > paused_before

        await wait_for(paused, 5, "the partition to pause")
        # Per-attempt latencies recorded by the client stay within the deadline too.
        timeouts = sample(
            "tidegraph_model_failures_total", realm=realm, kind="chat", error_class="timeout"
        )
        assert timeouts >= first.error.attempts
        assert (
            sample("tidegraph_model_call_seconds_sum", realm=realm, kind="chat")
            <= (deadline + 0.5) * len(run.failures()) + 0.5
        )
        assert await stored_position(pg_dsn, group, topics.documents) == 0
        assert (await realm_counts(pg_dsn, realm))["documents"] == 0

        # The endpoint answers again: the paused partition goes on by itself.
        llm_server.reset()
        await _applied(pg_dsn, group, topics, 1, limit=30)
    graph = await stored_graph(pg_dsn, realm)
    assert graph.documents == {"01": "indexed"}


# -- 5. a realm pinned to a model embedder never falls back ----------------------------


@pytest.mark.parametrize("extractor", ["rules", "llm"])
async def test_model_pinned_realm_without_endpoint_pauses_and_writes_nothing(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    corpus: Corpus,
    extractor: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A realm blocked by its configuration is held at its first record (fail closed,
    retried, explained in ``tidegraph.indexer_holds`` and the log) while another realm
    sharing its partition goes on, its position kept per realm."""
    caplog.set_level(logging.INFO, logger="tidegraph.indexer")
    config = RealmConfig.model_validate(
        {
            **corpus.realm_config.model_dump(),
            "extractor": extractor,
            "embedder": "llm:scripted-embed:16",
        }
    )
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, other, group = unique_name("r"), unique_name("o"), unique_name("g")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(conn, other, RealmConfig(embedder="hashing:16"))
    before = _held(realm)
    async with running_model_indexer(
        topics,
        pg_dsn,
        group,
        llm=None,
        default_realm=config,
        backoff_initial=0.1,
        backoff_max=0.3,
    ) as run:
        await publish(
            topics,
            [
                upsert(realm, "a.md", "Ada Lovelace worked with Charles Babbage."),
                upsert(other, "x.md", "Grace Hopper worked with Howard Aiken."),
                upsert(realm, "b.md", "Mary Somerville mentored Ada Lovelace."),
                upsert(other, "y.md", "Alan Turing worked with Max Newman."),
            ],
        )

        async def retried() -> bool:
            return _held(realm) >= before + 3

        await wait_for(retried, 30, "the held realm to be tried again")
        assert run.failures()[0].doc_key == "a.md"
        assert all(isinstance(a.error, ConfigError) for a in run.failures())
        assert "TIDEGRAPH_LLM_BASE_URL" in str(run.failures()[0].error)
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            stored = await positions.read(conn, group, topics.documents, 0)
            waiting = await holds.listed(conn, group)
            went_on = await realm_positions.stand(conn, realm_schema(other), topics.documents, 0)
            held_at = await realm_positions.stand(conn, realm_schema(realm), topics.documents, 0)
        assert stored == 0  # the group reads from the held record again after a restart
        assert went_on == 4 and held_at == 0
        assert [(h.realm, h.kind, h.offset, h.doc_key, h.error_class) for h in waiting] == [
            (realm, "held", 0, "a.md", "ConfigError")
        ]
        assert run.indexer.applied == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "tidegraph.indexer"]
    held = [line for line in lines if "realm held at this record, other realms go on" in line]
    assert held and all(f"(realm {realm})" in line and "ConfigError" in line for line in held)
    again = [line for line in lines if "trying held realms again" in line]
    assert again and all(f"{realm} at offset 0" in line for line in again), lines
    # The realm was created pinned to the model embedder, and nothing else was written:
    # no hashing vectors, no chunks, no failed documents, no changes, no dead letters.
    assert await realm_embedder(pg_dsn, realm) == "llm:scripted-embed:16"
    assert await realm_counts(pg_dsn, realm) == dict.fromkeys(
        ("documents", "chunks", "entities", "relations", "mentions", "outbox", "extraction_cache"),
        0,
    )
    assert await stored_position(pg_dsn, group, topics.documents) == 0
    assert await dead_letter_count(topics) == 0
