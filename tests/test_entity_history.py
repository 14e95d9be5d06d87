"""Entity attributes in belief time on real PostgreSQL: the description and type derive from
the live chunks, every change is kept as a belief interval, ``as_believed_at`` reads return
what was believed then (entities endpoint and ``query_data``), and the change feed reports
each change, a withdrawal's included."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.locks import lock_realm_schema
from tidegraph.store.realms import open_realm

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, query_data, write_doc

pytestmark = pytest.mark.postgres

V1 = "An English mathematician who wrote the first published program."
V2 = "A mathematician."
OTHER = "Babbage's collaborator."


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture
async def graph(pg_dsn: str) -> AsyncIterator[GraphHarness]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        yield await GraphHarness.create(
            conn, "h" + uuid.uuid4().hex[:12], RealmConfig(embedder="hashing:8")
        )


def _ada(desc: str, typ: str = "Person") -> list[Any]:
    return [
        (
            "Ada Lovelace worked with Charles Babbage.",
            [ent("Ada Lovelace", typ, desc), ent("Charles Babbage")],
            [rel("Ada Lovelace", "worked_with", "Charles Babbage")],
        )
    ]


async def _listed(client: Any, realm: str, **params: Any) -> dict[str, tuple[str, str]]:
    r = await client.get(f"/v1/realms/{realm}/entities", params=params)
    assert r.status_code == 200, r.text
    return {e["name"]: (e["type"], e["description"]) for e in r.json()["entities"]}


async def _entity_changes(graph: GraphHarness) -> list[tuple[int, str, dict[str, Any]]]:
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT seq, kind, payload -> 'entity' FROM {}.outbox"
            " WHERE kind LIKE 'entity%%' ORDER BY seq, idx"
        ).format(sql.Identifier(graph.info.schema))
    )
    return [(int(s), str(k), dict(e)) for s, k, e in await cur.fetchall()]


async def test_a_replaced_description_is_read_back_as_believed_then(
    graph: GraphHarness, pool: AsyncConnectionPool[Any]
) -> None:
    await write_doc(graph, "ada.md", _ada(V1))
    t1 = graph.clock
    await write_doc(graph, "ada.md", _ada(V2, "Mathematician"))
    t2 = graph.clock
    realm = graph.info.realm
    between, after = t1 + timedelta(milliseconds=500), t2 + timedelta(milliseconds=500)
    async with api_client(pool) as client:
        assert (await _listed(client, realm))["Ada Lovelace"] == ("Mathematician", V2)
        then = await _listed(client, realm, as_believed_at=between.isoformat())
        assert then["Ada Lovelace"] == ("Person", V1)
        now = await _listed(client, realm, as_believed_at=after.isoformat())
        assert now["Ada Lovelace"] == ("Mathematician", V2)
        looked_up = await _listed(
            client, realm, name="Ada Lovelace", as_believed_at=between.isoformat()
        )
        assert looked_up == {"Ada Lovelace": ("Person", V1)}
        before = await _listed(
            client, realm, as_believed_at=(t1 - timedelta(seconds=1)).isoformat()
        )
        assert before == {}
        for at, want in ((between, ("Person", V1)), (after, ("Mathematician", V2))):
            for mode in ("local", "hybrid"):
                body = await query_data(
                    client,
                    realm,
                    query="Who did Ada Lovelace work with?",
                    mode=mode,
                    as_believed_at=at.isoformat(),
                )
                found = {e["name"]: (e["type"], e["description"]) for e in body["entities"]}
                assert found["Ada Lovelace"] == want, (mode, at)
    # The replacing version reports the change once, with every attribute.
    updates = [e for _, k, e in await _entity_changes(graph) if k == "entity_updated"]
    assert [(u["name"], u["type"], u["description"]) for u in updates] == [
        ("Ada Lovelace", "Mathematician", V2)
    ]


async def test_withdrawing_the_only_teacher_removes_the_description(
    graph: GraphHarness, pool: AsyncConnectionPool[Any]
) -> None:
    await write_doc(graph, "ada.md", _ada(V1))
    await write_doc(
        graph,
        "babbage.md",
        [
            (
                "Charles Babbage.",
                [ent("Charles Babbage", "Person", OTHER), ent("Ada Lovelace", "Concept")],
                [],
            )
        ],
    )
    t1 = graph.clock
    await graph.delete("ada.md")
    seq_deleted = max(s for s, _, _ in await _entity_changes(graph))
    async with api_client(pool) as client:
        now = await _listed(client, graph.info.realm)
        assert now["Ada Lovelace"] == ("Concept", "")
        assert now["Charles Babbage"] == ("Person", OTHER)
        then = await _listed(
            client, graph.info.realm, as_believed_at=(t1 + timedelta(milliseconds=1)).isoformat()
        )
        assert then["Ada Lovelace"] == ("Person", V1)
    changes = [(k, e) for s, k, e in await _entity_changes(graph) if s == seq_deleted]
    updated = [e for k, e in changes if k == "entity_updated"]
    assert [(u["name"], u["type"], u["description"]) for u in updated] == [
        ("Ada Lovelace", "Concept", "")
    ]
    # The history is append-only: the interval of V1 was closed, not rewritten.
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT h.description, h.t_expired IS NULL FROM {s}.entity_history h"
            " JOIN {s}.entities e ON e.id = h.entity_id WHERE e.name = 'Ada Lovelace'"
            " ORDER BY h.t_created"
        ).format(s=sql.Identifier(graph.info.schema))
    )
    assert await cur.fetchall() == [(V1, False), ("", True)]


async def test_a_shorter_description_from_another_document_survives_a_withdrawal(
    graph: GraphHarness,
) -> None:
    """Longest live description wins; when its document goes, the next longest live one
    (not the longest ever seen) is the description."""
    await write_doc(graph, "a.md", _ada(V1))
    await write_doc(graph, "b.md", [("Ada.", [ent("Ada Lovelace", "Person", V2)], [])])
    assert (await graph.entities())["Ada Lovelace"][0] == "Person"
    await graph.delete("a.md")
    cur = await graph.conn.execute(
        sql.SQL("SELECT description FROM {}.entities WHERE name = 'Ada Lovelace'").format(
            sql.Identifier(graph.info.schema)
        )
    )
    assert await cur.fetchall() == [(V2,)]


async def test_a_realm_of_the_earlier_layout_gets_seeded_history_on_open(
    graph: GraphHarness,
) -> None:
    """Upgrade: a realm without the tables gets them when opened, seeded from its entities
    and mentions; opening again changes nothing, and writes go on from the seed."""
    await write_doc(graph, "ada.md", _ada(V1))
    s = graph.info.schema
    conn = graph.conn
    await conn.execute(
        sql.SQL("DROP TABLE {s}.entity_sources, {s}.entity_history").format(s=sql.Identifier(s))
    )
    await open_realm(conn, graph.info.realm)
    await open_realm(conn, graph.info.realm)
    cur = await conn.execute(
        sql.SQL(
            "SELECT e.name, h.type, h.description, h.t_created = e.created_at, h.t_expired"
            " FROM {s}.entity_history h JOIN {s}.entities e ON e.id = h.entity_id ORDER BY 1"
        ).format(s=sql.Identifier(s))
    )
    assert await cur.fetchall() == [
        ("Ada Lovelace", "Person", V1, True, None),
        ("Charles Babbage", "Person", "", True, None),
    ]
    cur = await conn.execute(
        sql.SQL(
            "SELECT e.name, x.type, x.description FROM {s}.entity_sources x"
            " JOIN {s}.entities e ON e.id = x.entity_id ORDER BY 1"
        ).format(s=sql.Identifier(s))
    )
    assert await cur.fetchall() == [
        ("Ada Lovelace", "Person", V1),
        ("Charles Babbage", "Person", ""),
    ]
    await graph.delete("ada.md")
    cur = await conn.execute(
        sql.SQL("SELECT name, description FROM {}.entities ORDER BY 1").format(sql.Identifier(s))
    )
    assert await cur.fetchall() == [("Ada Lovelace", ""), ("Charles Babbage", "")]


async def test_relation_ends_carry_the_names_believed_then(
    graph: GraphHarness, pool: AsyncConnectionPool[Any]
) -> None:
    """A later document proves ``Babbage`` is ``Charles Babbage``: the entity is renamed in
    place; relations read as believed before show the name believed then."""
    await write_doc(
        graph,
        "a.md",
        [
            (
                "Ada Lovelace worked with Babbage.",
                [ent("Ada Lovelace"), ent("Babbage")],
                [rel("Ada Lovelace", "worked_with", "Babbage")],
            )
        ],
    )
    between = graph.clock + timedelta(milliseconds=500)
    await write_doc(
        graph,
        "b.md",
        [("Charles Babbage.", [ent("Charles Babbage", aliases=("Babbage",))], [])],
    )
    realm = graph.info.realm
    async with api_client(pool) as client:
        for at, name in ((None, "Charles Babbage"), (between, "Babbage")):
            params = {} if at is None else {"as_believed_at": at.isoformat()}
            r = await client.get(f"/v1/realms/{realm}/relations", params=params)
            assert r.status_code == 200, r.text
            assert [(x["subject"], x["object"]) for x in r.json()["relations"]] == [
                ("Ada Lovelace", name)
            ]
            body = await query_data(
                client, realm, query="Who did Ada Lovelace work with?", mode="local", **params
            )
            assert {x["object"] for x in body["relations"]} == {name}


async def test_opening_an_upgraded_realm_takes_no_lock_and_two_services_seed_once(
    graph: GraphHarness, pg_dsn: str
) -> None:
    """The upgrade is decided from the catalogue: opening a realm that has the tables never
    waits for the layout lock (a write or a swap may hold it); two services meeting an old
    realm at once seed it once."""
    await write_doc(graph, "ada.md", _ada(V1))
    realm, s = graph.info.realm, sql.Identifier(graph.info.schema)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as holder:
        await lock_realm_schema(holder, graph.info.schema)  # held until rollback
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as other:
            await asyncio.wait_for(open_realm(other, realm), 5)
        await holder.rollback()
    await graph.conn.execute(
        sql.SQL("DROP TABLE {s}.entity_sources, {s}.entity_history").format(s=s)
    )
    conns = [await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) for _ in range(3)]
    try:
        await asyncio.gather(*(open_realm(c, realm) for c in conns))
    finally:
        for c in conns:
            await c.close()
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT (SELECT count(*) FROM {s}.entity_history),"
            " (SELECT count(*) FROM {s}.entity_sources), (SELECT count(*) FROM {s}.entities)"
        ).format(s=s)
    )
    assert await cur.fetchall() == [(2, 2, 2)]
