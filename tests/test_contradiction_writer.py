"""The model asked about the residue, on real PostgreSQL and the scripted model endpoint:
asked outside the write transaction, its answers cached by the two rendered relations, a
yes superseding by document order (mechanism ``model``) for any arrival order, an outage
writing nothing until the model is back, and nothing asked twice."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tidegraph.indexer.extraction.judge import LLMJudge
from tidegraph.indexer.models.client import LLMClient
from tidegraph.indexer.models.errors import LLMBadOutput, LLMUnavailable
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import open_realm

from graph_helpers import GraphHarness, ent, rel
from llm_server import Fault, ScriptedLLMServer

pytestmark = pytest.mark.postgres

CONFIG = RealmConfig(
    embedder="hashing:8",
    symmetric_predicates=frozenset({"married_to"}),
    functional_predicates={"born_in": "subject"},
    contradiction_model=True,
)
PLACES = {"d1": ("Paris", "2019"), "d2": ("Berlin", "2021"), "d3": ("Rome", "2020")}


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as c:
        yield c


async def _graph(
    conn: psycopg.AsyncConnection[Any],
    name: str,
    client: LLMClient | None,
    config: RealmConfig = CONFIG,
) -> GraphHarness:
    graph = await GraphHarness.create(conn, name, config)
    if client is not None:
        graph.judge = LLMJudge(client, realm=name)
    return graph


async def _lives(graph: GraphHarness, key: str) -> None:
    city, order = PLACES[key]
    await graph.upsert(
        key,
        [([ent("Ada"), ent(city, "Location")], [rel("Ada", "lives_in", city)])],
        order_key=order,
    )


async def _states(graph: GraphHarness, predicate: str) -> dict[str, tuple[str, str | None, Any]]:
    """Object → (status, superseding object, mechanism) of Ada's ``predicate`` edges."""
    s = sql.Identifier(graph.info.schema)
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT eo.name, r.status, xo.name, r.superseded_via FROM {s}.relations r"
            " JOIN {s}.entities eo ON eo.id = r.object_id"
            " LEFT JOIN {s}.relations x ON x.id = r.superseded_by"
            " LEFT JOIN {s}.entities xo ON xo.id = x.object_id"
            " WHERE r.predicate = %s AND NOT r.negated"
        ).format(s=s),
        (predicate,),
    )
    return {str(o): (str(st), by, via) for o, st, by, via in await cur.fetchall()}


async def _cached(graph: GraphHarness) -> list[tuple[str, str, bool]]:
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT first_text, second_text, contradicts FROM {}.contradiction_answers"
            " ORDER BY 1, 2"
        ).format(sql.Identifier(graph.info.schema))
    )
    return [(a, b, bool(c)) for a, b, c in await cur.fetchall()]


async def test_a_yes_supersedes_by_document_order_and_a_no_keeps_both(
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    llm_server.add_contradiction("Ada lives in", "Ada lives in")
    graph = await _graph(conn, unique_name("cm"), make_llm_client())
    await _lives(graph, "d2")
    await _lives(graph, "d1")  # older, arriving later: superseded at once
    assert await _states(graph, "lives_in") == {
        "Berlin": ("current", None, None),
        "Paris": ("superseded", "Berlin", "model"),
    }
    assert llm_server.contradiction_questions == [("Ada lives in Berlin", "Ada lives in Paris")]
    await graph.upsert(
        "d4",
        [
            (
                [ent("Ada"), ent("French", "Language"), ent("German", "Language")],
                [rel("Ada", "speaks", "French"), rel("Ada", "speaks", "German")],
            )
        ],
        order_key="2020",
    )
    assert await _states(graph, "speaks") == {
        "French": ("current", None, None),
        "German": ("current", None, None),
    }
    assert await _cached(graph) == [
        ("Ada lives in Berlin", "Ada lives in Paris", True),
        ("Ada speaks French", "Ada speaks German", False),
    ]
    # the feed and the belief history name the mechanism
    s = sql.Identifier(graph.info.schema)
    cur = await conn.execute(
        sql.SQL(
            "SELECT payload->>'superseded_via' FROM {}.outbox WHERE kind = 'relation_superseded'"
        ).format(s)
    )
    assert [r[0] for r in await cur.fetchall()] == ["model"]
    cur = await conn.execute(
        sql.SQL(
            "SELECT count(*) FROM {}.relation_history WHERE superseded_via = 'model'"
            " AND t_expired IS NULL"
        ).format(s)
    )
    assert (await cur.fetchone()) == (1,)

    # Withdrawing the newer restores the older; writing it again asks nothing.
    calls = llm_server.contradiction_calls
    await graph.delete("d2")
    assert (await _states(graph, "lives_in"))["Paris"] == ("current", None, None)
    await _lives(graph, "d2")
    assert (await _states(graph, "lives_in"))["Paris"] == ("superseded", "Berlin", "model")
    assert llm_server.contradiction_calls == calls == 2


async def test_arrival_order_does_not_change_the_graph(
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    # Paris and Berlin contradict, Rome contradicts neither: a yes is not transitive.
    llm_server.add_contradiction("lives in Paris", "lives in Berlin")
    client = make_llm_client()
    expected = {
        "Berlin": ("current", None, None),
        "Paris": ("superseded", "Berlin", "model"),
        "Rome": ("current", None, None),
    }
    for order in itertools.permutations(PLACES):
        graph = await _graph(conn, unique_name("co"), client)
        for key in order:
            await _lives(graph, key)
        assert await _states(graph, "lives_in") == expected, order
        # withdraw the middle one by document order and put it back: same graph again
        await graph.delete("d3")
        await _lives(graph, "d3")
        assert await _states(graph, "lives_in") == expected, order


async def test_functional_symmetric_and_denied_relations_are_never_asked(
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    graph = await _graph(conn, unique_name("cn"), make_llm_client())
    people = [ent("Ada"), ent("Bob"), ent("Cy"), ent("London"), ent("Leeds"), ent("Rome")]
    await graph.upsert(
        "d1",
        [
            (
                people,
                [
                    rel("Ada", "born_in", "London"),
                    rel("Ada", "born_in", "Leeds"),
                    rel("Ada", "married_to", "Bob"),
                    rel("Ada", "married_to", "Cy"),
                    rel("Ada", "visited", "Rome", negated=True),
                    rel("Ada", "visited", "London"),
                ],
            )
        ],
        order_key="2020",
    )
    assert llm_server.contradiction_calls == 0
    assert await _cached(graph) == []


async def test_an_outage_writes_nothing_until_the_model_answers(
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    llm_server.add_contradiction("Ada lives in", "Ada lives in")
    graph = await _graph(conn, unique_name("cu"), make_llm_client(deadline=0.5))
    await _lives(graph, "d1")
    llm_server.outage(30)
    s = sql.Identifier(graph.info.schema)
    before = await conn.execute(
        sql.SQL("SELECT (SELECT count(*) FROM {s}.relations), (SELECT seq FROM {s}.meta)").format(
            s=s
        )
    )
    counted = await before.fetchone()
    with pytest.raises(LLMUnavailable) as raised:
        await _lives(graph, "d2")
    assert raised.value.retriable
    after = await conn.execute(
        sql.SQL("SELECT (SELECT count(*) FROM {s}.relations), (SELECT seq FROM {s}.meta)").format(
            s=s
        )
    )
    assert await after.fetchone() == counted  # not even a placeholder
    assert await _cached(graph) == []
    llm_server.end_outage()
    await _lives(graph, "d2")
    assert await _states(graph, "lives_in") == {
        "Berlin": ("current", None, None),
        "Paris": ("superseded", "Berlin", "model"),
    }


async def test_the_model_is_asked_outside_the_write_transaction(
    conn: psycopg.AsyncConnection[Any],
    pg_dsn: str,
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    graph = await _graph(
        conn, unique_name("ct"), make_llm_client(deadline=5.0, attempt_timeout=4.0)
    )
    await _lives(graph, "d1")
    llm_server.latency = 1.0
    writing = asyncio.create_task(_lives(graph, "d2"))
    states = []
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as observer:
        while not writing.done():
            if llm_server.in_flight:
                cur = await observer.execute(
                    "SELECT state FROM pg_stat_activity WHERE pid = %s", (conn.info.backend_pid,)
                )
                states.append((await cur.fetchone() or ("gone",))[0])
            await asyncio.sleep(0.05)
    await writing
    # Never inside a transaction while the model thinks ("idle in transaction"); "active"
    # is the next statement, sent as the answer arrives while the server still counts it.
    assert states and not [s for s in states if s.startswith("idle in transaction")], states


async def test_unusable_answers_and_a_missing_endpoint_fail_closed(
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    graph = await _graph(conn, unique_name("cb"), make_llm_client())
    await _lives(graph, "d1")
    llm_server.enqueue(*(Fault.reply("perhaps") for _ in range(3)))
    with pytest.raises(LLMBadOutput, match="no usable contradiction answer after 3"):
        await _lives(graph, "d2")
    assert await _cached(graph) == []

    bare = await _graph(conn, unique_name("ce"), None)
    await _lives(bare, "d1")  # nothing to ask yet
    with pytest.raises(ConfigError, match="no model endpoint is configured"):
        await _lives(bare, "d2")


async def test_a_realm_created_before_the_cache_gets_it_when_opened(
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    graph = await _graph(conn, unique_name("cg"), make_llm_client())
    await conn.execute(
        sql.SQL("DROP TABLE {}").format(sql.Identifier(graph.info.schema, "contradiction_answers"))
    )
    await open_realm(conn, graph.info.realm)
    await _lives(graph, "d1")
    await _lives(graph, "d2")
    assert len(await _cached(graph)) == 1
