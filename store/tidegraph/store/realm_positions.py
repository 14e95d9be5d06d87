"""What each realm has settled of the documents topic: the realm's own position.

A record is applied to its realm at most once whatever reads it — a consumer group, a
second group, a demo, a replay — because the realm keeps where it stands in its own schema
(``positions``: next offset per topic and partition) and every write moves it with a
compare-and-set inside the write's transaction (DESIGN invariant 2). A consumer group's
claim and epoch (:mod:`tidegraph.store.positions`) stay the fence against a zombie of the
same group; this is the fence between everything else. Since the position lives with the
realm, it is renamed with a swapped-in rebuild, dropped with the realm, and (later) moved
with it to another server.

Keys that no realm schema holds have a position too, in the control schema
(``tidegraph.key_positions``): keys that name no realm at all, realms not created yet, and
deleted realms. Deleting a realm raises its key's position to the end of the log at that
moment (:func:`bury`), so every record published before the deletion stays settled for
every reader, and a realm created again by a later record starts from there
(:func:`ensure`).

Every settle takes the realm's ``meta`` row lock first (:func:`settle`): the lock every
write of the realm takes, so a swap that holds it reads a position no quiet record can
move under it, and a write that waited for a swap sees ``swapped_out`` and retries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.store.errors import AlreadySettled, RealmSwapped

NO_REALM = ""
"""The key of a record whose key is missing or not text."""


def key_realm(key: bytes | None) -> str:
    """The realm a record's key names, or :data:`NO_REALM` (its position is kept under it)."""
    try:
        return key.decode() if key else NO_REALM
    except UnicodeDecodeError:
        return NO_REALM


@dataclass(frozen=True)
class Mark:
    """One realm's (or key's) records settled by a transaction."""

    key: str
    """The records' key: a realm name, or any other key no realm holds."""
    schema: str | None
    """The realm schema holding the key's position; ``None`` for the control schema's
    :data:`key position <ensure>` (no realm holds the key)."""
    at: int
    """Offset of the first record settled: the position must not be past it."""
    after: int
    """Offset the position moves to (one past the last record settled)."""


def _positions(schema: str) -> sql.Identifier:
    return sql.Identifier(schema, "positions")


async def key_position(conn: AsyncConnection[Any], key: str, topic: str, partition: int) -> int:
    """Where ``key`` stands while no realm schema holds it (0 when never recorded)."""
    cur = await conn.execute(
        "SELECT next_offset FROM tidegraph.key_positions"
        " WHERE key = %s AND topic = %s AND partition = %s",
        (key, topic, partition),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def ensure(
    conn: AsyncConnection[Any],
    schema: str,
    key: str,
    topic: str,
    partition: int,
    start: int | None = None,
) -> int:
    """The realm's position on the partition, created where the realm's key stood before
    the realm existed (a deleted realm's records stay settled) when it has none yet: at
    ``start`` when the caller read that on ``main`` (the realm lives on another server),
    else as this server's control schema keeps it."""
    stood = (
        sql.SQL("(SELECT next_offset FROM tidegraph.key_positions")
        + sql.SQL(" WHERE key = %(k)s AND topic = %(t)s AND partition = %(n)s)")
        if start is None
        else sql.Literal(start)
    )
    cur = await conn.execute(
        sql.SQL(
            "WITH made AS (INSERT INTO {p} (topic, partition, next_offset)"
            " SELECT %(t)s, %(n)s, coalesce({stood}, 0)"
            " ON CONFLICT (topic, partition) DO NOTHING RETURNING next_offset)"
            " SELECT next_offset FROM made"
            " UNION ALL SELECT next_offset FROM {p} WHERE topic = %(t)s AND partition = %(n)s"
        ).format(p=_positions(schema), stood=stood),
        {"t": topic, "n": partition, "k": key},
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def read(conn: AsyncConnection[Any], schema: str) -> dict[tuple[str, int], int]:
    """(topic, partition) → next offset of every position the realm holds (none for a
    realm not opened since positions moved into realms: it holds them once opened)."""
    cur = await conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (_positions(schema).as_string(conn),)
    )
    row = await cur.fetchone()
    if not (row and row[0]):
        return {}
    cur = await conn.execute(
        sql.SQL("SELECT topic, partition, next_offset FROM {}").format(_positions(schema))
    )
    return {(str(t), int(p)): int(o) for t, p, o in await cur.fetchall()}


async def stand(conn: AsyncConnection[Any], schema: str, topic: str, partition: int) -> int | None:
    """The realm's position on one partition; ``None`` before it settled anything there."""
    cur = await conn.execute(
        sql.SQL("SELECT next_offset FROM {} WHERE topic = %s AND partition = %s").format(
            _positions(schema)
        ),
        (topic, partition),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else None


async def settle(
    conn: AsyncConnection[Any], topic: str, partition: int, marks: Iterable[Mark]
) -> None:
    """Move each mark's position from ``at`` to ``after`` inside the caller's transaction,
    or raise :class:`AlreadySettled` (someone settled those records first: another group,
    a process that read them earlier) or :class:`RealmSwapped` (a rebuild replaced the
    realm; its own position decides again).

    A realm's position is created by :func:`ensure` before its first write, so a missing
    row means the realm was dropped under the caller (the statement then fails on the
    missing table, or finds no row and is refused like a settled one).
    """
    for mark in marks:
        if mark.schema is None:
            cur = await conn.execute(
                "INSERT INTO tidegraph.key_positions AS k (key, topic, partition, next_offset)"
                " VALUES (%(k)s, %(t)s, %(n)s, %(after)s)"
                " ON CONFLICT (key, topic, partition) DO UPDATE SET next_offset = %(after)s,"
                " updated_at = now() WHERE k.next_offset <= %(at)s RETURNING 1",
                {"k": mark.key, "t": topic, "n": partition, "at": mark.at, "after": mark.after},
            )
            if await cur.fetchone() is None:
                raise AlreadySettled(mark.key, topic, partition, mark.at)
            continue
        meta = await conn.execute(
            sql.SQL("SELECT swapped_out FROM {} FOR UPDATE").format(
                sql.Identifier(mark.schema, "meta")
            )
        )
        moved = await conn.execute(
            sql.SQL(
                "UPDATE {} SET next_offset = %s, updated_at = now()"
                " WHERE topic = %s AND partition = %s AND next_offset <= %s RETURNING 1"
            ).format(_positions(mark.schema)),
            (mark.after, topic, partition, mark.at),
        )
        swapped = await meta.fetchone()
        if swapped is not None and swapped[0]:
            raise RealmSwapped(mark.key)
        if await moved.fetchone() is None:
            raise AlreadySettled(mark.key, topic, partition, mark.at)


def marks_of(keys: Sequence[tuple[str, str | None, int]]) -> list[Mark]:
    """One mark per key over records given in log order as (key, schema, offset): from the
    key's first record to one past its last."""
    first: dict[str, tuple[str | None, int]] = {}
    last: dict[str, int] = {}
    for key, schema, offset in keys:
        first.setdefault(key, (schema, offset))
        last[key] = offset
    return [Mark(k, s, at, last[k] + 1) for k, (s, at) in first.items()]


async def bury(
    conn: AsyncConnection[Any],
    realm: str,
    schema: str,
    ends: Mapping[tuple[str, int], int],
    keys: AsyncConnection[Any] | None = None,
) -> None:
    """Before a realm is dropped: raise its key's position to the realm's own position and
    to ``ends`` ((topic, partition) → the log's end at the deletion), so no record published
    before the deletion creates the realm again, whatever reads it (a realm not opened
    since positions moved into it holds none: its key is raised to ``ends`` alone). Key
    positions are kept on ``main``: ``keys`` when the realm is on another server."""
    cur = await conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (_positions(schema).as_string(conn),)
    )
    row = await cur.fetchone()
    held = await read(conn, schema) if row and row[0] else {}
    for (topic, partition), offset in sorted({**ends, **held}.items()):
        at = max(offset, held.get((topic, partition), 0), ends.get((topic, partition), 0))
        await (keys or conn).execute(
            "INSERT INTO tidegraph.key_positions AS k (key, topic, partition, next_offset)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT (key, topic, partition) DO UPDATE"
            " SET next_offset = greatest(k.next_offset, excluded.next_offset),"
            " updated_at = now()",
            (realm, topic, partition, at),
        )
