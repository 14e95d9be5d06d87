"""Realms on two PostgreSQL servers, indexed by one consumer group (real Kafka, two real
servers: the session's, as ``main``, and one started for this module)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest
from pg_servers import ExtraServer, extra_server, opened_cluster
from psycopg import sql

from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.schemas.servers import MAIN
from tidegraph.store.cluster import Cluster
from tidegraph.store.placement import place_realm
from tidegraph.store.realms import placements, realm_exists

from indexer_helpers import make_topics, outbox, publish, running_indexer, upsert, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def server_b() -> Iterator[ExtraServer]:
    with extra_server("server_b") as server:
        yield server


@pytest.fixture
async def cluster(own_database: str, server_b: ExtraServer) -> AsyncIterator[Cluster]:
    """``main`` is a database of this test's own (an empty catalogue), ``b`` the module's
    second server."""

    async with opened_cluster(own_database, {"b": server_b.dsn}) as c:
        yield c


async def _documents(dsn: str, realm: str) -> dict[str, str]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        if not await realm_exists(conn, f"realm_{realm}"):
            return {}
        cur = await conn.execute(
            sql.SQL("SELECT doc_key, status FROM {}").format(
                sql.Identifier(f"realm_{realm}", "documents")
            )
        )
        return {str(k): str(s) for k, s in await cur.fetchall()}


def _docs(realm: str, prefix: str, n: int) -> list[Any]:
    return [
        upsert(realm, f"{prefix}{i}.md", f"Ada Lovelace worked with Person{i} {prefix.title()}.")
        for i in range(n)
    ]


async def test_realms_on_two_servers_are_indexed_by_one_group(
    kafka_bootstrap: str,
    cluster: Cluster,
    server_b: ExtraServer,
    unique_name: Callable[[str], str],
) -> None:
    main_dsn = cluster.servers.main_dsn
    on_main, on_b, placed = unique_name("m"), unique_name("b"), unique_name("p")
    await place_realm(cluster, on_main, RealmConfig(), MAIN)
    await place_realm(cluster, on_b, RealmConfig(), "b")
    await place_realm(cluster, unique_name("m2"), RealmConfig(), MAIN)
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=2)
    group = unique_name("g")
    records = [*_docs(on_main, "a", 6), *_docs(on_b, "b", 6), *_docs(placed, "c", 6)]
    async with running_indexer(topics, main_dsn, group, servers=cluster.servers):
        await publish(topics, records)

        async def all_applied() -> bool:
            got = [
                await _documents(main_dsn, on_main),
                await _documents(server_b.dsn, on_b),
                await _documents(server_b.dsn, placed),
            ]
            return all(len(d) == 6 for d in got)

        await wait_for(all_applied, 90, "every realm's documents on its server")
    async with cluster.connection() as main:
        where = {p.realm: p.server for p in await placements(main)}
    # The realm first seen in a record went where the fewest realms were.
    assert where[on_main] == MAIN and where[on_b] == "b" and where[placed] == "b"
    assert await _documents(main_dsn, on_b) == {} and await _documents(main_dsn, placed) == {}
    for realm in (on_b, placed):
        assert set((await _documents(server_b.dsn, realm)).values()) == {"indexed"}
        assert sorted({s for s, _, _ in await outbox(server_b.dsn, realm)}) == list(range(1, 7))


async def test_a_stopped_server_holds_only_its_realms_and_loses_nothing(
    kafka_bootstrap: str,
    cluster: Cluster,
    server_b: ExtraServer,
    unique_name: Callable[[str], str],
) -> None:
    main_dsn = cluster.servers.main_dsn
    on_main, on_b = unique_name("m"), unique_name("b")
    await place_realm(cluster, on_main, RealmConfig(), MAIN)
    await place_realm(cluster, on_b, RealmConfig(), "b")
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    group = unique_name("g")
    kw = {"servers": cluster.servers, "backoff_initial": 0.2, "backoff_max": 1.0}
    async with running_indexer(topics, main_dsn, group, **kw):
        await publish(topics, [*_docs(on_main, "a", 4), *_docs(on_b, "b", 4)])

        async def first_applied() -> bool:
            return (
                len(await _documents(main_dsn, on_main)) == 4
                and len(await _documents(server_b.dsn, on_b)) == 4
            )

        await wait_for(first_applied, 90, "the first records on both servers")
        server_b.stop()
        # One partition: b's records come first, main's behind them.
        await publish(topics, [*_docs(on_b, "d", 4), *_docs(on_main, "e", 4)])

        async def main_went_on() -> bool:
            return len(await _documents(main_dsn, on_main)) == 8

        await wait_for(main_went_on, 90, "main's realm going on while b is down")
        async with await psycopg.AsyncConnection.connect(main_dsn, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT realm, kind, error FROM tidegraph.indexer_holds WHERE group_id = %s",
                (group,),
            )
            holds = await cur.fetchall()
        assert [(r, k) for r, k, _ in holds] == [(on_b, "paused")], holds
        assert "server 'b' does not answer" in holds[0][2]
        await asyncio.sleep(1)
        assert len(await _documents(main_dsn, on_main)) == 8
        server_b.start()

        async def b_caught_up() -> bool:
            try:
                return len(await _documents(server_b.dsn, on_b)) == 8
            except psycopg.OperationalError:
                return False

        await wait_for(b_caught_up, 90, "b's realm catching up once b answers again")

        async def hold_gone() -> bool:
            async with await psycopg.AsyncConnection.connect(main_dsn, autocommit=True) as c:
                cur = await c.execute(
                    "SELECT count(*) FROM tidegraph.indexer_holds WHERE group_id = %s", (group,)
                )
                row = await cur.fetchone()
                return row is not None and row[0] == 0

        await wait_for(hold_gone, 30, "the hold to be cleared")
    for dsn, realm in ((main_dsn, on_main), (server_b.dsn, on_b)):
        assert set((await _documents(dsn, realm)).values()) == {"indexed"}
        # Each record applied exactly once: one commit each, no gap, no repeat.
        assert sorted({s for s, _, _ in await outbox(dsn, realm)}) == list(range(1, 9))
