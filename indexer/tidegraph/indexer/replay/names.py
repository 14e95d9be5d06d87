"""Names of the schemas a replay creates, and dropping them again.

Every name derives from the realm's schema (``realm_<realm>__<kind>_<label>``) so that a
copy sorts next to its realm and cannot be mistaken for another realm's; labels are
lowercase and short, and the whole name must fit PostgreSQL's 63-byte identifier limit
(a truncated name could collide with another). Names reach SQL only through
``sql.Identifier``.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.schemas import ConfigError, InvalidNameError, realm_schema, validate_realm
from tidegraph.store import replay_group

__all__ = [
    "LABEL_PATTERN",
    "audit_schema",
    "derived_schema",
    "drop_copy",
    "next_label",
    "replay_group",
    "retired_schema",
    "shadow_schema",
]

LABEL_PATTERN = r"^[a-z0-9][a-z0-9_]{0,31}$"
"""Shadow and audit labels: lowercase, so the schema name needs no quoting by hand."""
MAX_IDENTIFIER = 63
"""PostgreSQL truncates longer identifiers; a truncated schema name could collide."""

_LABEL = re.compile(LABEL_PATTERN)


def derived_schema(realm: str, kind: str, label: str) -> str:
    """``realm_<realm>__<kind>_<label>``; ``label`` may also be that full name."""
    prefix = f"{realm_schema(realm)}__{kind}_"
    if label.startswith(prefix):  # a full schema name was given
        label = label[len(prefix) :]
    if not _LABEL.fullmatch(label):
        raise InvalidNameError(f"{kind} label", label, LABEL_PATTERN)
    name = prefix + label
    if len(name.encode()) > MAX_IDENTIFIER:
        raise ConfigError(
            f"{kind} schema name {name!r} is {len(name.encode())} bytes; PostgreSQL allows "
            f"{MAX_IDENTIFIER}: shorten the label"
        )
    return name


def shadow_schema(realm: str, label: str) -> str:
    """``realm_<realm>__shadow_<label>``: where a rebuild is built before the swap."""
    return derived_schema(realm, "shadow", label)


def audit_schema(realm: str, label: str) -> str:
    """``realm_<realm>__audit_<label>``: a copy as of a past instant, never swapped in."""
    return derived_schema(realm, "audit", label)


def retired_schema(realm: str, label: str) -> str:
    """``realm_<realm>__retired_<label>``: the schema a swap replaced, kept for inspection."""
    return derived_schema(realm, "retired", label)


async def next_label(conn: AsyncConnection[Any], realm: str, kind: str) -> str:
    """The smallest unused number for ``kind`` schemas of ``realm``, as a label."""
    prefix = f"{realm_schema(realm)}__{kind}_"
    cur = await conn.execute(
        "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,)
    )
    used = {int(n[len(prefix) :]) for (n,) in await cur.fetchall() if n[len(prefix) :].isdigit()}
    return str(max(used, default=0) + 1)


_COPY_KINDS = ("shadow", "audit", "retired")


async def drop_copy(conn: AsyncConnection[Any], realm: str, schema: str) -> None:
    """Drop a shadow, audit copy or retired schema of ``realm``, and its replay position.

    Refuses anything else — the live realm above all — so a typo cannot drop a realm.
    """
    prefix = f"{realm_schema(validate_realm(realm))}__"
    kind = schema[len(prefix) :].split("_", 1)[0] if schema.startswith(prefix) else ""
    if kind not in _COPY_KINDS or derived_schema(realm, kind, schema) != schema:
        raise ConfigError(
            f"{schema!r} is not a shadow, audit copy or retired schema of realm {realm!r} "
            f"(expected {prefix}shadow_…, {prefix}audit_… or {prefix}retired_…)"
        )
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT realm FROM tidegraph.realms WHERE schema_name = %s", (schema,)
        )
        if await cur.fetchone() is not None:
            raise ConfigError(f"{schema!r} is a live realm's schema; refusing to drop it")
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )
        await conn.execute(
            "DELETE FROM tidegraph.consumer_positions WHERE group_id = %s",
            (replay_group(schema),),
        )
