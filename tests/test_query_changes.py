"""The change feed over HTTP (DESIGN invariant 7) and the graph read routes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.schemas.changes import GraphChange
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, write_doc

pytestmark = pytest.mark.postgres

CONFIG = RealmConfig(embedder="hashing:8", exclusive_groups=(frozenset({"ally_of", "enemy_of"}),))


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture
async def client(pool: AsyncConnectionPool[Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(pool) as c:
        yield c


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as c:
        yield c


async def outbox_ids(conn: psycopg.AsyncConnection[Any], graph: GraphHarness) -> list[str]:
    cur = await conn.execute(
        sql.SQL("SELECT seq, idx FROM {}.outbox ORDER BY seq, idx").format(
            sql.Identifier(graph.info.schema)
        )
    )
    return [f"{graph.info.realm}:{s}:{i}" for s, i in await cur.fetchall()]


@pytest.mark.slow
async def test_paging_while_writing_is_gap_free_and_duplicate_free(
    pg_dsn: str,
    client: httpx.AsyncClient,
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
) -> None:
    realm = unique_name("f")
    graph = await GraphHarness.create(conn, realm, CONFIG)
    records = 1000
    done = asyncio.Event()

    async def write() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as wconn:
            g = GraphHarness(wconn, graph.info, graph.claim)
            for i in range(records):
                await g.upsert(
                    f"doc{i % 300}",
                    [([ent(f"E{i}"), ent(f"E{i + 1}")], [rel(f"E{i}", "ally_of", f"E{i + 1}")])],
                    content=f"sha256:{i:064d}",
                )
        done.set()

    writer = asyncio.create_task(write())
    seen: list[str] = []
    after = 0
    while True:
        finished = done.is_set()
        r = await client.get(
            f"/v1/realms/{realm}/changes", params={"after_seq": after, "limit": 37}
        )
        assert r.status_code == 200, r.text
        page = r.json()
        for c in page["changes"]:
            GraphChange.from_dict(c)  # every item is a valid contract record
            seen.append(c["id"])
        assert page["next_seq"] >= after
        if page["changes"]:
            assert page["changes"][-1]["seq"] == page["next_seq"]
            # whole commits only: the next page starts at a new commit
            assert page["changes"][0]["seq"] > after
        after = page["next_seq"]
        if finished and after == page["head_seq"] and not page["changes"]:
            break
        await asyncio.sleep(0 if page["changes"] else 0.01)
    await writer
    assert len(seen) == len(set(seen))
    expected = await outbox_ids(conn, graph)
    assert seen == expected
    seqs = sorted({int(i.split(":")[1]) for i in seen})
    assert seqs == list(range(1, records + 1))  # every commit, none skipped


async def test_since_reads_by_belief_time(
    client: httpx.AsyncClient,
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
) -> None:
    realm = unique_name("f")
    g = await GraphHarness.create(conn, realm, CONFIG)
    await g.upsert("a", [([ent("A"), ent("B")], [rel("A", "ally_of", "B")])])
    mark = g.clock
    await g.upsert("b", [([ent("A"), ent("B")], [rel("A", "enemy_of", "B")])], order_key="2")
    r = await client.get(f"/v1/realms/{realm}/changes", params={"since": mark.isoformat()})
    page = r.json()
    assert {c["seq"] for c in page["changes"]} == {2}
    kinds = [c["kind"] for c in page["changes"]]
    assert "relation_superseded" in kinds and "document_indexed" in kinds
    superseded = [c for c in page["changes"] if c["kind"] == "relation_superseded"][0]
    assert superseded["superseded_by"] and superseded["relation"]["predicate"] == "ally_of"
    assert page["next_seq"] == page["head_seq"] == 2
    both = await client.get(
        f"/v1/realms/{realm}/changes", params={"since": mark.isoformat(), "after_seq": 0}
    )
    assert both.status_code == 422 and both.json()["error"]["code"] == "invalid_request"


async def test_a_commit_larger_than_the_page_comes_whole(
    client: httpx.AsyncClient,
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
) -> None:
    realm = unique_name("f")
    g = await GraphHarness.create(conn, realm, CONFIG)
    names = [f"N{i}" for i in range(6)]
    await g.upsert("big", [([ent(n) for n in names], [])])
    await g.upsert("small", [([ent("Z")], [])])
    first = (await client.get(f"/v1/realms/{realm}/changes", params={"limit": 2})).json()
    assert {c["seq"] for c in first["changes"]} == {1} and len(first["changes"]) == 7
    second = (
        await client.get(
            f"/v1/realms/{realm}/changes", params={"limit": 2, "after_seq": first["next_seq"]}
        )
    ).json()
    assert [c["seq"] for c in second["changes"]] == [2, 2]


async def test_document_relations_and_entities_routes(
    client: httpx.AsyncClient,
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
) -> None:
    realm = unique_name("f")
    g = await GraphHarness.create(conn, realm, CONFIG)
    await write_doc(
        g,
        "docs/a b/ü.md",
        [
            (
                "Ada Lovelace, also Countess of Lovelace, worked with Babbage.",
                [ent("Ada Lovelace", aliases=("Countess of Lovelace",)), ent("Charles Babbage")],
                [rel("Ada Lovelace", "ally_of", "Charles Babbage")],
            ),
        ],
    )
    await write_doc(
        g,
        "docs/two.md",
        [
            (
                "Later they fell out.",
                [ent("Ada Lovelace"), ent("Charles Babbage")],
                [rel("Ada Lovelace", "enemy_of", "Charles Babbage", vf="1843")],
            ),
        ],
        order_key="2",
    )
    doc = await client.get(f"/v1/realms/{realm}/documents/docs%2Fa%20b%2F%C3%BC.md")
    assert doc.status_code == 200, doc.text
    body = doc.json()
    assert body["doc_key"] == "docs/a b/ü.md" and body["status"] == "indexed"
    assert body["chunks"] == 1 and body["space"] == "default"
    assert {"content_hash", "source_version", "order_key", "indexed_at", "error"} <= set(body)
    missing = await client.get(f"/v1/realms/{realm}/documents/nope", params={"space": "x"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "document_not_found"

    rels = (
        await client.get(f"/v1/realms/{realm}/relations", params={"subject": "ada lovelace"})
    ).json()["relations"]
    assert [(r["predicate"], r["valid_from"]) for r in rels] == [("enemy_of", "1843")]
    assert rels[0]["doc_keys"] == ["docs/two.md"]
    both = (
        await client.get(f"/v1/realms/{realm}/relations", params={"include_superseded": "true"})
    ).json()["relations"]
    assert {r["predicate"]: r["status"] for r in both} == {
        "ally_of": "superseded",
        "enemy_of": "current",
    }
    old = (
        await client.get(f"/v1/realms/{realm}/relations", params={"as_of": "1800-01-01"})
    ).json()["relations"]
    assert old == []
    for as_of, expected in (("1842", []), ("1843", ["enemy_of"]), ("1843-06", ["enemy_of"])):
        listed = await client.get(f"/v1/realms/{realm}/relations", params={"as_of": as_of})
        assert [r["predicate"] for r in listed.json()["relations"]] == expected, as_of
    bad = await client.get(f"/v1/realms/{realm}/relations", params={"as_of": "1843-13"})
    assert bad.status_code == 422 and "as_of" in bad.json()["error"]["message"]
    ents = (
        await client.get(f"/v1/realms/{realm}/entities", params={"name": "countess of lovelace"})
    ).json()["entities"]
    assert [e["name"] for e in ents] == ["Ada Lovelace"]
    assert ents[0]["aliases"] == ["Countess of Lovelace"] and ents[0]["dormant_since"] is None
    page = (await client.get(f"/v1/realms/{realm}/entities", params={"limit": 1})).json()
    nxt = (
        await client.get(
            f"/v1/realms/{realm}/entities", params={"limit": 1, "after_id": page["next_after_id"]}
        )
    ).json()
    assert page["entities"][0]["id"] != nxt["entities"][0]["id"]
