"""Connections to every server realms live on, and where each realm is.

A process is given the servers by name (:class:`~tidegraph.schemas.servers.Servers`) and
keeps a pool per server, opened when first used: a server that does not answer fails only
the work that needs it, never the process's start (``main`` excepted: the catalogue lives
there). Which server holds a realm is the catalogue's answer
(:func:`~tidegraph.store.realms.realm_server`); callers cache it as they cache the realm's
configuration, and read it again after any failure. A server's streaming standbys get pools
of their own (keyed ``server/standby``), for reads only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from tidegraph.schemas import MAIN, Servers, UnknownServer
from tidegraph.store.errors import ServerUnavailable, is_transient
from tidegraph.store.realms import ensure_control

PoolFactory = Callable[[str, str], AsyncConnectionPool[AsyncConnection[Any]]]
"""``(server name, DSN)`` → an unopened pool."""


class Cluster:
    """A pool per server, ``main``'s opened first (see the module docstring)."""

    def __init__(
        self,
        servers: Servers,
        make_pool: PoolFactory,
        main_pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None,
    ) -> None:
        self.servers = servers
        self._make_pool = make_pool
        self._pools: dict[str, AsyncConnectionPool[AsyncConnection[Any]]] = {}
        self._opened: set[str] = set()
        self._controlled: set[str] = set()
        if main_pool is not None:
            self._pools[MAIN] = main_pool

    @property
    def main(self) -> AsyncConnectionPool[AsyncConnection[Any]]:
        return self.pool(MAIN)

    @property
    def several(self) -> bool:
        """More than one server: realms may live elsewhere than ``main``."""
        return len(self.servers) > 1

    def pool(self, server: str) -> AsyncConnectionPool[AsyncConnection[Any]]:
        """The server's pool (created, not opened, on first use)."""
        pool = self._pools.get(server)
        if pool is None:
            pool = self._make_pool(server, self.servers.dsn(server))
            self._pools[server] = pool
        return pool

    def standbys(self, server: str) -> tuple[str, ...]:
        """The names of ``server``'s streaming standbys (none unless named)."""
        return tuple(s.name for s in self.servers.standbys(server))

    def standby_pool(self, server: str, name: str) -> AsyncConnectionPool[AsyncConnection[Any]]:
        """The pool of ``server``'s standby ``name`` (created, not opened, on first use):
        read-only, so nothing here makes sure of a control schema on it."""
        for standby in self.servers.standbys(server):
            if standby.name == name:
                pool = self._pools.get(standby.label)
                if pool is None:
                    pool = self._make_pool(standby.label, standby.dsn)
                    self._pools[standby.label] = pool
                return pool
        raise UnknownServer(
            f"{server}/{name}", tuple(s.label for s in self.servers.standbys(server))
        )

    async def open(self, wait: float = 30.0) -> None:
        """Open ``main``'s pool and make sure its control schema is there."""
        await self.main.open(wait=True, timeout=wait)
        self._opened.add(MAIN)
        async with self.main.connection() as conn:
            await ensure_control(conn)
        self._controlled.add(MAIN)

    @asynccontextmanager
    async def connection(
        self, server: str = MAIN, wait: float | None = None
    ) -> AsyncIterator[AsyncConnection[Any]]:
        """A connection to ``server`` (its control schema made sure of on first use). Not
        reaching a server other than ``main``, or losing it, raises
        :class:`ServerUnavailable` naming it: its realms wait while others go on. ``main``'s
        failures pass as they are (nothing goes on without the catalogue)."""
        pool = self.pool(server)
        if server not in self._opened:
            await pool.open(wait=False)
            self._opened.add(server)
        try:
            async with pool.connection(timeout=wait) as conn:
                if server not in self._controlled:
                    await ensure_control(conn)
                    self._controlled.add(server)
                yield conn
        except PoolTimeout as exc:
            if server == MAIN:
                raise
            raise ServerUnavailable(server, exc) from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if server == MAIN or not is_transient(exc):
                raise
            raise ServerUnavailable(server, exc) from exc

    async def close(self) -> None:
        for pool in self._pools.values():
            await pool.close()
        self._opened.clear()
        self._controlled.clear()
