"""``GET /communities``: the nested topic tree of the last community build over HTTP, with
levels and containment (parent and children), paged by id and filtered by space and level."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.communities.detect import ClusterParams
from tidegraph.indexer.communities.store import build_communities
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


async def _families(g: GraphHarness, space: str) -> None:
    """Three families of three cliques: nine communities at level 0 under three at level 1."""
    for f in range(3):
        cliques = [[f"Person {f}{c}{i}" for i in range(6)] for c in range(3)]
        rels = [rel(a, "worked_with", b) for cl in cliques for a in cl for b in cl if a < b]
        rels += [rel(cliques[c][t], "met", cliques[c + 1][t]) for c in range(2) for t in (0, 1)]
        await g.upsert(f"family-{f}", [([ent(n) for cl in cliques for n in cl], rels)], space=space)
    await g.upsert(
        "links",
        [([], [rel("Person 020", "met", "Person 100"), rel("Person 120", "met", "Person 200")])],
        space=space,
    )


@pytest.fixture(scope="module")
async def realm(pg_dsn: str) -> str:
    name = "ct" + uuid.uuid4().hex[:10]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, RealmConfig(embedder="hashing:8"))
        await _families(g, "default")
        await g.upsert(
            "pair",
            [
                (
                    [ent("Lone A"), ent("Lone B"), ent("Lone C")],
                    [
                        rel("Lone A", "met", "Lone B"),
                        rel("Lone B", "met", "Lone C"),
                        rel("Lone A", "met", "Lone C"),
                    ],
                )
            ],
            space="other",
        )
        result = await build_communities(
            conn, g.info, HashingEmbedder(8), params=ClusterParams(levels=2)
        )
        assert result is not None
    return name


async def _tree(client: httpx.AsyncClient, realm: str, **params: Any) -> dict[str, Any]:
    r = await client.get(f"/v1/realms/{realm}/communities", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_levels_and_containment(pool: AsyncConnectionPool[Any], realm: str) -> None:
    async with api_client(pool) as client:
        tree = await _tree(client, realm, space="default")
    items = {c["id"]: c for c in tree["communities"]}
    assert tree["levels"] == [0, 1] and tree["stale"] is False and tree["built_at"]
    assert tree["next_after_id"] is None
    leaves = [c for c in items.values() if c["level"] == 0]
    tops = [c for c in items.values() if c["level"] == 1]
    assert (len(leaves), len(tops)) == (9, 3)
    for top in tops:
        assert top["parent_id"] is None and len(top["children"]) == 3
        assert sum(items[k]["size"] for k in top["children"]) == top["size"] == 18
        for k in top["children"]:
            assert items[k]["parent_id"] == top["id"] and items[k]["children"] == []
    assert all(c["space"] == "default" for c in items.values())


async def test_space_level_and_paging(pool: AsyncConnectionPool[Any], realm: str) -> None:
    async with api_client(pool) as client:
        other = await _tree(client, realm, space="other")
        assert [(c["level"], c["size"]) for c in other["communities"]] == [(0, 3)]
        tops = await _tree(client, realm, space="default", level=1)
        assert [c["level"] for c in tops["communities"]] == [1, 1, 1]
        seen: list[str] = []
        after = 0
        while True:  # pages of two: every item still names all its children
            page = await _tree(client, realm, after_id=after, limit=2)
            seen += [c["id"] for c in page["communities"]]
            if page["next_after_id"] is None:
                break
            after = page["next_after_id"]
        assert len(seen) == len(set(seen)) == 13
        everything = await _tree(client, realm, limit=100)
        assert [c["id"] for c in everything["communities"]] == seen
        r = await client.get(f"/v1/realms/{realm}/communities", params={"space": "Bad Space"})
        assert r.status_code == 422


async def test_a_realm_never_built_has_an_empty_tree(
    pool: AsyncConnectionPool[Any], pg_dsn: str
) -> None:
    name = "cn" + uuid.uuid4().hex[:10]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await GraphHarness.create(conn, name, RealmConfig(embedder="hashing:8"))
    async with api_client(pool) as client:
        tree = await _tree(client, name)
    assert tree == {
        "communities": [],
        "levels": [],
        "built_at": None,
        "stale": False,
        "next_after_id": None,
    }
