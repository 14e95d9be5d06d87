"""Documents prepared at once follow the model endpoint's bound, so that with a slow model
the endpoint, not the indexer, sets the rate (issue: performance at scale)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from aiokafka.partitioner import murmur2

from tidegraph.indexer.consumer.indexer import metrics
from tidegraph.indexer.extraction.ahead import DOCUMENTS_AT_ONCE, documents_at_once
from tidegraph.indexer.models.client import LLMClient
from tidegraph.schemas.realm_config import RealmConfig

from indexer_helpers import make_topics, publish, spawn_indexer, stored_position, upsert, wait_for
from llm_server import ScriptedLLMServer
from model_helpers import running_model_indexer


def test_an_explicit_concurrency_wins() -> None:
    assert documents_at_once(5, 16) == 5
    assert documents_at_once(40, None) == 40


def test_without_a_model_the_default_holds() -> None:
    assert documents_at_once(None, None) == DOCUMENTS_AT_ONCE


def test_a_model_bound_raises_it_with_room_for_documents_between_calls() -> None:
    assert documents_at_once(None, 16) == 24
    assert documents_at_once(None, 12) == 18
    assert documents_at_once(None, 2) == DOCUMENTS_AT_ONCE


@pytest.mark.kafka
@pytest.mark.postgres
async def test_the_indexer_keeps_every_call_slot_of_a_slow_model_busy(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
) -> None:
    """One chunk a document, so a document holds one call at a time: with the old fixed
    eight documents at once the endpoint never saw more than eight calls."""
    slots = 12
    llm_server.latency = 0.3
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    group, realm = unique_name("g"), unique_name("r")
    records = [
        upsert(realm, f"note-{i}.md", f"Note {i}: Ada Lovelace worked with Charles Babbage.")
        for i in range(3 * slots)
    ]
    await publish(topics, records)
    proc = spawn_indexer(
        topics,
        pg_dsn,
        group,
        env={
            "TIDEGRAPH_EXTRACTOR": "llm",
            "TIDEGRAPH_LLM_BASE_URL": llm_server.base_url,
            "TIDEGRAPH_LLM_MODEL": "scripted-chat",
            "OPENAI_API_KEY": "sk-scripted",
            "TIDEGRAPH_LLM_MAX_IN_FLIGHT": str(slots),
        },
    )
    try:

        async def applied() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        await wait_for(applied, 90, "every note applied")
    finally:
        proc.terminate()
        proc.wait(30)
    assert llm_server.calls["chat"] >= len(records)
    assert llm_server.max_concurrent == slots


@pytest.mark.kafka
@pytest.mark.postgres
async def test_realms_on_several_partitions_never_wait_on_each_others_connections(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    """As many realms with a run in flight as the pool has connections: a writer waiting
    for its documents must not hold a connection meanwhile, or the documents, which read
    the extraction cache through the same pool, can never be prepared (every partition
    stalled until the pool gave up, then paused)."""
    pool_size = 2
    llm_server.latency = 0.1
    llm_server.add_fixture(
        "worked with Charles Babbage",
        {
            "entities": [
                {"name": "Ada Lovelace", "type": "Person", "description": "", "aliases": []},
                {"name": "Charles Babbage", "type": "Person", "description": "", "aliases": []},
            ],
            "relations": [
                {"subject": "Ada Lovelace", "predicate": "worked_with", "object": "Charles Babbage"}
            ],
        },
    )
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=pool_size)
    realms: dict[int, str] = {}
    while len(realms) < pool_size:  # one realm on each partition
        realm = unique_name("r")
        realms.setdefault((murmur2(realm.encode()) & 0x7FFFFFFF) % pool_size, realm)
    records = [
        upsert(realm, f"note-{i}.md", f"Note {i}: Ada Lovelace worked with Charles Babbage.")
        for i in range(12)
        for realm in realms.values()
    ]
    group = unique_name("g")
    paused_before = _partitions_paused()
    started = time.monotonic()
    async with running_model_indexer(
        topics,
        pg_dsn,
        group,
        llm=make_llm_client(max_in_flight=8, deadline=60.0, attempt_timeout=30.0),
        default_realm=RealmConfig(extractor="llm", embedder="hashing:16"),
        pool_size=pool_size,
    ) as run:
        await publish(topics, records)

        async def applied() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        # Stalled, whatever waits for a connection fails when the pool gives up (30 s)
        # and pauses its partition: that failure, not the time taken, is what tells (a
        # loaded machine is slow, not stalled).
        await wait_for(applied, 120, "every note applied")
    assert run.failures() == []
    assert _partitions_paused() == paused_before, "a partition waited for a connection"
    print(f"{len(records)} notes applied in {time.monotonic() - started:.1f}s")


def _partitions_paused() -> float:
    """Transient failures that paused a partition so far, in this process."""
    return sum(
        sample.value
        for family in metrics.TRANSIENT_FAILURES.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    )
