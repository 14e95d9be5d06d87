"""The servers a command works on, and the connection to the one holding a realm.

``main`` is the server ``--pg-dsn`` / ``TIDEGRAPH_PG_DSN`` names; the others come from
``TIDEGRAPH_PG_SERVERS`` (or its file), as every process of a deployment reads them
(:mod:`tidegraph.schemas.servers`). A one-shot command opens small pools, finds a realm
through the catalogue, and fails with one line when a server it needs does not answer.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tidegraph.infra.reach import CONNECT_TIMEOUT, check_pg
from tidegraph.schemas import MAIN, Servers, load_servers
from tidegraph.store import Cluster, RealmInfo, RealmSchemaError, find_placed, realm_server


def servers_for(main_dsn: str) -> Servers:
    """``main`` at ``main_dsn`` and the servers this process's environment names."""
    return load_servers(main_dsn, os.environ)


def small_pool(_: str, dsn: str, connections: int = 2) -> AsyncConnectionPool[AsyncConnection[Any]]:
    """A command's pool to one server: a few connections, a bounded wait."""
    return AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=connections,
        open=False,
        timeout=CONNECT_TIMEOUT + 1,
        kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT},
    )


@asynccontextmanager
async def command_cluster(main_dsn: str, connections: int = 2) -> AsyncIterator[Cluster]:
    """Every server, ``main`` checked first (one line when it does not answer), with up
    to ``connections`` connections each."""
    servers = servers_for(main_dsn)
    await check_pg(main_dsn)
    cluster = Cluster(servers, lambda name, dsn: small_pool(name, dsn, connections))
    try:
        await cluster.open()
        yield cluster
    finally:
        await cluster.close()


async def realm_dsn(main_dsn: str, realm: str) -> str:
    """The DSN of the server holding ``realm`` (``main``'s for a realm not created yet):
    for commands that work on one realm with a connection of their own."""
    servers = servers_for(main_dsn)
    if len(servers) == 1:
        return main_dsn
    async with command_cluster(main_dsn) as cluster, cluster.connection() as main:
        server = await realm_server(main, realm)
    return servers.dsn(server or MAIN)


@asynccontextmanager
async def on_realm(
    cluster: Cluster, realm: str
) -> AsyncIterator[tuple[AsyncConnection[Any], RealmInfo]]:
    """A connection to the server holding ``realm``, and the realm opened there."""
    info = await find_placed(cluster, realm)
    if info is None:
        raise RealmSchemaError(f"realm {realm!r} does not exist — `tidegraph realm list`")
    async with cluster.connection(info.server) as conn:
        yield conn, info
