"""Every realm read says the realm's head sequence and which node answered; a required
sequence is accepted as a header or a parameter, and the client sends back what it saw.
One server, no standby: the primary answers everything (the standby cases are in
``test_replica_reads.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.client import AsyncClient
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool

pytestmark = pytest.mark.postgres

CONFIG = RealmConfig(embedder="hashing:8")


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


async def head_in_db(conn: psycopg.AsyncConnection[Any], schema: str) -> int:
    cur = await conn.execute(sql.SQL("SELECT seq FROM {}.meta").format(sql.Identifier(schema)))
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_every_realm_read_names_the_head_and_the_node(
    pool: AsyncConnectionPool[Any], pg_conn: Any, unique_name: Callable[[str], str]
) -> None:
    realm = unique_name("hs")
    g = await GraphHarness.create(pg_conn, realm, CONFIG)
    await g.upsert("a", [([ent("Ada"), ent("Charles")], [rel("Ada", "worked_with", "Charles")])])
    await g.upsert("b", [([ent("Ada"), ent("Mary")], [rel("Ada", "worked_with", "Mary")])])
    head = await head_in_db(pg_conn, g.info.schema)
    assert head >= 2
    base = f"/v1/realms/{realm}"
    async with api_client(pool) as c:
        answers = [
            await c.get(f"{base}/changes", params={"after_seq": 0}),
            await c.get(f"{base}/relations"),
            await c.get(f"{base}/entities"),
            await c.get(f"{base}/documents/a"),
            await c.post(f"{base}/query_data", json={"query": "Ada", "mode": "local"}),
        ]
        for r in answers:
            assert r.status_code == 200, r.text
            assert r.headers["x-tidegraph-head-sequence"] == str(head), r.request.url
            assert r.headers["x-tidegraph-served-by"] == "main"
        assert answers[0].json()["head_seq"] == head
        # the service's own routes carry no realm head
        assert "x-tidegraph-head-sequence" not in (await c.get("/healthz")).headers


async def test_a_required_sequence_is_checked_and_the_primary_answers_it(
    pool: AsyncConnectionPool[Any], pg_conn: Any, unique_name: Callable[[str], str]
) -> None:
    realm = unique_name("hq")
    g = await GraphHarness.create(pg_conn, realm, CONFIG)
    await g.upsert("a", [([ent("Ada")], [])])
    base = f"/v1/realms/{realm}/entities"
    async with api_client(pool) as c:
        for params, headers in (
            ({"min_seq": "1"}, {}),
            ({}, {"X-Tidegraph-Min-Sequence": "1"}),
            ({"min_seq": "999999"}, {"X-Tidegraph-Min-Sequence": "3"}),
        ):
            r = await c.get(base, params=params, headers=headers)
            assert r.status_code == 200, r.text
            assert r.headers["x-tidegraph-served-by"] == "main"
        for params, headers in (
            ({"min_seq": "-1"}, {}),
            ({"min_seq": "x"}, {}),
            ({}, {"X-Tidegraph-Min-Sequence": "-5"}),
            ({}, {"X-Tidegraph-Min-Sequence": "soon"}),
        ):
            r = await c.get(base, params=params, headers=headers)
            assert r.status_code == 422, (params, headers, r.text)
            assert r.json()["error"]["code"] == "invalid_request"


async def test_the_client_sends_back_the_highest_head_it_saw(
    pool: AsyncConnectionPool[Any], pg_conn: Any, unique_name: Callable[[str], str]
) -> None:
    realm = unique_name("hc")
    g = await GraphHarness.create(pg_conn, realm, CONFIG)
    await g.upsert("a", [([ent("Ada")], [])])
    sent: list[str | None] = []

    async def note(request: httpx.Request) -> None:
        sent.append(request.headers.get("x-tidegraph-min-sequence"))

    async with api_client(pool) as c:
        transport = c._transport  # the app over ASGI, as the client's transport
        async with AsyncClient("http://tidegraph.test", transport=transport) as tg:
            tg._http.event_hooks["request"].append(note)
            await tg.entities(realm)
            first = tg.sequences.get(realm)
            assert first == await head_in_db(pg_conn, g.info.schema)
            await g.upsert("b", [([ent("Mary")], [])])
            await tg.relations(realm)
            await tg.changes(realm, after_seq=0)
            assert tg.sequences.get(realm) == first + 1
            tg.sequences.require(realm, 1)  # never lowers it
            await tg.entities(realm)
        assert sent == [None, str(first), str(first + 1), str(first + 1)]
        async with AsyncClient(
            "http://tidegraph.test", transport=transport, read_your_writes=False
        ) as off:
            off._http.event_hooks["request"].append(note)
            await off.entities(realm)
            await off.entities(realm)
            assert off.sequences.get(realm) == first + 1  # seen, not sent
        assert sent[-2:] == [None, None]
