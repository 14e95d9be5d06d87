"""Coverage telemetry (paper §6.1) through the shipped path: each ``query_data`` of a realm
that records it appends the hash of its text (never the text), the entities and
communities it touched and when; the coverage endpoints read least-retrieved communities
and never-retrieved entities; a failed record (the service role's INSERT revoked mid-run)
is logged and counted while the query still answers."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.communities.store import build_communities
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.query_service import telemetry
from tidegraph.schemas import QueryDataResponse
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import open_realm, switch_lock_key

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, query_data, write_doc

pytestmark = pytest.mark.postgres

ON = RealmConfig(embedder="hashing:8", coverage_telemetry=True)
GROUP_A = ["Ada Lovelace", "Charles Babbage", "Mary Somerville"]
GROUP_B = ["Isaac Newton", "Edmond Halley", "Robert Hooke"]
LONER = "Hermit Person"


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


async def _realm(dsn: str, config: RealmConfig) -> str:
    name = "tc" + uuid.uuid4().hex[:10]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, config)
        for doc, group in (("a.md", GROUP_A), ("b.md", GROUP_B)):
            rels = [rel(x, "worked_with", y) for x in group for y in group if x < y]
            await write_doc(
                g, doc, [(f"{' '.join(group)} worked together.", [ent(n) for n in group], rels)]
            )
        await write_doc(g, "c.md", [("A hermit lived alone.", [ent(LONER)], [])])
        await build_communities(conn, g.info, HashingEmbedder(8))
    return name


async def _rows(dsn: str, realm: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT query_hash, mode, entity_ids, community_ids, at FROM {} ORDER BY id"
            ).format(sql.Identifier(f"realm_{realm}", "retrievals"))
        )
        return list(await cur.fetchall())


async def _ids(dsn: str, realm: str, names: list[str]) -> set[int]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT id FROM {} WHERE name = ANY(%s)").format(
                sql.Identifier(f"realm_{realm}", "entities")
            ),
            (names,),
        )
        return {int(r[0]) for r in await cur.fetchall()}


async def _get(client: httpx.AsyncClient, realm: str, what: str, **params: Any) -> dict[str, Any]:
    r = await client.get(f"/v1/realms/{realm}/coverage/{what}", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_queries_record_hashes_and_what_they_touched(
    pool: AsyncConnectionPool[Any], pg_dsn: str
) -> None:
    realm = await _realm(pg_dsn, ON)
    async with api_client(pool) as client:
        before = await _get(client, realm, "entities")
        assert before["since"] is None
        assert {e["name"] for e in before["entities"]} == {*GROUP_A, *GROUP_B, LONER}
        communities = (await _get(client, realm, "communities"))["communities"]
        assert len(communities) == 2 and all(c["retrievals"] == 0 for c in communities)

        question = "Who worked with Ada Lovelace?"
        local = await query_data(client, realm, query=question, mode="local")
        hybrid = await query_data(client, realm, query="Babbage worked together", mode="hybrid")
        assert hybrid["communities"], "hybrid mode reports communities"

        rows = await _rows(pg_dsn, realm)
        assert [(h, m) for h, m, *_ in rows] == [
            (content_hash(question), "local"),
            (content_hash("Babbage worked together"), "hybrid"),
        ]
        assert not any("Ada" in str(r) or "Babbage" in str(r) for r in rows), "never the text"
        touched = set(rows[0][2])
        assert {int(e["id"]) for e in local["entities"]} <= touched
        assert await _ids(pg_dsn, realm, GROUP_A) <= touched, "ends of reported relations"
        assert [str(c) for c in rows[1][3]] == [c["id"] for c in hybrid["communities"]]

        never = await _get(client, realm, "entities")
        assert never["since"] is not None
        names = {e["name"] for e in never["entities"]}
        assert LONER in names and not names & set(GROUP_A)
        ranked = (await _get(client, realm, "communities"))["communities"]
        assert ranked[-1]["id"] == hybrid["communities"][0]["id"]
        assert ranked[-1]["retrievals"] >= 1 and ranked[-1]["last_retrieved_at"]
        assert ranked[0]["retrievals"] <= ranked[-1]["retrievals"]

        paged = await _get(client, realm, "entities", limit=1)
        assert len(paged["entities"]) == 1 and paged["next_after_id"] is not None


async def test_off_by_default_records_nothing_and_coverage_says_so(
    pool: AsyncConnectionPool[Any], pg_dsn: str
) -> None:
    realm = await _realm(pg_dsn, RealmConfig(embedder="hashing:8"))
    async with api_client(pool) as client:
        await query_data(client, realm, query="Who worked with Ada Lovelace?")
        for what in ("entities", "communities"):
            r = await client.get(f"/v1/realms/{realm}/coverage/{what}")
            assert r.status_code == 409 and r.json()["error"]["code"] == "telemetry_off"
    assert await _rows(pg_dsn, realm) == []


async def test_coverage_is_key_checked(pool: AsyncConnectionPool[Any], pg_dsn: str) -> None:
    realm = await _realm(pg_dsn, ON)
    async with api_client(pool, api_keys="k=someoneelse") as client:
        for what in ("entities", "communities"):
            r = await client.get(
                f"/v1/realms/{realm}/coverage/{what}", headers={"Authorization": "Bearer k"}
            )
            assert r.status_code == 403


def _failures(metrics: str, realm: str) -> float:
    found = re.search(
        rf'^tidegraph_telemetry_write_failures_total{{realm="{realm}"}} (\S+)$', metrics, re.M
    )
    return float(found.group(1)) if found else 0.0


async def test_a_failed_record_never_fails_the_query(pg_dsn: str) -> None:
    """The service connects as a role of its own; its INSERT on the telemetry table is
    revoked mid-run: queries still answer 200, the failure counter rises; granted again,
    records resume."""
    realm = await _realm(pg_dsn, ON)
    role = "svc_" + uuid.uuid4().hex[:10]
    schema = sql.Identifier(f"realm_{realm}")
    table = sql.Identifier(f"realm_{realm}", "retrievals")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
        await admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'svc'").format(sql.Identifier(role))
        )
        r = sql.Identifier(role)
        for stmt in (
            "GRANT USAGE ON SCHEMA tidegraph, {s} TO {r}",
            "GRANT SELECT ON ALL TABLES IN SCHEMA tidegraph TO {r}",
            "GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {r}",
            "GRANT INSERT ON {t} TO {r}",
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {r}",
        ):
            await admin.execute(sql.SQL(stmt).format(s=schema, r=r, t=table))
        params = conninfo_to_dict(pg_dsn) | {"user": role, "password": "svc"}
        async with open_pool(make_conninfo(**params)) as svc_pool, api_client(svc_pool) as client:
            ask = {"query": "Who worked with Ada Lovelace?"}
            await query_data(client, realm, **ask)
            assert len(await _rows(pg_dsn, realm)) == 1
            assert _failures((await client.get("/metrics")).text, realm) == 0

            await admin.execute(sql.SQL("REVOKE INSERT ON {} FROM {}").format(table, r))
            for n in (1, 2):
                answered = await query_data(client, realm, **ask)
                assert answered["relations"], "the query answers as before"
                assert _failures((await client.get("/metrics")).text, realm) == n
            assert len(await _rows(pg_dsn, realm)) == 1

            await admin.execute(sql.SQL("GRANT INSERT ON {} TO {}").format(table, r))
            await query_data(client, realm, **ask)
            assert len(await _rows(pg_dsn, realm)) == 2
        await admin.execute(sql.SQL("DROP OWNED BY {}").format(r))
        await admin.execute(sql.SQL("DROP ROLE {}").format(r))


async def test_a_realm_created_before_telemetry_gets_its_table(
    pool: AsyncConnectionPool[Any], pg_dsn: str
) -> None:
    realm = await _realm(pg_dsn, ON)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP TABLE {}").format(sql.Identifier(f"realm_{realm}", "retrievals"))
        )
    async with api_client(pool) as client:
        await query_data(client, realm, query="Who worked with Ada Lovelace?")
    assert len(await _rows(pg_dsn, realm)) == 1


async def test_a_record_made_during_a_switch_waits_and_then_sees_the_fence(pg_dsn: str) -> None:
    """A move switching the realm holds its switch lock while it fences the copy: a record
    made meanwhile waits for the switch, then writes nothing into the fenced copy (its
    caller writes where the realm went); one made before the switch is in the copy."""
    realm = await _realm(pg_dsn, ON)
    empty = QueryDataResponse(entities=[], relations=[], chunks=[], communities=[], stats={})
    async with (
        await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as mover,
        await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as service,
    ):
        meta = await open_realm(service, realm)
        assert await telemetry.record(service, meta, "before", "local", empty)
        async with mover.transaction():
            await mover.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (switch_lock_key(realm),)
            )
            await mover.execute(
                sql.SQL("UPDATE {} SET swapped_out = true").format(
                    sql.Identifier(meta.schema, "meta")
                )
            )
            during = asyncio.create_task(telemetry.record(service, meta, "during", "local", empty))
            await asyncio.sleep(0.5)
            assert not during.done(), "the record did not wait for the switch"
        assert await during is False
    assert [row[0] for row in await _rows(pg_dsn, realm)] == [content_hash("before")]
