"""In-place upgrades of realms (and of the control schema) created with an earlier table
layout.

Both the indexer and the query service open realms, and either may be the first to meet
an older one after an upgrade, so the steps live here and are safe to run concurrently:
each takes the realm's write lock and re-checks under it.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection, sql

from tidegraph.schemas import name_key
from tidegraph.store.ddl import (
    ATTRIBUTE_INDEXES,
    CATALOGUE_SERVER_DDL,
    ENTITY_BELIEF_TABLES,
    HNSW_OPTIONS,
    NAME_SEARCH_INDEXES,
    POSITIONS_AHEAD_DDL,
    TELEMETRY_TABLE,
    archival_ddl,
    attribute_index_ddl,
    belief_history_ddl,
    contradiction_answers_ddl,
    entity_belief_ddl,
    name_search_ddl,
    positions_ddl,
    superseded_via_ddl,
    telemetry_ddl,
    vector_index_ddl,
)
from tidegraph.store.locks import lock_realm_schema


async def add_positions_ahead(conn: AsyncConnection[Any]) -> None:
    """Give consumer positions their per-realm ``ahead`` column, when missing.

    Checked in the catalogue first: ``ALTER TABLE`` locks the table exclusively even when
    the column exists, and every indexer start would then queue behind any open write
    transaction (they all update their position), and every position read behind it.
    """
    cur = await conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = 'tidegraph.consumer_positions'::regclass"
        " AND attname = 'ahead' AND NOT attisdropped"
    )
    if await cur.fetchone() is None:
        await conn.execute(POSITIONS_AHEAD_DDL)


async def add_catalogue_server(conn: AsyncConnection[Any]) -> None:
    """Give the realm catalogue its ``server`` column, when missing (checked first, as in
    :func:`add_positions_ahead`)."""
    cur = await conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = 'tidegraph.realms'::regclass"
        " AND attname = 'server' AND NOT attisdropped"
    )
    if await cur.fetchone() is None:
        await conn.execute(CATALOGUE_SERVER_DDL)


async def add_realm_positions(conn: AsyncConnection[Any], schema: str, realm: str) -> None:
    """Give a realm created while positions belonged to consumer groups its own
    ``positions``, seeded with the furthest any group had settled it (under the realm's
    write lock, re-checked there).

    Every record a group settled for the realm below that offset was applied to it (or
    passed over), whichever group did it, so the realm stands at the largest of them; a
    replay's shadow takes its own replay group's position.
    """
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        cur = await conn.execute(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = 'positions' AND c.relkind = 'r'",
            (schema,),
        )
        if await cur.fetchone() is not None:
            return
        await conn.execute(positions_ddl(schema))
        await conn.execute(
            sql.SQL(
                "INSERT INTO {} (topic, partition, next_offset)"
                " SELECT topic, partition, max(greatest(next_offset,"
                "  coalesce((ahead ->> %(realm)s)::bigint, 0)))"
                " FROM tidegraph.consumer_positions"
                " WHERE CASE WHEN starts_with(group_id, 'tidegraph-replay:')"
                "  THEN group_id = 'tidegraph-replay:' || %(schema)s"
                "  ELSE %(schema)s = 'realm_' || %(realm)s END"
                " GROUP BY topic, partition"
            ).format(sql.Identifier(schema, "positions")),
            {"realm": realm, "schema": schema},
        )


async def add_belief_history(conn: AsyncConnection[Any], schema: str) -> None:
    """Give a realm created before reads ``as_believed_at`` were exact the history they
    read (:func:`~tidegraph.store.ddl.belief_history_ddl`), under the realm's write lock,
    re-checked there (the document history is created last)."""
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        cur = await conn.execute(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = 'document_history' AND c.relkind = 'r'",
            (schema,),
        )
        if await cur.fetchone() is None:
            await conn.execute(belief_history_ddl(schema))


class NameKeyConflict(Exception):
    """Two entities of one space differ only in letter case outside ASCII."""


async def has_name_keys(conn: AsyncConnection[Any], schema: str) -> bool:
    """Whether the realm's entities carry the stored name key."""
    cur = await conn.execute(
        "SELECT 1 FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = 'entities' AND column_name = 'name_key'",
        (schema,),
    )
    return await cur.fetchone() is not None


async def add_name_keys(conn: AsyncConnection[Any], schema: str) -> None:
    """Give a realm created before entities carried a stored name key its keys.

    The old unique index used SQL ``lower()``, whose reach depends on the collation; the
    keys are computed by :func:`name_key`, as every write computes them now.
    """
    entities = sql.Identifier(schema, "entities")
    try:
        async with conn.transaction():
            await lock_realm_schema(conn, schema)
            await conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS name_key text").format(entities)
            )
            cur = await conn.execute(
                sql.SQL("SELECT id, name FROM {} WHERE name_key IS NULL").format(entities)
            )
            rows = await cur.fetchall()
            await conn.execute(
                sql.SQL(
                    "UPDATE {} e SET name_key = u.k FROM unnest(%s::bigint[], %s::text[])"
                    " AS u(i, k) WHERE e.id = u.i"
                ).format(entities),
                ([i for i, _ in rows], [name_key(n) for _, n in rows]),
            )
            await conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN name_key SET NOT NULL").format(entities)
            )
            await conn.execute(
                sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(schema, "entities_name"))
            )
            await conn.execute(
                sql.SQL(
                    "CREATE UNIQUE INDEX IF NOT EXISTS entities_name_key ON {} (space, name_key)"
                ).format(entities)
            )
    except psycopg.errors.UniqueViolation as exc:
        raise NameKeyConflict(
            f"two entities of {schema} differ only in letter case outside ASCII"
            f" ({exc.diag.message_detail}); rebuild the realm with `tidegraph replay`"
        ) from exc


async def has_name_search(conn: AsyncConnection[Any], schema: str) -> bool:
    """Whether the realm has every word-prefix index of names and aliases."""
    cur = await conn.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relkind = 'i'",
        (schema, list(NAME_SEARCH_INDEXES)),
    )
    row = await cur.fetchone()
    return row is not None and int(row[0]) == len(NAME_SEARCH_INDEXES)


async def add_name_search(conn: AsyncConnection[Any], schema: str) -> None:
    """Give a realm created before name lookup by prefix its indexes (idempotent; under the
    realm's write lock, so two services meeting the realm at once build them once)."""
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        await conn.execute(name_search_ddl(schema))


async def has_telemetry(conn: AsyncConnection[Any], schema: str) -> bool:
    """Whether the realm has the coverage telemetry table."""
    cur = await conn.execute(
        "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s AND c.relkind = 'r'",
        (schema, TELEMETRY_TABLE),
    )
    return await cur.fetchone() is not None


async def add_telemetry(conn: AsyncConnection[Any], schema: str) -> None:
    """Give a realm created before coverage telemetry its table (idempotent; under the
    realm's write lock)."""
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        await conn.execute(telemetry_ddl(schema))


async def add_archival(conn: AsyncConnection[Any], schema: str) -> None:
    """Give a realm created before retention its ``archived_since`` column and index
    (idempotent; under the realm's write lock)."""
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        await conn.execute(archival_ddl(schema))


async def add_entity_belief(conn: AsyncConnection[Any], schema: str) -> None:
    """Give a realm created before entity attributes were kept in belief time its
    ``entity_sources`` and ``entity_history``, seeded from what it holds.

    The earlier layout kept no record of which chunk taught which description, so each
    live mention is seeded as a contribution of the entity's present type and description:
    the entity keeps them while any chunk that mentioned it before the upgrade is live, and
    derivation is exact for everything written afterwards (a replay makes it exact
    throughout). The history opens one interval per entity at its creation with its
    present attributes: what earlier belief instants held was never recorded. Under the
    realm's write lock, re-checked there, so two services meeting the realm seed it once.
    """
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        cur = await conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relkind = 'r'",
            (schema, list(ENTITY_BELIEF_TABLES)),
        )
        row = await cur.fetchone()
        if row is not None and int(row[0]) == len(ENTITY_BELIEF_TABLES):
            return
        await conn.execute(entity_belief_ddl(schema))
        tables = {
            n: sql.Identifier(schema, n)
            for n in ("entities", "mentions", "entity_sources", "entity_history")
        }
        await conn.execute(
            sql.SQL(
                "INSERT INTO {entity_sources} (entity_id, chunk_id, type, description)"
                " SELECT e.id, m.chunk_id,"
                " CASE WHEN e.type = '' OR lower(e.type) = 'concept' THEN NULL ELSE e.type END,"
                " e.description FROM {mentions} m JOIN {entities} e ON e.id = m.entity_id"
            ).format(**tables)
        )
        await conn.execute(
            sql.SQL(
                "INSERT INTO {entity_history} (entity_id, name, type, description, aliases,"
                " t_created) SELECT id, name, type, description, aliases, created_at"
                " FROM {entities}"
            ).format(**tables)
        )


async def add_contradiction_answers(conn: AsyncConnection[Any], schema: str) -> None:
    """Give a realm created before the model was asked about the residue its answer
    cache (idempotent; under the realm's write lock)."""
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        await conn.execute(contradiction_answers_ddl(schema))


async def has_attribute_indexes(conn: AsyncConnection[Any], schema: str) -> bool:
    """Whether the realm has every index the attribute derivation reads (catalogue only)."""
    cur = await conn.execute(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relkind = 'i'",
        (schema, list(ATTRIBUTE_INDEXES)),
    )
    row = await cur.fetchone()
    return row is not None and int(row[0]) == len(ATTRIBUTE_INDEXES)


async def add_attribute_indexes(conn: AsyncConnection[Any], schema: str) -> None:
    """Give a realm created before them the attribute derivation's indexes (idempotent;
    under the realm's write lock, so two services meeting the realm build them once; the
    realm's writes wait for the build, once)."""
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        await conn.execute(attribute_index_ddl(schema))


async def add_superseded_via(conn: AsyncConnection[Any], schema: str) -> None:
    """Give a realm created before supersession mechanisms were recorded its
    ``superseded_via`` columns (idempotent; under the realm's write lock)."""
    async with conn.transaction():
        await lock_realm_schema(conn, schema)
        await conn.execute(superseded_via_ddl(schema))


async def vector_indexes_outdated(conn: AsyncConnection[Any], schema: str) -> list[str]:
    """Tables of the realm whose HNSW index was built with other options than
    :data:`~tidegraph.store.ddl.HNSW_OPTIONS` (or is missing), from the catalogue alone.

    Never rebuilt at start: a rebuild reads the whole table and takes minutes on a large
    realm; ``tidegraph realm reindex`` (:func:`rebuild_vector_index`) does it when asked.
    """
    cur = await conn.execute(
        "SELECT c.relname, coalesce(c.reloptions, '{}') FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind = 'i' AND c.relname = ANY(%s)",
        (schema, [f"{t}_embedding" for t in HNSW_OPTIONS]),
    )
    built = {str(name): _options(opts) for name, opts in await cur.fetchall()}
    outdated = []
    for table, (m, ef_construction) in HNSW_OPTIONS.items():
        options = built.get(f"{table}_embedding")
        # pgvector's defaults (m 16, ef_construction 64) apply when an option is unset.
        if options is None or (
            int(options.get("m", "16")),
            int(options.get("ef_construction", "64")),
        ) != (m, ef_construction):
            outdated.append(table)
    return outdated


def _options(reloptions: list[str]) -> dict[str, str]:
    return dict(option.split("=", 1) for option in reloptions)


async def rebuild_vector_index(conn: AsyncConnection[Any], schema: str, table: str) -> None:
    """Rebuild ``table``'s HNSW index with the current options, without blocking writes
    or searches: the new index is built concurrently beside the old one, then takes its
    name in one short transaction. ``conn`` must be in autocommit mode."""
    new = f"{table}_embedding_new"
    await conn.execute(
        sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(schema, new))
    )
    await conn.execute(vector_index_ddl(schema, table, name=new, concurrently=True))
    async with conn.transaction():
        await conn.execute(
            sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(schema, f"{table}_embedding"))
        )
        await conn.execute(
            sql.SQL("ALTER INDEX {} RENAME TO {}").format(
                sql.Identifier(schema, new), sql.Identifier(f"{table}_embedding")
            )
        )
