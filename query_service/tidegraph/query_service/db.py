"""Connections and the realm catalogue.

Every connection of the pool gets pgvector's types and the HNSW search settings in the
pool's ``configure=`` callback, so no request can run a similarity search without iterative
scans (pgvector 0.8: a filtered HNSW scan keeps walking the graph until enough rows pass
the filter, instead of returning fewer than asked) or with a generic plan.

SQL is typed :data:`Query` (``LiteralString | sql.Composed``) and realm schemas reach it only
through ``sql.Identifier``: user input never becomes SQL text.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, LiteralString

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.query_service.errors import RealmNotFound, Unavailable
from tidegraph.schemas.names import REALM_PATTERN
from tidegraph.schemas.realm_config import parse_embedder
from tidegraph.store.upgrades import NameKeyConflict, add_name_keys, has_name_keys

Query = LiteralString | sql.Composed
"""What may be executed: literal SQL, or SQL composed from identifiers and literals."""

_TRANSIENT_SQLSTATE_CLASSES = ("08", "40", "53", "57", "58")
_REALM_RE = re.compile(REALM_PATTERN)


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
) -> AsyncConnectionPool[AsyncConnection[Any]]:
    """An unopened pool of autocommit connections set up for vector search."""

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
        kwargs={"autocommit": True},
        timeout=open_timeout,
        name="tidegraph-query",
    )


def is_transient(exc: BaseException) -> bool:
    """Whether a database error means "unavailable now" rather than a bug."""
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        state = getattr(exc, "sqlstate", None)
        return state is None or state[:2] in _TRANSIENT_SQLSTATE_CLASSES
    if isinstance(exc, psycopg.Error):
        return (exc.sqlstate or "")[:2] in _TRANSIENT_SQLSTATE_CLASSES
    return False


def unavailable(exc: BaseException) -> Unavailable:
    """The 503 a transient database failure answers with."""
    return Unavailable(f"the database cannot serve this request now ({type(exc).__name__})")


@dataclass(frozen=True)
class RealmMeta:
    """What a query needs to know about a realm before touching its tables."""

    realm: str
    """Realm name."""
    schema: str
    """Its PostgreSQL schema."""
    embedder: str
    """Pinned embedder id (``hashing:<dim>`` / ``llm:<model>:<dim>``)."""
    dimension: int
    """Width of every embedding column."""


class RealmCatalog:
    """Looks realms up, caching found ones briefly; a realm of an earlier layout is
    upgraded when first looked up, so queries never meet a missing column.

    A realm's embedder never changes, but a rebuild can swap a realm's schema, so positive
    answers are kept only ``ttl`` seconds; negative answers are never cached (a realm may be
    created at any moment by its first document).
    """

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self._cache: dict[str, tuple[float, RealmMeta]] = {}

    def invalidate(self) -> None:
        self._cache.clear()

    async def get(self, conn: AsyncConnection[Any], realm: str) -> RealmMeta:
        """The realm's metadata; :class:`RealmNotFound` when absent or its name is invalid."""
        hit = self._cache.get(realm)
        now = time.monotonic()
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        meta = await self._load(conn, realm)
        self._cache[realm] = (now, meta)
        return meta

    async def _load(self, conn: AsyncConnection[Any], realm: str) -> RealmMeta:
        if not _valid_realm(realm):
            raise RealmNotFound(realm)
        try:
            cur = await conn.execute(
                "SELECT r.schema_name FROM tidegraph.realms r"
                " JOIN pg_namespace n ON n.nspname = r.schema_name"
                " WHERE r.realm = %s",
                (realm,),
            )
            row = await cur.fetchone()
        except psycopg.errors.UndefinedTable:
            raise RealmNotFound(realm) from None
        if row is None:
            raise RealmNotFound(realm)
        schema = str(row[0])
        try:
            cur = await conn.execute(
                sql.SQL("SELECT embedder, dimension FROM {}").format(table(schema, "meta"))
            )
            meta = await cur.fetchone()
        except psycopg.errors.UndefinedTable:
            raise RealmNotFound(realm) from None
        if meta is None:
            raise RealmNotFound(realm)
        if not await has_name_keys(conn, schema):
            try:
                await add_name_keys(conn, schema)
            except NameKeyConflict as exc:
                raise Unavailable(f"realm {realm!r} cannot be read: {exc}") from exc
        return RealmMeta(realm, schema, str(meta[0]), int(meta[1]))


async def list_realms(conn: AsyncConnection[Any]) -> list[tuple[str, str]]:
    """(realm, schema) of every registered realm; empty before the control schema exists."""
    try:
        cur = await conn.execute("SELECT realm, schema_name FROM tidegraph.realms ORDER BY realm")
    except psycopg.errors.UndefinedTable:
        return []
    return [(str(a), str(b)) for a, b in await cur.fetchall()]


async def realm_problems(conn: AsyncConnection[Any]) -> tuple[int, list[str]]:
    """(number of realms, why some cannot serve queries), in three statements whatever the
    number of realms: each needs a meta row whose embedder agrees with its dimension, and
    every embedding column at that dimension."""
    realms = await list_realms(conn)
    if not realms:
        return 0, []
    schemas = [s for _, s in realms]
    cur = await conn.execute(
        "SELECT n.nspname, c.relname, format_type(a.atttypid, a.atttypmod)"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped"
        " AND (a.attname = 'embedding' OR (c.relname = 'meta' AND a.attname = 'dimension'))",
        (schemas,),
    )
    types: dict[tuple[str, str], str] = {
        (str(n), str(t)): str(ty) for n, t, ty in await cur.fetchall()
    }
    with_meta = [s for s in schemas if (s, "meta") in types]
    metas: dict[str, tuple[str, int]] = {}
    if with_meta:
        union = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {}, embedder, dimension FROM {}").format(
                sql.Literal(s), table(s, "meta")
            )
            for s in with_meta
        )
        cur = await conn.execute(union)
        metas = {str(s): (str(e), int(d)) for s, e, d in await cur.fetchall()}
    problems = []
    for realm, schema in realms:
        problem = _realm_problem(realm, schema, metas.get(schema), types)
        if problem:
            problems.append(problem)
    return len(realms), problems


def _realm_problem(
    realm: str, schema: str, meta: tuple[str, int] | None, types: dict[tuple[str, str], str]
) -> str | None:
    if meta is None:
        return f"realm {realm!r}: schema {schema!r} has no meta row"
    embedder, dimension = meta
    try:
        spec = parse_embedder(embedder)
    except ValueError as exc:
        return f"realm {realm!r}: {exc}"
    if spec.dimension != dimension:
        return f"realm {realm!r}: embedder {embedder} disagrees with dimension {dimension}"
    want = f"vector({dimension})"
    for name in _VECTOR_TABLES:
        found = types.get((schema, name))
        if found != want:
            return f"realm {realm!r}: {schema}.{name}.embedding is {found}, want {want}"
    return None


_VECTOR_TABLES: Sequence[str] = ("chunks", "entities", "relations", "communities")


def _valid_realm(name: str) -> bool:
    return _REALM_RE.fullmatch(name) is not None
