"""Records with facts through the real pipeline: Kafka, the indexer, PostgreSQL.

The realm is pinned to the model extractor and the scripted model server counts every
request: facts must cost no model call, live or in a replay. The same facts again change
nothing (no sequence drawn); changed facts replace what the old version taught; a delete
retracts; refused facts are named in the document's status.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.indexer.models.client import LLMClient
from tidegraph.indexer.replay.diff import diff_schemas
from tidegraph.indexer.replay.rebuild import ReplayOptions, replay_realm
from tidegraph.infra.composition import ModelRegistry
from tidegraph.infra.realm_status import DataStatus, render
from tidegraph.query_service.reads import document_state
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.figures import realm_figures
from tidegraph.store.realms import open_realm

from indexer_helpers import (
    delete,
    make_topics,
    outbox,
    publish,
    realm_snapshot,
    stored_position,
    wait_for,
)
from llm_server import ScriptedLLMServer
from model_helpers import running_model_indexer

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

MODEL_REALM = RealmConfig(extractor="llm", embedder="hashing:64")


def person(realm: str, key: str, name: str, company: str, since: str, **extra: Any) -> Any:
    relation = {"subject": name, "predicate": "works_at", "object": company, "valid_from": since}
    relation.update(extra)
    facts = {
        "entities": [{"name": name, "type": "Person"}, {"name": company, "type": "Company"}],
        "relations": [relation],
    }
    return DocumentVersion.for_facts(realm, key, facts, order_key="1")


def script(realm: str) -> dict[str, list[DocumentVersion]]:
    """Each document's versions, in its own order: the same facts twice, then changed; a
    person then deleted; refused facts."""
    same = person(realm, "p/1", "Ada Quill", "Wrenfield", "2019-03-01")
    ended = person(realm, "p/1", "Ada Quill", "Wrenfield", "2019-03-01", valid_to="2024-01")
    refused = {
        "entities": [{"name": "Cy Marr", "type": "Person"}, {"name": "they"}],
        "relations": [
            {"subject": "Cy Marr", "predicate": "founded", "object": "Rookwater"},
            {"subject": "Cy Marr", "predicate": "is related to", "object": "Bo Vale"},
        ],
    }
    return {
        "p/1": [same, same, ended],
        "p/2": [person(realm, "p/2", "Bo Vale", "Rookwater", "2020"), delete(realm, "p/2")],
        "p/3": [DocumentVersion.for_facts(realm, "p/3", refused)],
        "p/4": [person(realm, "p/4", "Di Sorrel", "Rookwater", "2024-07-01")],
        # The same prose with other facts is another version.
        "p/5": [
            DocumentVersion.for_facts(realm, "p/5", facts, content="Staff notes.")
            for facts in (
                {"relations": [{"subject": "Ed Pell", "predicate": "leads", "object": "Wren"}]},
                {"relations": [{"subject": "Ed Pell", "predicate": "left", "object": "Wren"}]},
            )
        ],
    }


def interleaved(docs: dict[str, list[DocumentVersion]], rng: random.Random) -> list[Any]:
    """The versions in a random arrival order across documents, each document's in order."""
    queues = {k: list(v) for k, v in docs.items()}
    out: list[DocumentVersion] = []
    while queues:
        key = rng.choice(sorted(queues))
        out.append(queues[key].pop(0))
        if not queues[key]:
            del queues[key]
    return out


async def relations(pg_dsn: str, realm: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT es.name, es.type, r.predicate, eo.name, eo.type, r.valid_from,"
                " r.valid_to, r.status FROM {s}.relations r"
                " JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id"
            ).format(s=sql.Identifier(f"realm_{realm}"))
        )
        return sorted(tuple(r) for r in await cur.fetchall())


async def documents(pg_dsn: str, realm: str) -> dict[str, tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT doc_key, status, content_hash, error FROM {}.documents").format(
                sql.Identifier(f"realm_{realm}")
            )
        )
        return {str(r[0]): tuple(r[1:]) for r in await cur.fetchall()}


async def test_facts_are_indexed_without_a_model_and_replayed_the_same(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    first = [
        person(realm, "p/1", "Ada Quill", "Wrenfield", "2019-03-01"),
        person(realm, "p/2", "Bo Vale", "Rookwater", "2020"),
        DocumentVersion.for_facts(
            realm,
            "p/3",
            {
                "entities": [{"name": "Cy Marr", "type": "Person"}, {"name": "they"}],
                "relations": [
                    {"subject": "Cy Marr", "predicate": "founded", "object": "Rookwater"},
                    {"subject": "Cy Marr", "predicate": "is related to", "object": "Bo Vale"},
                ],
            },
        ),
    ]
    random.Random(7).shuffle(first)  # arrival order across documents does not matter
    sent = 0

    async def indexed(n: int) -> None:
        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= n

        await wait_for(done, 120, f"{n} records applied")

    async with running_model_indexer(
        topics, pg_dsn, group, llm=make_llm_client(), default_realm=MODEL_REALM
    ):
        await publish(topics, first)
        sent += len(first)
        await indexed(sent)
        assert await relations(pg_dsn, realm) == [
            ("Ada Quill", "Person", "works_at", "Wrenfield", "Company", "2019-03-01", None,
             "current"),
            ("Bo Vale", "Person", "works_at", "Rookwater", "Company", "2020", None, "current"),
            ("Cy Marr", "Person", "founded", "Rookwater", "Company", None, None, "current"),
        ]  # fmt: skip
        docs = await documents(pg_dsn, realm)
        by_key = {d.doc_key: d for d in first}
        assert docs["p/1"] == ("indexed", by_key["p/1"].version_hash, None)
        status, _, error = docs["p/3"]
        assert status == "indexed" and error is not None and error.startswith("refused facts: ")
        assert "'they (Concept)' refused by pronominal_name" in error
        assert "'Cy Marr is related to Bo Vale' refused by vague_predicate" in error
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            [figures] = await realm_figures(conn, only=[realm])
            # What the documents endpoint answers.
            state = await document_state(conn, await open_realm(conn, realm), "default", "p/3")
        assert state is not None and state["status"] == "indexed" and state["error"] == error
        assert figures.refused_facts == 1 and figures.documents == {"indexed": 3}
        assert "3 indexed (1 with refused facts)" in render(DataStatus(realms=[figures]))

        # The same facts again cost nothing: no sequence drawn, no change.
        feed = await outbox(pg_dsn, realm)
        await publish(topics, [person(realm, "p/1", "Ada Quill", "Wrenfield", "2019-03-01")])
        sent += 1
        await indexed(sent)
        assert await outbox(pg_dsn, realm) == feed

        # The employment ends: the new version replaces what the old one taught.
        # The person is deleted: the relation is retracted, and the types only that
        # document's facts stated (Bo Vale a Person, Rookwater a Company) go with it:
        # attributes derive from live contributions.
        ended = person(realm, "p/1", "Ada Quill", "Wrenfield", "2019-03-01", valid_to="2024-01")
        await publish(topics, [ended, delete(realm, "p/2")])
        sent += 2
        await indexed(sent)
        current = [r for r in await relations(pg_dsn, realm) if r[-1] == "current"]
        assert current == [
            ("Ada Quill", "Person", "works_at", "Wrenfield", "Company", "2019-03-01", "2024-01",
             "current"),
            ("Cy Marr", "Person", "founded", "Rookwater", "Concept", None, None, "current"),
        ]  # fmt: skip
        assert ("Bo Vale", "Concept", "works_at", "Rookwater", "Concept", "2020", None,
                "retracted") in await relations(pg_dsn, realm)  # fmt: skip
    assert sum(llm_server.calls.values()) == 0, llm_server.calls
    live = await realm_snapshot(pg_dsn, realm)

    registry = ModelRegistry(llm=make_llm_client())
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
    options = ReplayOptions(
        realm=realm,
        bootstrap=topics.bootstrap,
        pg_dsn=pg_dsn,
        topic=topics.documents,
        swap=False,
        label="facts",
    )
    result = await replay_realm(options, pipeline.prepare, registry.embedder_for)
    assert sum(llm_server.calls.values()) == 0, llm_server.calls
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        assert await diff_schemas(conn, f"realm_{realm}", result.schema) == []
    assert await realm_snapshot(pg_dsn, realm) == live


async def test_any_arrival_order_across_documents_builds_the_same_graph(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    group = unique_name("g")
    realms = [unique_name("r") for _ in range(4)]
    records = [
        rec
        for seed, realm in enumerate(realms)
        for rec in interleaved(script(realm), random.Random(seed))
    ]
    async with running_model_indexer(
        topics, pg_dsn, group, llm=make_llm_client(), default_realm=MODEL_REALM
    ):
        await publish(topics, records)

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= len(records)

        await wait_for(done, 120, "every order applied")
    assert sum(llm_server.calls.values()) == 0, llm_server.calls
    first, *others = [await realm_snapshot(pg_dsn, realm) for realm in realms]
    assert all(other == first for other in others)
    assert ("default", "Di Sorrel", "works_at", "Rookwater", False, "current", 1,
            "2024-07-01", None, None) in first["relations"]  # fmt: skip
    ed = [r[2:6] for r in first["relations"] if r[1] == "Ed Pell"]
    assert sorted(ed) == [("leads", "Wren", False, "retracted"), ("left", "Wren", False, "current")]
