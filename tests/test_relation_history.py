"""``GET /v1/realms/{realm}/relations/{id}/history``: a relation's belief intervals, as a
scripted history says they must be (asserted, superseded, restored, retracted, asserted
again), agreeing with the as-believed listing at every instant between them; key-checked."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.schemas.realm_config import preset

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool

pytestmark = pytest.mark.postgres

T = [datetime(2026, 3, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(6)]
PEOPLE = [ent("Charles Babbage"), ent("George Airy")]


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


@pytest.fixture(scope="module")
async def history(pg_dsn: str) -> tuple[str, dict[str, str]]:
    """The realm and the ids of ally_of and enemy_of after this script."""
    realm = "rh" + uuid.uuid4().hex[:10]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, realm, preset("narrative", embedder="hashing:8"))
        ally = [(PEOPLE, [rel("Charles Babbage", "ally_of", "George Airy")])]
        enemy = [(PEOPLE, [rel("Charles Babbage", "enemy_of", "George Airy")])]
        await g.upsert("r1", ally, order_key="1830", at=T[1])
        await g.upsert("r2", enemy, order_key="1842", at=T[2])
        g.clock = T[3] - timedelta(seconds=1)
        await g.delete("r2")  # at T[3]: the enemy goes, the alliance is current again
        g.clock = T[4] - timedelta(seconds=1)
        await g.delete("r1")  # at T[4]: the alliance is retracted
        await g.upsert("r1", ally, order_key="1830", at=T[5])
        cur = await conn.execute(
            sql.SQL("SELECT predicate, id::text FROM {}").format(
                sql.Identifier(g.info.schema, "relations")
            )
        )
        ids = {p: i for p, i in await cur.fetchall()}
    return realm, ids


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


def _interval(state: str, start: int, end: int | None, by: str | None = None) -> dict[str, Any]:
    return {
        "state": state,
        "superseded_by": by,
        "superseded_via": "exclusive_group" if by else None,
        "t_created": _iso(T[start]),
        "t_expired": None if end is None else _iso(T[end]),
    }


async def test_the_intervals_follow_the_script_and_the_as_believed_reads(
    pool: AsyncConnectionPool[Any], history: tuple[str, dict[str, str]]
) -> None:
    realm, ids = history
    ally, enemy = ids["ally_of"], ids["enemy_of"]
    async with api_client(pool) as client:
        got = (await client.get(f"/v1/realms/{realm}/relations/{ally}/history")).json()
        assert got["relation"]["predicate"] == "ally_of" and got["relation"]["status"] == "current"
        assert got["history"] == [
            _interval("current", 1, 2),
            _interval("superseded", 2, 3, by=enemy),
            _interval("current", 3, 4),
            _interval("current", 5, None),  # the gap T4–T5: not believed at all
        ]
        other = (await client.get(f"/v1/realms/{realm}/relations/{enemy}/history")).json()
        assert other["relation"]["status"] == "retracted"
        assert other["history"] == [_interval("current", 2, 3)]

        # every instant between the events: the interval holding it is what the listing says
        for start in T[:5]:
            at = start + timedelta(minutes=30)
            listed = await client.get(
                f"/v1/realms/{realm}/relations",
                params={"as_believed_at": _iso(at), "include_superseded": "true"},
            )
            rows = listed.json()["relations"]
            states = {r["id"]: (r["status"], r["superseded_by"]) for r in rows}
            for rid, body in ((ally, got), (enemy, other)):
                holding = [
                    (i["state"], i["superseded_by"])
                    for i in body["history"]
                    if i["t_created"] <= _iso(at) and (i["t_expired"] or "~") > _iso(at)
                ]
                assert holding == ([states[rid]] if rid in states else []), (rid, at)


async def test_key_checked_and_unknown_ids_are_404(
    pool: AsyncConnectionPool[Any], history: tuple[str, dict[str, str]]
) -> None:
    realm, ids = history
    keys = f"mine-key={realm};other-key=elsewhere"
    async with api_client(pool, api_keys=keys) as client:
        path = f"/v1/realms/{realm}/relations/{ids['ally_of']}/history"
        assert (await client.get(path)).status_code == 401
        other = await client.get(path, headers={"Authorization": "Bearer other-key"})
        assert other.status_code == 403
        mine = {"Authorization": "Bearer mine-key"}
        assert (await client.get(path, headers=mine)).status_code == 200
        missing = await client.get(f"/v1/realms/{realm}/relations/999999/history", headers=mine)
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "relation_not_found"
        bad = await client.get(f"/v1/realms/{realm}/relations/abc/history", headers=mine)
        assert bad.status_code == 422
