"""``GET /entities?name=``: a ranked lookup by partial name and alias prefix, through the
word-prefix indexes, which a realm of the earlier layout gets on its first lookup."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.ddl import NAME_SEARCH_INDEXES

from graph_helpers import GraphHarness, ent
from query_helpers import api_client, open_pool, write_doc

pytestmark = pytest.mark.postgres

PEOPLE = [
    ent("Ada Lovelace", aliases=("Ada King", "Countess of Lovelace")),
    ent("Adam Smith"),
    ent("Ada"),
    ent("Charles Babbage", aliases=("Babbage",)),
    ent("Grace Adams"),
]


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


async def _realm(dsn: str) -> str:
    realm = "n" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, realm, RealmConfig(embedder="hashing:8"))
        await write_doc(g, "people.md", [("People.", PEOPLE, [])])
        await write_doc(g, "other.md", [("Elsewhere.", [ent("Ada Byron")], [])], space="other")
    return realm


@pytest.fixture(scope="module")
async def realm(pg_dsn: str) -> str:
    return await _realm(pg_dsn)


async def _names(client: httpx.AsyncClient, realm: str, name: str, **params: Any) -> list[str]:
    r = await client.get(f"/v1/realms/{realm}/entities", params={"name": name, **params})
    assert r.status_code == 200, r.text
    assert r.json()["next_after_id"] is None
    return [e["name"] for e in r.json()["entities"]]


async def test_prefix_of_a_name_finds_it_ranked(pool: AsyncConnectionPool[Any], realm: str) -> None:
    async with api_client(pool) as client:
        # exact, then "Ada …" as a whole word, then "Ada…" (Adam), then a later word (Adams)
        assert await _names(client, realm, "Ada", space="default") == [
            "Ada",
            "Ada Lovelace",
            "Adam Smith",
            "Grace Adams",
        ]
        assert await _names(client, realm, "ada", space="*") == [
            "Ada",
            "Ada Byron",
            "Ada Lovelace",
            "Adam Smith",
            "Grace Adams",
        ]
        assert await _names(client, realm, "lovel") == ["Ada Lovelace"]
        assert await _names(client, realm, "ada lov") == ["Ada Lovelace"]
        assert await _names(client, realm, "zzz") == []
        assert await _names(client, realm, "!!") == []


async def test_alias_prefix_and_exact_alias(pool: AsyncConnectionPool[Any], realm: str) -> None:
    async with api_client(pool) as client:
        assert await _names(client, realm, "babb") == ["Charles Babbage"]
        assert await _names(client, realm, "countess") == ["Ada Lovelace"]
        # an exact alias outranks a name that merely begins with the text
        assert await _names(client, realm, "ada king") == ["Ada Lovelace"]
        assert (await _names(client, realm, "Babbage"))[0] == "Charles Babbage"


async def test_the_lookup_uses_the_word_prefix_indexes(pg_dsn: str, realm: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute("SET enable_seqscan = off")
        cur = await conn.execute(
            f"EXPLAIN SELECT id FROM realm_{realm}.entities"
            " WHERE to_tsvector('simple', name_key) @@ to_tsquery('simple', 'ada:*')"
        )
        plan = " ".join(str(r[0]) for r in await cur.fetchall())
    assert "entities_name_words" in plan, plan


async def test_a_realm_without_the_indexes_gets_them_on_first_lookup(
    pool: AsyncConnectionPool[Any], pg_dsn: str
) -> None:
    realm = await _realm(pg_dsn)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for index in NAME_SEARCH_INDEXES:
            await conn.execute(f"DROP INDEX realm_{realm}.{index}")
    async with api_client(pool) as client:
        assert (await _names(client, realm, "Ada"))[:3] == ["Ada", "Ada Byron", "Ada Lovelace"]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexname = ANY(%s)",
            (f"realm_{realm}", list(NAME_SEARCH_INDEXES)),
        )
        row = await cur.fetchone()
    assert row is not None and row[0] == len(NAME_SEARCH_INDEXES)
    async with api_client(pool) as client:  # idempotent: a second service meets it built
        assert (await _names(client, realm, "Ada"))[:3] == ["Ada", "Ada Byron", "Ada Lovelace"]
