"""The realm catalogue: realm schemas created on first use, found, listed and verified on
every open (paper §3.5, DESIGN invariant 10). Every package asks these questions here.

The catalogue (``tidegraph.realms``) lives on the ``main`` server and says which server
holds each realm's schema (:mod:`tidegraph.schemas.servers`); the functions that read or
write a realm's own tables take a connection to that server.
"""

# Long on purpose: the catalogue's whole life cycle (create, register, find, open and verify,
# drop); every package asks these questions here.
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from tidegraph.schemas import (
    MAIN,
    RealmConfig,
    is_realm,
    parse_embedder,
    realm_schema,
    validate_realm,
)
from tidegraph.store import realm_positions
from tidegraph.store.ddl import (
    EMBEDDING_COLUMNS,
    control_ddl,
    realm_ddl,
    search_index_ddl,
)
from tidegraph.store.errors import EmbedderMismatch, RealmBusy, RealmSchemaError
from tidegraph.store.locks import lock_realm_schema, replay_lock_key
from tidegraph.store.positions import replay_group
from tidegraph.store.upgrades import (
    NameKeyConflict,
    add_archival,
    add_attribute_indexes,
    add_belief_history,
    add_catalogue_server,
    add_contradiction_answers,
    add_entity_belief,
    add_name_keys,
    add_name_search,
    add_positions_ahead,
    add_realm_positions,
    add_superseded_via,
    add_telemetry,
    has_attribute_indexes,
    has_name_search,
    has_telemetry,
)


@dataclass(frozen=True)
class RealmInfo:
    """A realm's pinned configuration as stored in its ``meta`` row."""

    realm: str
    """Realm name."""
    schema: str
    """PostgreSQL schema holding it (``realm_<name>`` or a replay shadow)."""
    embedder: str
    """``hashing:<dim>`` or ``llm:<model>:<dim>``."""
    dimension: int
    """Width of every embedding column."""
    extractor: str
    """Extractor id the realm was created with."""
    config: RealmConfig = field(default_factory=RealmConfig)
    """Vocabulary, predicate aliases, exclusive groups (CONTRACT "Realm configuration")."""
    server: str = MAIN
    """The server holding the schema (the catalogue's word for it when it was opened)."""

    @property
    def exclusive_groups(self) -> tuple[frozenset[str], ...]:
        return self.config.exclusive_groups


_DIM = re.compile(r"^vector\((\d+)\)$")


async def ensure_control(conn: AsyncConnection[Any]) -> None:
    """Create the vector extension and the control schema if missing."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('tidegraph:control'))")
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        await conn.execute(control_ddl())
        await add_positions_ahead(conn)
        await add_catalogue_server(conn)


async def create_realm(
    conn: AsyncConnection[Any],
    realm: str,
    config: RealmConfig,
    *,
    schema: str | None = None,
    search_indexes: bool = True,
    server: str = MAIN,
    catalogue: AsyncConnection[Any] | None = None,
) -> RealmInfo:
    """Create a realm (or a shadow schema for one) if absent on ``conn``'s server, named
    ``server``; return what is pinned. The catalogue row goes in the same transaction when
    the catalogue is on that server (``catalogue`` not given), else on ``catalogue`` once
    the schema is there (a schema without its row is a realm not created yet: creating it
    again finishes the job)."""
    validate_realm(realm)
    schema = schema or realm_schema(realm)
    dimension = config.embedder_spec.dimension
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        await conn.execute(realm_ddl(schema, dimension))
        if search_indexes:
            await conn.execute(search_index_ddl(schema, dimension))
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.meta (realm, embedder, dimension, extractor, config)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
            ).format(sql.Identifier(schema)),
            (
                realm,
                config.embedder,
                dimension,
                config.extractor,
                Jsonb(orjson.loads(config.to_json())),
            ),
        )
        if schema == realm_schema(realm) and catalogue is None:
            await register(conn, realm, schema, server)
    if schema == realm_schema(realm) and catalogue is not None:
        await register(catalogue, realm, schema, server)
    return await open_realm(conn, realm, schema=schema, server=server)


async def register(conn: AsyncConnection[Any], realm: str, schema: str, server: str) -> None:
    """Record in the catalogue that ``server`` holds ``realm`` (kept when already there)."""
    await conn.execute(
        "INSERT INTO tidegraph.realms (realm, schema_name, server) VALUES (%s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        (realm, schema, server),
    )


async def realm_exists(conn: AsyncConnection[Any], schema: str) -> bool:
    """Whether ``schema`` holds a realm (its ``meta`` table): a live realm, a shadow, an
    audit copy or a retired one."""
    cur = await conn.execute(
        "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = 'meta' AND c.relkind = 'r'",
        (schema,),
    )
    return await cur.fetchone() is not None


async def control_exists(conn: AsyncConnection[Any]) -> bool:
    """Whether the control schema is there: a server no tidegraph process has written to yet
    (a fresh `up`) has no catalogue, no positions and no holds to read."""
    cur = await conn.execute("SELECT to_regclass('tidegraph.realms') IS NOT NULL")
    row = await cur.fetchone()
    return bool(row and row[0])


@dataclass(frozen=True)
class Placement:
    """A catalogue row: where a realm lives."""

    realm: str
    schema: str
    server: str


async def placements(conn: AsyncConnection[Any], server: str | None = None) -> list[Placement]:
    """Every registered realm (on ``server`` only, when given), by name; empty before the
    control schema exists. ``conn`` is the catalogue's (``main``)."""
    if not await control_exists(conn):
        return []
    cur = await conn.execute(
        "SELECT realm, schema_name, server FROM tidegraph.realms"
        " WHERE %(server)s::text IS NULL OR server = %(server)s ORDER BY realm",
        {"server": server},
    )
    return [Placement(str(a), str(b), str(c)) for a, b, c in await cur.fetchall()]


async def list_realms(conn: AsyncConnection[Any], server: str = MAIN) -> list[tuple[str, str]]:
    """(realm, schema) of every realm the catalogue places on ``server``, by name."""
    return [(p.realm, p.schema) for p in await placements(conn, server)]


async def realm_server(conn: AsyncConnection[Any], realm: str) -> str | None:
    """The server the catalogue (on ``conn``) places ``realm`` on; ``None`` when it has no
    row (not created yet)."""
    cur = await conn.execute("SELECT to_regclass('tidegraph.realms') IS NOT NULL")
    row = await cur.fetchone()
    if not row or not row[0]:
        return None
    cur = await conn.execute("SELECT server FROM tidegraph.realms WHERE realm = %s", (realm,))
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def fewest_realms(conn: AsyncConnection[Any], servers: tuple[str, ...]) -> str:
    """The server among ``servers`` holding the fewest realms (the first named, on a tie):
    where a realm goes when its creator names none. Realms, not documents: the catalogue
    counts them in one statement on ``main``, while documents would mean asking every
    server, and a realm's size is not known when it is placed."""
    cur = await conn.execute(
        "SELECT server, count(*) FROM tidegraph.realms WHERE server = ANY(%s) GROUP BY server",
        (list(servers),),
    )
    held = {str(s): int(n) for s, n in await cur.fetchall()}
    return min(servers, key=lambda s: (held.get(s, 0), servers.index(s)))


async def realm_copies(conn: AsyncConnection[Any], realm: str) -> list[str]:
    """Schemas holding a copy of ``realm`` — shadows, audit copies, retired schemas
    (``realm_<realm>__<kind>_<label>``) — by name."""
    cur = await conn.execute(
        "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s) ORDER BY nspname",
        (realm_schema(validate_realm(realm)) + "__",),
    )
    return [str(n) for (n,) in await cur.fetchall()]


@dataclass(frozen=True)
class DroppedRealm:
    """What :func:`drop_realm` removed."""

    realm: str
    schema: str
    head_seq: int
    """The last commit sequence the realm's change feed had."""
    copies: tuple[str, ...]
    """Shadow, audit and retired schemas of the realm, left in place."""


async def drop_realm(
    conn: AsyncConnection[Any],
    realm: str,
    ends: Mapping[tuple[str, int], int] | None = None,
    catalogue: AsyncConnection[Any] | None = None,
) -> DroppedRealm | None:
    """Delete a realm in one transaction: its schema (its own position with it), its
    catalogue row, its publisher position, the indexer's holds on it and its replays'
    claims. ``None`` when there is no such realm; :class:`RealmBusy` while a replay of it
    runs.

    The realm's key keeps a position in the control schema, raised to its own and to
    ``ends`` ((topic, partition) → the log's end now): every record published before the
    deletion stays settled for every reader, and later records create the realm again
    from there (:func:`~tidegraph.store.realm_positions.bury`). Kept too: the realm's
    copies (``replay --drop`` removes them one by one). Run inside a caller's transaction,
    nothing is gone before it commits.

    ``conn`` is the realm's server; ``catalogue`` the ``main`` server when that is another
    one. Then three steps follow one another, each safe to repeat: the key's position is
    raised on ``main``, the schema dropped on its server (in the caller's transaction, when
    there is one), and — by the caller, once that committed — the catalogue row deleted
    (:func:`unregister`). A deletion interrupted between them is finished by running it
    again; meanwhile the realm reads as not existing (a row without its schema).
    """
    validate_realm(realm)
    if catalogue is not None:
        return await _drop_elsewhere(conn, catalogue, realm, ends or {})
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT schema_name FROM tidegraph.realms WHERE realm = %s FOR UPDATE", (realm,)
        )
        row = await cur.fetchone()
        if row is None:
            return None
        schema = str(row[0])
        cur = await conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtext(%s))", (replay_lock_key(realm),)
        )
        locked = await cur.fetchone()
        if locked is None or not locked[0]:
            raise RealmBusy(realm)
        await lock_realm_schema(conn, schema)
        cur = await conn.execute(sql.SQL("SELECT seq FROM {}.meta").format(sql.Identifier(schema)))
        meta = await cur.fetchone()
        copies = tuple(c for c in await realm_copies(conn, realm) if c != schema)
        await realm_positions.bury(conn, realm, schema, ends or {})
        await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
        await conn.execute("DELETE FROM tidegraph.realms WHERE realm = %s", (realm,))
        await conn.execute("DELETE FROM tidegraph.publisher_positions WHERE realm = %s", (realm,))
        await conn.execute("DELETE FROM tidegraph.indexer_holds WHERE realm = %s", (realm,))
        await conn.execute(
            "DELETE FROM tidegraph.consumer_positions WHERE group_id = %s",
            (replay_group(schema),),
        )
    return DroppedRealm(realm, schema, int(meta[0]) if meta else 0, copies)


async def _drop_elsewhere(
    conn: AsyncConnection[Any],
    catalogue: AsyncConnection[Any],
    realm: str,
    ends: Mapping[tuple[str, int], int],
) -> DroppedRealm | None:
    """:func:`drop_realm` for a realm on another server than the catalogue."""
    cur = await catalogue.execute(
        "SELECT schema_name FROM tidegraph.realms WHERE realm = %s", (realm,)
    )
    row = await cur.fetchone()
    if row is None:
        return None
    schema = str(row[0])
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtext(%s))", (replay_lock_key(realm),)
        )
        locked = await cur.fetchone()
        if locked is None or not locked[0]:
            raise RealmBusy(realm)
        await lock_realm_schema(conn, schema)
        head = 0
        if await realm_exists(conn, schema):
            cur = await conn.execute(
                sql.SQL("SELECT seq FROM {}.meta").format(sql.Identifier(schema))
            )
            meta = await cur.fetchone()
            head = int(meta[0]) if meta else 0
            await realm_positions.bury(conn, realm, schema, ends, keys=catalogue)
        copies = tuple(c for c in await realm_copies(conn, realm) if c != schema)
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )
        await conn.execute(
            "DELETE FROM tidegraph.consumer_positions WHERE group_id = %s",
            (replay_group(schema),),
        )
    return DroppedRealm(realm, schema, head, copies)


async def unregister(catalogue: AsyncConnection[Any], realm: str) -> None:
    """The last step of deleting a realm on another server than ``main``
    (:func:`drop_realm`): its catalogue row and the indexer's holds on it."""
    async with catalogue.transaction():
        await catalogue.execute("DELETE FROM tidegraph.realms WHERE realm = %s", (realm,))
        await catalogue.execute("DELETE FROM tidegraph.indexer_holds WHERE realm = %s", (realm,))


async def find_realm(
    conn: AsyncConnection[Any], realm: str, server: str = MAIN
) -> RealmInfo | None:
    """A registered realm, opened (and upgraded if need be); ``None`` when there is none
    (an invalid name included).

    A live realm missing the name-lookup indexes or the telemetry table gets them here
    rather than in :func:`open_realm`, which also opens shadow schemas a bulk load fills
    before it builds its search indexes."""
    if not is_realm(realm):
        return None
    schema = realm_schema(realm)
    if not await realm_exists(conn, schema):
        return None
    info = await open_realm(conn, realm, server=server)
    if not await has_name_search(conn, schema):
        await add_name_search(conn, schema)
    if not await has_telemetry(conn, schema):
        await add_telemetry(conn, schema)
    return info


async def open_realm(
    conn: AsyncConnection[Any], realm: str, *, schema: str | None = None, server: str = MAIN
) -> RealmInfo:
    """Load a realm's pinned configuration and verify every embedding column's width."""
    schema = schema or realm_schema(realm)
    if not await realm_exists(conn, schema):
        raise RealmSchemaError(f"realm {realm!r} does not exist (no schema {schema!r})")
    cur = await conn.execute(
        sql.SQL("SELECT embedder, dimension, extractor, config FROM {}.meta").format(
            sql.Identifier(schema)
        )
    )
    row = await cur.fetchone()
    if row is None:
        raise RealmSchemaError(f"realm {realm!r}: schema {schema!r} has no meta row")
    embedder, dimension, extractor, config = row
    info = RealmInfo(
        realm,
        schema,
        embedder,
        int(dimension),
        extractor,
        RealmConfig.model_validate(config),
        server,
    )
    types = await _column_types(conn, schema)
    if ("entities", "name") in types and ("entities", "name_key") not in types:
        await _add_name_keys(conn, info)
    if ("entities", "name") in types and ("entities", "archived_since") not in types:
        await add_archival(conn, schema)
    if ("entities", "name") in types and ("entity_history", "entity_id") not in types:
        await add_entity_belief(conn, schema)
    if ("relations", "rendered") in types and ("relations", "superseded_via") not in types:
        await add_superseded_via(conn, schema)
    if ("relations", "rendered") in types and ("contradiction_answers", "key") not in types:
        await add_contradiction_answers(conn, schema)
    if ("relations", "rendered") in types and ("document_history", "doc_key") not in types:
        await add_belief_history(conn, schema)
    if ("meta", "realm") in types and ("positions", "topic") not in types:
        await add_realm_positions(conn, schema, realm)
    if ("entity_sources", "entity_id") in types and not await has_attribute_indexes(conn, schema):
        await add_attribute_indexes(conn, schema)
    verify_embedding_columns(info, types)
    return info


async def _column_types(conn: AsyncConnection[Any], schema: str) -> dict[tuple[str, str], str]:
    """(table, column) → SQL type of every column in ``schema``."""
    cur = await conn.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND a.attnum > 0 AND NOT a.attisdropped",
        (schema,),
    )
    return {(t, c): ty for t, c, ty in await cur.fetchall()}


def verify_embedding_columns(info: RealmInfo, types: dict[tuple[str, str], str]) -> None:
    """Refuse to run unless every embedding column exists with the realm's dimension."""
    for table, column in EMBEDDING_COLUMNS:
        found = types.get((table, column))
        if found is None:
            raise RealmSchemaError(
                f"realm {info.realm!r}: {info.schema}.{table} has no {column} column; "
                "similarity search would silently return nothing"
            )
        match = _DIM.match(found)
        if match is None or int(match.group(1)) != info.dimension:
            raise RealmSchemaError(
                f"realm {info.realm!r}: {info.schema}.{table}.{column} is {found}, "
                f"but the realm is pinned to {info.embedder} (dimension {info.dimension})"
            )


async def _add_name_keys(conn: AsyncConnection[Any], info: RealmInfo) -> None:
    try:
        await add_name_keys(conn, info.schema)
    except NameKeyConflict as exc:
        raise RealmSchemaError(f"realm {info.realm!r}: {exc}") from exc


async def set_coverage_telemetry(
    conn: AsyncConnection[Any], realm: str, on: bool, server: str = MAIN
) -> RealmInfo:
    """Turn a realm's coverage telemetry on or off: the one configuration field that may
    change after creation, since it changes no stored fact, only what queries record."""
    info = await open_realm(conn, realm, server=server)
    config = info.config.model_copy(update={"coverage_telemetry": on})
    async with conn.transaction():
        await lock_realm_schema(conn, info.schema)
        await conn.execute(
            sql.SQL("UPDATE {} SET config = %s").format(sql.Identifier(info.schema, "meta")),
            (Jsonb(orjson.loads(config.to_json())),),
        )
        if on and not await has_telemetry(conn, info.schema):
            await add_telemetry(conn, info.schema)
    return await open_realm(conn, realm, server=server)


def check_embedder(info: RealmInfo, embedder_id: str) -> None:
    """Writing or querying with another embedder than the pinned one fails loudly."""
    if embedder_id != info.embedder:
        raise EmbedderMismatch(info.realm, info.embedder, embedder_id)


async def realm_problems(
    conn: AsyncConnection[Any], realms: list[tuple[str, str]] | None = None
) -> tuple[int, list[str]]:
    """(number of realms, why some cannot serve), in three statements whatever the number
    of realms: each needs a meta row whose embedder agrees with its dimension, and every
    embedding column at that dimension. ``realms`` ((realm, schema) on ``conn``'s server)
    default to the catalogue's realms on ``main``."""
    realms = await list_realms(conn) if realms is None else realms
    if not realms:
        return 0, []
    schemas = [s for _, s in realms]
    cur = await conn.execute(
        "SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod)"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped"
        " AND (a.attname = 'embedding' OR (c.relname = 'meta' AND a.attname = 'dimension'))",
        (schemas,),
    )
    types: dict[str, dict[tuple[str, str], str]] = {}
    for n, t, c, ty in await cur.fetchall():
        types.setdefault(str(n), {})[(str(t), str(c))] = str(ty)
    with_meta = [s for s in schemas if ("meta", "dimension") in types.get(s, {})]
    metas: dict[str, tuple[str, int, str]] = {}
    if with_meta:
        union = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {}, embedder, dimension, extractor FROM {}").format(
                sql.Literal(s), sql.Identifier(s, "meta")
            )
            for s in with_meta
        )
        cur = await conn.execute(union)
        metas = {str(s): (str(e), int(d), str(x)) for s, e, d, x in await cur.fetchall()}
    problems = []
    for realm, schema in realms:
        problem = _problem(realm, schema, metas.get(schema), types.get(schema, {}))
        if problem:
            problems.append(problem)
    return len(realms), problems


def _problem(
    realm: str, schema: str, meta: tuple[str, int, str] | None, types: dict[tuple[str, str], str]
) -> str | None:
    if meta is None:
        return f"realm {realm!r}: schema {schema!r} has no meta row"
    embedder, dimension, extractor = meta
    try:
        spec = parse_embedder(embedder)
    except ValueError as exc:
        return f"realm {realm!r}: {exc}"
    if spec.dimension != dimension:
        return f"realm {realm!r}: embedder {embedder} disagrees with dimension {dimension}"
    info = RealmInfo(realm, schema, embedder, dimension, extractor)
    try:
        verify_embedding_columns(info, types)
    except RealmSchemaError as exc:
        return str(exc)
    return None
