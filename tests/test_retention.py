"""Retention as demotion (paper §6.1) on real PostgreSQL, read back through the shipped
path: it refuses without telemetry; it archives the least valuable entities in one
sequenced commit the change feed shows; archived entities are absent from every retrieval
channel and from communities, yet kept (their relations too); restoring brings them back,
also on the feed. The CLI does the same."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import orjson
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.communities.store import build_communities
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.indexer.retention.archive import archive, plan_retention, unarchive
from tidegraph.infra.cli import main
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import open_realm

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, query_data, write_doc

pytestmark = pytest.mark.postgres

ON = RealmConfig(embedder="hashing:8", coverage_telemetry=True)
KEPT = ["Ada Lovelace", "Charles Babbage", "Mary Somerville"]
DROPPED = ["Isaac Newton", "Edmond Halley", "Robert Hooke"]
LONER = "Hermit Person"
ASK_KEPT = "Who worked with Ada Lovelace?"
MODES = ("local", "mix", "global", "hybrid", "naive")


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


async def _realm(dsn: str, config: RealmConfig) -> str:
    """Two cliques of three and a loner, communities built."""
    name = "rt" + uuid.uuid4().hex[:10]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, config)
        for doc, group in (("a.md", KEPT), ("b.md", DROPPED)):
            rels = [rel(x, "worked_with", y) for x in group for y in group if x < y]
            text = f"{' '.join(group)} worked together."
            await write_doc(g, doc, [(text, [ent(n) for n in group], rels)])
        await write_doc(g, "c.md", [("A hermit lived alone.", [ent(LONER)], [])])
        await build_communities(conn, g.info, HashingEmbedder(8))
    return name


async def _use(pool: AsyncConnectionPool[Any], realm: str) -> None:
    """Queries that touch the first clique only (recorded by telemetry)."""
    async with api_client(pool) as client:
        for _ in range(3):
            found = await query_data(
                client, realm, query=ASK_KEPT, mode="local", top_k=1, relation_top_k=2
            )
            assert _names(found) == set(KEPT)


def _names(result: dict[str, Any]) -> set[str]:
    """Every entity name a query_data answer carries, in any channel."""
    names = {e["name"] for e in result["entities"]}
    names |= {x for r in result["relations"] for x in (r["subject"], r["object"])}
    return names


async def _everything(client: httpx.AsyncClient, realm: str, **extra: Any) -> set[str]:
    """Names reached by every mode, with every reranking on, for questions naming each
    entity (name channel, focus, vector, full text, walk)."""
    seen: set[str] = set()
    for mode in MODES:
        for who in (*KEPT, *DROPPED, LONER):
            for q in (f"Who worked with {who}?", f"{who} worked together"):
                body = {"query": q, "mode": mode, "node_distance": True, "mmr": True, **extra}
                seen |= _names(await query_data(client, realm, **body))
    return seen


async def _changes(client: httpx.AsyncClient, realm: str, after: int) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/realms/{realm}/changes", params={"after_seq": after})
    assert r.status_code == 200, r.text
    changes: list[dict[str, Any]] = r.json()["changes"]
    return changes


async def _head(conn: psycopg.AsyncConnection[Any], realm: str) -> int:
    cur = await conn.execute(
        sql.SQL("SELECT seq FROM {}").format(sql.Identifier(f"realm_{realm}", "meta"))
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_refuses_without_telemetry(pg_dsn: str) -> None:
    realm = await _realm(pg_dsn, RealmConfig(embedder="hashing:8"))
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        info = await open_realm(conn, realm)
        before = await _head(conn, realm)
        with pytest.raises(ConfigError, match="telemetry"):
            await plan_retention(conn, info, 0.5)
        assert await _head(conn, realm) == before


async def test_archive_withholds_everywhere_and_unarchive_restores(
    pool: AsyncConnectionPool[Any], pg_dsn: str
) -> None:
    realm = await _realm(pg_dsn, ON)
    await _use(pool, realm)
    async with (
        await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn,
        api_client(pool) as client,
    ):
        info = await open_realm(conn, realm)
        everyone = {*KEPT, *DROPPED, LONER}
        # (no probing of the whole graph first: telemetry would record it as use)
        plan = await plan_retention(conn, info, 0.42)  # keep 3 of 7
        assert plan.considered == 7
        assert [n for _, n, _ in plan.archive][0] == LONER, "no links, never retrieved"
        assert {n for _, n, _ in plan.archive} == {*DROPPED, LONER}
        head = await _head(conn, realm)
        done = await archive(conn, info, [i for i, _, _ in plan.archive])
        assert done.seq == head + 1 and len(done.entity_ids) == 4

        feed = await _changes(client, realm, head)
        assert {c["seq"] for c in feed} == {done.seq}
        kinds = [c["kind"] for c in feed]
        assert kinds == ["entity_archived"] * 4 + ["communities_stale"]
        assert {c["entity"]["name"] for c in feed if c["kind"] == "entity_archived"} == {
            *DROPPED,
            LONER,
        }

        # absent from every channel and mode, also with node distance and MMR
        seen = await _everything(client, realm)
        assert seen & everyone == set(KEPT)
        # … and from lookups, unless asked; preserved with their relations
        r = await client.get(f"/v1/realms/{realm}/entities", params={"name": "Isaac"})
        assert r.json()["entities"] == []
        r = await client.get(
            f"/v1/realms/{realm}/entities", params={"name": "Isaac", "include_archived": True}
        )
        [newton] = r.json()["entities"]
        assert newton["archived_since"] is not None
        cur = await conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {r} r JOIN {e} e ON e.id = r.subject_id"
                " WHERE e.name = ANY(%s) AND r.status = 'current'"
            ).format(
                r=sql.Identifier(info.schema, "relations"),
                e=sql.Identifier(info.schema, "entities"),
            ),
            (DROPPED,),
        )
        assert (await cur.fetchone()) == (3,)
        # coverage leaves them out of the never-retrieved list
        cov = (await client.get(f"/v1/realms/{realm}/coverage/entities")).json()["entities"]
        assert not {e["name"] for e in cov} & {*DROPPED, LONER}
        # belief time: withheld as believed at the archival, there just before it
        archived_at = datetime.fromisoformat(feed[0]["belief_time"])
        at = await _everything(client, realm, as_believed_at=archived_at.isoformat())
        assert not at & set(DROPPED)
        before = archived_at - timedelta(microseconds=1)
        assert await _everything(client, realm, as_believed_at=before.isoformat()) >= set(DROPPED)

        # community construction leaves them out
        await build_communities(conn, info, HashingEmbedder(8))
        cur = await conn.execute(
            sql.SQL(
                "SELECT e.name FROM {m} m JOIN {c} c ON c.id = m.community_id"
                " AND c.t_expired IS NULL JOIN {e} e ON e.id = m.entity_id ORDER BY 1"
            ).format(
                m=sql.Identifier(info.schema, "community_members"),
                c=sql.Identifier(info.schema, "communities"),
                e=sql.Identifier(info.schema, "entities"),
            )
        )
        assert {r[0] for r in await cur.fetchall()} == set(KEPT)

        # restoring brings everything back, on the feed too
        head = await _head(conn, realm)
        back = await unarchive(conn, info, None)
        assert back.seq == head + 1 and sorted(back.entity_ids) == sorted(done.entity_ids)
        feed = await _changes(client, realm, head)
        assert [c["kind"] for c in feed if c["kind"] != "communities_stale"] == [
            "entity_unarchived"
        ] * 4
        assert await _everything(client, realm) >= {*KEPT, *DROPPED}
        # nothing left to restore: no commit
        assert (await unarchive(conn, info, None)).seq is None
        assert await _head(conn, realm) == back.seq


def test_retention_and_unarchive_commands(pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def setup() -> str:
        realm = await _realm(pg_dsn, ON)
        async with open_pool(pg_dsn) as pool:
            await _use(pool, realm)
        return realm

    async def head_and_archived(realm: str) -> tuple[int, set[str]]:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            cur = await conn.execute(
                sql.SQL("SELECT name FROM {} WHERE archived_since IS NOT NULL").format(
                    sql.Identifier(f"realm_{realm}", "entities")
                )
            )
            return await _head(conn, realm), {r[0] for r in await cur.fetchall()}

    realm = asyncio.run(setup())
    off = asyncio.run(_realm(pg_dsn, RealmConfig(embedder="hashing:8")))
    dsn = ["--pg-dsn", pg_dsn]
    assert main(["retention", "--realm", off, "--keep", "0.5", *dsn]) != 0
    assert "telemetry" in capsys.readouterr().err
    head, archived = asyncio.run(head_and_archived(realm))
    assert main(["retention", "--realm", realm, "--keep", "0.42", "--dry-run", "--json", *dsn]) == 0
    dry = orjson.loads(capsys.readouterr().out)
    assert dry["seq"] is None and {a["name"] for a in dry["archived"]} == {*DROPPED, LONER}
    assert asyncio.run(head_and_archived(realm)) == (head, set())
    assert main(["retention", "--realm", realm, "--keep", "0.42", "--json", *dsn]) == 0
    wet = orjson.loads(capsys.readouterr().out)
    assert wet["seq"] == head + 1
    assert asyncio.run(head_and_archived(realm)) == (head + 1, {*DROPPED, LONER})
    newton = next(a["id"] for a in wet["archived"] if a["name"] == "Isaac Newton")
    assert main(["unarchive", "--realm", realm, "--entity", newton, "--json", *dsn]) == 0
    assert orjson.loads(capsys.readouterr().out)["restored"] == [newton]
    assert asyncio.run(head_and_archived(realm)) == (
        head + 2,
        {"Edmond Halley", "Robert Hooke", LONER},
    )
    assert main(["unarchive", "--realm", realm, "--all", *dsn]) == 0
    assert asyncio.run(head_and_archived(realm)) == (head + 3, set())
    assert main(["retention", "--realm", realm, "--keep", "2", *dsn]) != 0
