"""Where a realm is created and found: the catalogue's server for it, or a server chosen
when it is new.

A realm is created on the server its creator names, else on the one holding the fewest
realms (:func:`~tidegraph.store.realms.fewest_realms`). Creation is serialised per realm by
an advisory lock on ``main``, so two processes meeting a new realm at once agree on one
server. The schema is created before its catalogue row: a creation interrupted between the
two left a schema no catalogue names, which the next creation finds and finishes on that
server instead of creating a second copy elsewhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import PoolTimeout

from tidegraph.schemas import MAIN, ConfigError, RealmConfig, realm_schema, validate_realm
from tidegraph.store.cluster import Cluster
from tidegraph.store.realms import (
    RealmInfo,
    create_realm,
    fewest_realms,
    find_realm,
    realm_exists,
    realm_server,
)


class PlacedElsewhere(ConfigError):
    """A realm asked for on one server already lives on another."""

    def __init__(self, realm: str, server: str, asked: str) -> None:
        super().__init__(
            f"realm {realm!r} lives on server {server!r}, not {asked!r}"
            f" (move it with `tidegraph realm move {realm} --to {asked}`)"
        )


async def find_placed(cluster: Cluster, realm: str) -> RealmInfo | None:
    """The realm where the catalogue places it, opened; ``None`` when it does not exist."""
    async with cluster.connection(MAIN) as main:
        server = await realm_server(main, realm)
    if server is None:
        return None
    async with cluster.connection(server) as conn:
        return await find_realm(conn, realm, server)


async def place_realm(
    cluster: Cluster, realm: str, config: RealmConfig, server: str | None = None
) -> tuple[RealmInfo, bool]:
    """The realm opened where it lives, or created (on ``server`` when given); True when
    this call created it."""
    validate_realm(realm)
    if server is not None:
        cluster.servers.dsn(server)  # an unknown name fails here, before anything is written
    found = await find_placed(cluster, realm)
    if found is not None:
        if server is not None and found.server != server:
            raise PlacedElsewhere(realm, found.server, server)
        return found, False
    async with cluster.connection(MAIN) as main:
        lock = f"tidegraph:place:{realm}"
        await main.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock,))
        try:
            placed = await realm_server(main, realm)
            target = placed or server or await _orphaned(cluster, main, realm)
            target = target or await fewest_realms(main, cluster.servers.names)
            if server is not None and target != server:
                raise PlacedElsewhere(realm, target, server)
            async with _on(cluster, target, main) as conn:
                info = await find_realm(conn, realm, target)
                if info is not None and placed is not None:
                    return info, False
                catalogue = None if target == MAIN else main
                info = await create_realm(conn, realm, config, server=target, catalogue=catalogue)
                return info, True
        finally:
            await main.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock,))


@asynccontextmanager
async def _on(
    cluster: Cluster, server: str, main: AsyncConnection[Any], wait: float | None = None
) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection to ``server`` while ``main``'s is held: that one itself for ``main``.
    A second connection from the same pool would deadlock it: as many realms created at
    once as the pool has connections would each hold one and wait for another."""
    if server == MAIN:
        yield main
        return
    async with cluster.connection(server, wait=wait) as conn:
        yield conn


async def _orphaned(cluster: Cluster, main: AsyncConnection[Any], realm: str) -> str | None:
    """A server holding the realm's schema without a catalogue row (an interrupted
    creation), among those that answer."""
    schema = realm_schema(realm)
    for name in cluster.servers.names:
        try:
            async with _on(cluster, name, main, wait=2) as conn:
                if await realm_exists(conn, schema):
                    return name
        except (psycopg.OperationalError, PoolTimeout):
            continue
    return None
