"""Realm schemas: created on first use, verified on every open (paper §3.5, invariant 10)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from tidegraph.schemas.ddl import (
    EMBEDDING_COLUMNS,
    control_ddl,
    realm_ddl,
    search_index_ddl,
)
from tidegraph.schemas.names import realm_schema, validate_realm
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.errors import EmbedderMismatch, RealmSchemaError
from tidegraph.store.locks import lock_realm_schema
from tidegraph.store.upgrades import NameKeyConflict, add_name_keys


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


async def create_realm(
    conn: AsyncConnection[Any],
    realm: str,
    config: RealmConfig,
    *,
    schema: str | None = None,
    search_indexes: bool = True,
) -> RealmInfo:
    """Create a realm (or a shadow schema for one) if absent; return what is pinned."""
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
        if schema == realm_schema(realm):
            await conn.execute(
                "INSERT INTO tidegraph.realms (realm, schema_name) VALUES (%s, %s)"
                " ON CONFLICT DO NOTHING",
                (realm, schema),
            )
    return await open_realm(conn, realm, schema=schema)


async def open_realm(
    conn: AsyncConnection[Any], realm: str, *, schema: str | None = None
) -> RealmInfo:
    """Load a realm's pinned configuration and verify every embedding column's width."""
    schema = schema or realm_schema(realm)
    cur = await conn.execute(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'meta'",
        (schema,),
    )
    if await cur.fetchone() is None:
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
        realm, schema, embedder, int(dimension), extractor, RealmConfig.model_validate(config)
    )
    types = await _column_types(conn, schema)
    if ("entities", "name") in types and ("entities", "name_key") not in types:
        await _add_name_keys(conn, info)
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


def check_embedder(info: RealmInfo, embedder_id: str) -> None:
    """Writing or querying with another embedder than the pinned one fails loudly."""
    if embedder_id != info.embedder:
        raise EmbedderMismatch(info.realm, info.embedder, embedder_id)
