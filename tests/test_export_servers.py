"""Graph export of a realm that lives on another server than ``main``: the download and
``tidegraph export`` read it where the catalogue places it, and ``--as-believed-at`` takes
a year as the API's ``as_believed_at`` does (the end of that year in UTC)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import httpx
import psycopg
import pytest
from pg_servers import ExtraServer, extra_server, opened_cluster
from psycopg import sql

from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.cluster import Cluster
from tidegraph.store.placement import place_realm

from graph_helpers import GraphHarness, ent, rel
from local_services import env_without_settings, run_cli
from query_helpers import embedders

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def server_b() -> Iterator[ExtraServer]:
    with extra_server("export_b") as server:
        yield server


@pytest.fixture
async def placed(own_database: str, server_b: ExtraServer) -> AsyncIterator[tuple[Cluster, str]]:
    """A realm on server ``b``, written in 2024 (an alliance) and 2025 (an enmity that
    supersedes it)."""
    realm = "exb" + uuid.uuid4().hex[:10]
    config = RealmConfig(embedder="hashing:8", exclusive_groups=[["ally_of", "enemy_of"]])
    async with opened_cluster(own_database, {"b": server_b.dsn}) as cluster:
        await place_realm(cluster, realm, config, "b")
        async with await psycopg.AsyncConnection.connect(server_b.dsn, autocommit=True) as conn:
            g = await GraphHarness.create(conn, realm, config)
            people = [ent("Ada Lovelace"), ent("Ben Arlo")]
            await g.upsert(
                "a", [(people, [rel("Ada Lovelace", "ally_of", "Ben Arlo")])],
                order_key="1", at=datetime(2024, 3, 1, tzinfo=UTC),
            )  # fmt: skip
            await g.upsert(
                "b", [(people, [rel("Ada Lovelace", "enemy_of", "Ben Arlo")])],
                order_key="2", at=datetime(2025, 6, 1, tzinfo=UTC),
            )  # fmt: skip
        yield cluster, realm


def _predicates(jsonl: str) -> list[tuple[str, str]]:
    lines = [json.loads(line) for line in jsonl.splitlines()]
    return sorted((x["predicate"], x["status"]) for x in lines if x["kind"] == "relation")


async def test_the_download_and_the_command_read_the_realms_own_server(
    own_database: str, server_b: ExtraServer, placed: tuple[Cluster, str]
) -> None:
    cluster, realm = placed
    app = create_app(
        QuerySettings(), Deps(pool=cluster.main, embedders=embedders(None), cluster=cluster)
    )
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://tidegraph.test") as c:
            answers: dict[str | None, list[tuple[str, str]]] = {}
            for at in (None, "2024"):
                params = {"format": "jsonl", "include_superseded": "true"}
                listing = {"include_superseded": "true"}
                if at is not None:
                    params["as_believed_at"] = listing["as_believed_at"] = at
                r = await c.get(f"/v1/realms/{realm}/export", params=params)
                assert r.status_code == 200, r.text
                answers[at] = _predicates(r.text)
                listed = await c.get(f"/v1/realms/{realm}/relations", params=listing)
                assert listed.status_code == 200, listed.text
                want = sorted((x["predicate"], x["status"]) for x in listed.json()["relations"])
                assert answers[at] == want
    finally:
        await app.state.database_gates.aclose()
        await app.state.database_gate.aclose()
    assert answers[None] == [("ally_of", "superseded"), ("enemy_of", "current")]
    assert answers["2024"] == [("ally_of", "current")]  # the end of 2024: before the enmity

    env = env_without_settings(
        TIDEGRAPH_PG_DSN=own_database, TIDEGRAPH_PG_SERVERS=f"b={server_b.dsn}"
    )
    for at in (None, "2024"):
        args = ["export", realm, "--format", "jsonl", "--include-superseded"]
        done = run_cli([*args, "--as-believed-at", at] if at else args, env)
        assert done.returncode == 0, done.stderr
        assert _predicates(done.stdout) == answers[at]
    refused = run_cli(["export", realm, "--as-believed-at", "2024-13"], env)
    assert refused.returncode != 0 and "--as-believed-at" in refused.stderr


async def test_a_realm_that_left_its_server_under_the_cache_is_looked_up_again(
    own_database: str, server_b: ExtraServer, placed: tuple[Cluster, str]
) -> None:
    """The service's cached answer says ``b``; the realm now lives on ``main`` (written
    there again, the catalogue pointed at it, ``b``'s schema dropped): the download is
    the graph on ``main``, whole, not a body cut short by a missing table."""
    cluster, realm = placed
    app = create_app(
        QuerySettings(realm_cache_seconds=3600),
        Deps(pool=cluster.main, embedders=embedders(None), cluster=cluster),
    )
    transport = httpx.ASGITransport(app=app)
    url = f"/v1/realms/{realm}/export"
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://tidegraph.test") as c:
            before = await c.get(url, params={"format": "jsonl"})
            assert before.status_code == 200 and _predicates(before.text) == [
                ("enemy_of", "current")
            ]
            async with await psycopg.AsyncConnection.connect(own_database, autocommit=True) as conn:
                g = await GraphHarness.create(conn, realm, RealmConfig(embedder="hashing:8"))
                people = [ent("Ada Lovelace"), ent("Ben Arlo")]
                await g.upsert("c", [(people, [rel("Ada Lovelace", "worked_with", "Ben Arlo")])])
                await conn.execute(
                    "UPDATE tidegraph.realms SET server = 'main' WHERE realm = %s", (realm,)
                )
            async with await psycopg.AsyncConnection.connect(server_b.dsn, autocommit=True) as b:
                await b.execute(
                    sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(f"realm_{realm}"))
                )
            for fmt in ("jsonl", "graphml"):
                after = await c.get(url, params={"format": fmt})
                assert after.status_code == 200, after.text
            assert _predicates((await c.get(url, params={"format": "jsonl"})).text) == [
                ("worked_with", "current")
            ]
    finally:
        await app.state.database_gates.aclose()
        await app.state.database_gate.aclose()
