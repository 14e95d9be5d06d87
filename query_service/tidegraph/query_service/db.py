"""Connections, and the realm catalogue as the query service caches it.

Every connection of the pool gets pgvector's types and the HNSW search settings in the
pool's ``configure=`` callback, so no request can run a similarity search without iterative
scans (pgvector 0.8: a filtered HNSW scan keeps walking the graph until enough rows pass
the filter, instead of returning fewer than asked) or with a generic plan.

SQL is typed :data:`Query` (``LiteralString | sql.Composed``) and realm schemas reach it only
through ``sql.Identifier``: user input never becomes SQL text.
"""

from __future__ import annotations

import time
from typing import Any, LiteralString

from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.query_service.errors import CopyNotFound, RealmNotFound, Unavailable
from tidegraph.query_service.gate import Gates
from tidegraph.schemas import MAIN, InvalidNameError, copy_schema
from tidegraph.store import (
    RealmInfo,
    RealmSchemaError,
    find_realm,
    open_realm,
    realm_exists,
    realm_server,
)

Query = LiteralString | sql.Composed
"""What may be executed: literal SQL, or SQL composed from identifiers and literals."""


def table(schema: str, name: LiteralString) -> sql.Composed:
    """``"schema"."name"`` with both parts quoted as identifiers."""
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))


def make_pool(
    conninfo: str,
    *,
    min_size: int = 2,
    max_size: int = 16,
    ef_search: int = 100,
    open_timeout: float = 10.0,
    reconnect_timeout: float = 1.0,
) -> AsyncConnectionPool[AsyncConnection[Any]]:
    """An unopened pool of autocommit connections set up for vector search.

    Recovery is quick by construction: every checkout checks the connection (one empty
    query) so connections the server dropped during an outage are replaced, not handed
    out; and a failed connection attempt is given up after ``reconnect_timeout`` instead of
    being retried with an exponential backoff that outlives the outage (the next request
    that needs a connection starts a fresh attempt).
    """

    async def configure(conn: AsyncConnection[Any]) -> None:
        await register_vector_async(conn)
        await conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(int(ef_search))))
        await conn.execute("SET hnsw.iterative_scan = relaxed_order")
        # Statements are prepared after a few runs; a generic plan cannot see the query
        # vector, the LIMIT or the array sizes, and may trade an index scan for a sort.
        await conn.execute("SET plan_cache_mode = force_custom_plan")

    return AsyncConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        open=False,
        configure=configure,
        check=AsyncConnectionPool.check_connection,
        kwargs={"autocommit": True, "connect_timeout": 2},
        timeout=open_timeout,
        reconnect_timeout=reconnect_timeout,
        name="tidegraph-query",
    )


def unavailable(exc: BaseException) -> Unavailable:
    """The 503 a transient database failure answers with."""
    return Unavailable(f"the database cannot serve this request now ({type(exc).__name__})")


class RealmCatalog:
    """Looks realms up where the catalogue places them, caching found ones briefly; a
    realm of an earlier layout is upgraded when first looked up, so queries never meet a
    missing column.

    A realm's embedder never changes, but a rebuild can swap a realm's schema and a move
    its server, so positive answers are kept only ``ttl`` seconds (the period within which
    readers follow a move); negative answers are never cached (a realm may be created at
    any moment by its first document).
    """

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self._cache: dict[tuple[str, str | None], tuple[float, RealmInfo]] = {}

    def invalidate(self, realm: str | None = None) -> None:
        """Forget every realm, or ``realm`` (and its copies)."""
        if realm is None:
            self._cache.clear()
        else:
            for key in [k for k in self._cache if k[0] == realm]:
                del self._cache[key]

    async def get(self, gates: Gates, realm: str, copy: str | None = None) -> RealmInfo:
        """The realm's metadata, or its copy ``copy``'s (``audit_1``: read as the realm
        stood then); :class:`RealmNotFound` / :class:`CopyNotFound` when absent or the
        name is invalid."""
        hit = self._cache.get((realm, copy))
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        main = await gates.of(MAIN)
        server = await main.run(lambda conn: realm_server(conn, realm))
        if server is None:
            raise RealmNotFound(realm)
        gate = await gates.of(server)
        meta = await gate.run(lambda conn: self._load(conn, realm, server))
        if copy is not None:
            meta = await self._copy(gates, realm, copy, server)
        self._cache[(realm, copy)] = (now, meta)
        return meta

    async def _copy(self, gates: Gates, realm: str, copy: str, server: str) -> RealmInfo:
        """A copy lives where the realm was when it was made: its server first, then the
        others."""
        try:
            schema = copy_schema(realm, copy)
        except InvalidNameError:
            raise CopyNotFound(realm, copy) from None
        names = gates.cluster.servers.names
        for name in (server, *(n for n in names if n != server)):
            gate = await gates.of(name)

            async def load(conn: AsyncConnection[Any], on: str = name) -> RealmInfo | None:
                return await self._load_copy(conn, realm, schema, on)

            found = await gate.run(load)
            if found is not None:
                return found
        raise CopyNotFound(realm, copy)

    async def _load_copy(
        self, conn: AsyncConnection[Any], realm: str, schema: str, server: str
    ) -> RealmInfo | None:
        if not await realm_exists(conn, schema):
            return None
        try:
            return await open_realm(conn, realm, schema=schema, server=server)
        except RealmSchemaError as exc:
            raise Unavailable(f"copy {schema!r} of realm {realm!r} cannot be read: {exc}") from exc

    async def _load(self, conn: AsyncConnection[Any], realm: str, server: str) -> RealmInfo:
        try:
            info = await find_realm(conn, realm, server)
        except RealmSchemaError as exc:
            raise Unavailable(f"realm {realm!r} cannot be read: {exc}") from exc
        if info is None:
            raise RealmNotFound(realm)
        return info
