"""`tidegraph status` names the record the indexer waits at and the realms that wait
behind it (a paused partition) or go on past it (a held realm), in text and in JSON."""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
import pytest

from tidegraph.infra.realm_status import as_json, data_status, render
from tidegraph.schemas.names import realm_schema
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import holds, positions, realm_positions
from tidegraph.store.realm_positions import Mark
from tidegraph.store.realms import create_realm, ensure_control

from indexer_helpers import make_topics, publish, upsert

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


async def test_status_shows_the_waiting_record_and_the_realms_behind_it(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    a, b, c, group = unique_name("a"), unique_name("b"), unique_name("c"), unique_name("g")
    await publish(
        topics,
        [
            upsert(a, "a.md", "Ada Lovelace worked with Charles Babbage."),
            upsert(b, "x.md", "Grace Hopper worked with Howard Aiken."),
            upsert(a, "b.md", "Mary Somerville mentored Ada Lovelace."),
            upsert(c, "y.md", "Alan Turing worked with Max Newman."),
        ],
    )
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        claim, _ = await positions.claim(conn, group, topics.documents, 0, 0)
        await holds.put(
            conn,
            group,
            topics.documents,
            0,
            a,
            kind="paused",
            offset=0,
            doc_key="a.md",
            error_class="ModelUnavailable",
            error="the model endpoint did not answer",
            retry_in=5,
        )

    # A paused partition: every other realm with records past it waits too.
    paused = await data_status(pg_dsn, kafka_bootstrap, topics.documents, group)
    assert not paused.problems
    assert paused.held_up == {(0, a): sorted([b, c])}
    assert paused.realm_lag(a) == 2 and paused.realm_lag(b) == 1
    text = render(paused)
    assert f"indexer paused partition 0 at offset 0 (realm {a}, doc_key 'a.md') since " in text, (
        text
    )
    assert "ModelUnavailable: the model endpoint did not answer; retried at " in text
    assert f"realms held up behind it: {', '.join(sorted([b, c]))}" in text
    [waiting] = json.loads(json.dumps(as_json(paused)))["indexer_waiting"]
    assert {k: waiting[k] for k in ("kind", "realm", "partition", "offset", "doc_key")} == {
        "kind": "paused",
        "realm": a,
        "partition": 0,
        "offset": 0,
        "doc_key": "a.md",
    }
    assert waiting["error_class"] == "ModelUnavailable"
    assert waiting["realms_held_up_behind"] == sorted([b, c])

    # A held realm: the others went on past its record (their own positions say so);
    # only its own records wait.
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for name in (a, b, c):
            info = await create_realm(conn, name, RealmConfig(embedder="hashing:8"))
            await realm_positions.ensure(conn, info.schema, name, topics.documents, 0)
        async with conn.transaction():
            await realm_positions.settle(
                conn,
                topics.documents,
                0,
                [Mark(b, realm_schema(b), 1, 4), Mark(c, realm_schema(c), 3, 4)],
            )
        await holds.put(
            conn,
            group,
            topics.documents,
            0,
            a,
            kind="held",
            offset=0,
            doc_key="a.md",
            error_class="ConfigError",
            error="realm is pinned to a model embedder; set TIDEGRAPH_LLM_BASE_URL",
            retry_in=30,
        )
    held = await data_status(pg_dsn, kafka_bootstrap, topics.documents, group)
    assert held.behind == {(0, a): sorted([b, c])} and held.held_up == {}
    assert held.realm_lag(a) == 2 and held.realm_lag(b) == 0 and held.lag == {0: 4}
    text = render(held)
    assert f"indexer held realm {a} at partition 0 offset 0, doc_key 'a.md' since " in text
    assert "set TIDEGRAPH_LLM_BASE_URL — fix the cause" in text
    assert f"other realms of partition 0 go on: {', '.join(sorted([b, c]))}" in text
    [waiting] = as_json(held)["indexer_waiting"]
    assert waiting["kind"] == "held" and waiting["other_realms_going_on"] == sorted([b, c])
    assert waiting["realms_held_up_behind"] == []
