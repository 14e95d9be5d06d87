"""Archiving and restoring entities: retention's one write (paper §6.1).

Archiving sets ``entities.archived_since``; every retrieval channel and community build
then leaves the entity (and each relation it is an end of) out, as they do a dormant one.
Nothing is deleted: restoring clears the stamp and the entity is back with everything it
had. Each call that changes something is one commit like the writer's: it draws the next
commit sequence and belief instant under the realm lock (the ``meta`` row, by
:class:`~tidegraph.indexer.write.sequencer.LiveSequencer`) and appends one
``entity_archived`` / ``entity_unarchived`` change per entity to the outbox under it (plus
``communities_stale`` when it is the first change since a build, as for any write).

Scoring reads the realm's coverage telemetry, so it refuses when telemetry is off: the
recency and frequency terms would be undefined, and structure alone is not scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from tidegraph.indexer.retention.score import (
    DEFAULT_WEIGHTS,
    Usage,
    Weights,
    importance,
    to_archive,
)
from tidegraph.indexer.write import LiveSequencer
from tidegraph.schemas import ChangeKind, ConfigError
from tidegraph.store import ENTITIES, RealmInfo, add_telemetry, alive, has_telemetry

__all__ = ["Archived", "Plan", "archive", "plan_retention", "unarchive"]


@dataclass(frozen=True)
class Plan:
    """What a retention run would archive."""

    now: datetime
    """Database time the scores were taken at."""
    considered: int
    """Live entities (neither dormant nor archived) scored."""
    archive: tuple[tuple[int, str, float], ...]
    """(id, name, score) to archive, lowest score first."""


@dataclass(frozen=True)
class Archived:
    """What one archiving or restoring commit did."""

    seq: int | None
    """Commit sequence of the change; ``None`` when nothing changed (nothing committed)."""
    entity_ids: tuple[int, ...]


def _t(info: RealmInfo, name: str) -> sql.Identifier:
    return sql.Identifier(info.schema, name)


async def _usages(conn: AsyncConnection[Any], info: RealmInfo) -> tuple[datetime, list[Any]]:
    cur = await conn.execute(
        sql.SQL(
            "WITH hits AS (SELECT x AS id, count(*) AS n, max(at) AS last"
            "  FROM {ret}, unnest(entity_ids) x GROUP BY x),"
            " deg AS (SELECT id, count(*) AS n FROM ("
            "  SELECT subject_id AS id FROM {rel} WHERE status = 'current'"
            "  UNION ALL SELECT object_id FROM {rel} WHERE status = 'current') d GROUP BY id)"
            " SELECT now(), e.id, e.name, coalesce(h.n, 0), h.last, coalesce(d.n, 0),"
            " e.created_at FROM {ent} e"
            " LEFT JOIN hits h ON h.id = e.id LEFT JOIN deg d ON d.id = e.id"
            " WHERE {alive} ORDER BY e.id"
        ).format(
            ret=_t(info, "retrievals"),
            rel=_t(info, "relations"),
            ent=_t(info, "entities"),
            alive=alive("e"),
        )
    )
    rows = await cur.fetchall()
    if not rows:
        cur = await conn.execute("SELECT now()")
        now_row = await cur.fetchone()
        assert now_row is not None
        return now_row[0], []
    return rows[0][0], [r[1:] for r in rows]


async def plan_retention(
    conn: AsyncConnection[Any], info: RealmInfo, keep: float, weights: Weights = DEFAULT_WEIGHTS
) -> Plan:
    """Score the realm's live entities and name those outside the ``keep`` share."""
    if not info.config.coverage_telemetry:
        raise ConfigError(
            f"realm {info.realm!r} records no coverage telemetry (coverage_telemetry is "
            "false): retrieval recency and frequency are unknown, so retention refuses to "
            "score on structure alone"
        )
    if not await has_telemetry(conn, info.schema):
        await add_telemetry(conn, info.schema)
    now, rows = await _usages(conn, info)
    usages = [Usage(i, int(n), last, int(d), since) for i, _, n, last, d, since in rows]
    names = {int(r[0]): str(r[1]) for r in rows}
    scores = {u.entity_id: importance(u, now, weights) for u in usages}
    chosen = to_archive(usages, keep, now, weights)
    return Plan(now, len(usages), tuple((i, names[i], scores[i]) for i in chosen))


async def archive(
    conn: AsyncConnection[Any], info: RealmInfo, entity_ids: Sequence[int]
) -> Archived:
    """Archive the given entities that are live now, in one sequenced commit."""
    return await _set(conn, info, list(entity_ids), archived=True)


async def unarchive(
    conn: AsyncConnection[Any], info: RealmInfo, entity_ids: Sequence[int] | None
) -> Archived:
    """Restore the given archived entities (every archived one when ``None``), in one
    sequenced commit."""
    return await _set(conn, info, None if entity_ids is None else list(entity_ids), archived=False)


async def _set(
    conn: AsyncConnection[Any], info: RealmInfo, ids: list[int] | None, *, archived: bool
) -> Archived:
    if not conn.autocommit:
        raise ConfigError("retention needs an autocommit connection (it runs its own commit)")
    if ids is not None and not ids:
        return Archived(None, ())
    try:
        return await _commit(conn, info, ids, archived=archived)
    except _NothingChanged:
        return Archived(None, ())


class _NothingChanged(Exception):
    """Raised inside the transaction to roll back the drawn sequence."""


async def _commit(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    ids: list[int] | None,
    *,
    archived: bool,
) -> Archived:
    ent = _t(info, "entities")
    async with conn.transaction():
        cur = await conn.execute("SELECT now()")
        now_row = await cur.fetchone()
        assert now_row is not None
        stamp = await LiveSequencer(info).draw(conn, now_row[0])
        if archived:
            query = sql.SQL(
                "UPDATE {ent} SET archived_since = %(bt)s WHERE id = ANY(%(ids)s::bigint[])"
                " AND {alive} RETURNING id, space, name, type"
            ).format(ent=ent, alive=alive())
        else:
            query = sql.SQL(
                "UPDATE {} SET archived_since = NULL WHERE archived_since IS NOT NULL"
                " AND (%(all)s OR id = ANY(%(ids)s::bigint[])) RETURNING id, space, name, type"
            ).format(ent)
        cur = await conn.execute(
            query, {"bt": stamp.belief_time, "ids": ids or [], "all": ids is None}
        )
        changed = sorted(await cur.fetchall())
        if not changed:
            raise _NothingChanged  # undoes the drawn sequence with the transaction
        ids_changed = [int(r[0]) for r in changed]
        await ENTITIES.record(conn, info.schema, {"ids": ids_changed, "bt": stamp.belief_time})
        kind = ChangeKind.ENTITY_ARCHIVED if archived else ChangeKind.ENTITY_UNARCHIVED
        changes: list[tuple[str, str, dict[str, Any]]] = [
            (kind.value, str(sp), {"entity": {"id": str(i), "name": n, "type": t}})
            for i, sp, n, t in changed
        ]
        if stamp.communities_stale:
            changes.append((ChangeKind.COMMUNITIES_STALE.value, str(changed[0][1]), {}))
        await conn.execute(
            sql.SQL(
                "INSERT INTO {} (seq, idx, kind, space, belief_time, payload)"
                " SELECT %s, i - 1, c ->> 0, c ->> 1, %s, c -> 2"
                " FROM jsonb_array_elements(%s) WITH ORDINALITY AS u(c, i)"
            ).format(_t(info, "outbox")),
            (stamp.seq, stamp.belief_time, Jsonb(changes)),
        )
    return Archived(stamp.seq, tuple(int(r[0]) for r in changed))
