"""Coverage telemetry (paper §6.1): what each query touched, and what no query reaches.

A realm whose configuration sets ``coverage_telemetry`` gets one ``retrievals`` row per
answered query: the hash of the query text (the content hash, never the text), the mode,
the entities the answer touched (those it reports and both ends of every relation it
reports), the communities it reports, and when. It is read-side bookkeeping: the caller
logs and counts a failed record and answers the query anyway.

The readings are over the current graph: communities least retrieved since they were
built (a rebuild gives new ids, so counts restart with it) and live entities no recorded
query has touched.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.query_service.db import table
from tidegraph.schemas import ANY_SPACE, QueryDataResponse, content_hash
from tidegraph.store import RealmInfo, alive, switch_lock_key


async def record(
    conn: AsyncConnection[Any], meta: RealmInfo, query: str, mode: str, result: QueryDataResponse
) -> bool:
    """Append one ``retrievals`` row for an answered query (raises on failure); false when
    the copy ``meta`` names has been fenced by a move (``swapped_out``): the realm lives on
    another server now, and a row written here would stay behind with the old copy. The
    realm's switch lock, taken shared first, waits out a move switching it meanwhile, so
    the fence is read as the switch left it (the insert's own snapshot is taken after)."""
    s = meta.schema
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock_shared(hashtext(%s))", (switch_lock_key(meta.realm),)
        )
        return await _insert(conn, s, query, mode, result)


async def _insert(
    conn: AsyncConnection[Any], s: str, query: str, mode: str, result: QueryDataResponse
) -> bool:
    cur = await conn.execute(
        sql.SQL(
            "INSERT INTO {ret} (query_hash, mode, entity_ids, community_ids)"
            " SELECT %(hash)s, %(mode)s, ARRAY(SELECT DISTINCT x FROM ("
            "  SELECT unnest(%(ents)s::bigint[]) UNION ALL"
            "  SELECT unnest(ARRAY[r.subject_id, r.object_id]) FROM {rel} r"
            "   WHERE r.id = ANY(%(rels)s::bigint[])) t(x) ORDER BY x),"
            " %(comms)s::bigint[]"
            " FROM {meta} m WHERE NOT m.swapped_out"
        ).format(ret=table(s, "retrievals"), rel=table(s, "relations"), meta=table(s, "meta")),
        {
            "hash": content_hash(query),
            "mode": mode,
            "ents": [int(e.id) for e in result.entities],
            "rels": [int(r.id) for r in result.relations],
            "comms": [int(c.id) for c in result.communities],
        },
    )
    return cur.rowcount == 1


def _space(alias: str, space: str) -> sql.Composable:
    if space == ANY_SPACE:
        return sql.SQL("true")
    return sql.SQL("{}.space = %(space)s").format(sql.Identifier(alias))


async def since(conn: AsyncConnection[Any], meta: RealmInfo) -> Any:
    """When the first recorded query was answered (``None``: none yet)."""
    cur = await conn.execute(
        sql.SQL("SELECT min(at) FROM {}").format(table(meta.schema, "retrievals"))
    )
    row = await cur.fetchone()
    return row[0] if row else None


async def least_retrieved_communities(
    conn: AsyncConnection[Any], meta: RealmInfo, *, space: str, limit: int
) -> list[dict[str, Any]]:
    """The current communities fewest recorded queries reported, least first; ties by the
    earliest last retrieval (never retrieved first), then id."""
    s = meta.schema
    cur = await conn.execute(
        sql.SQL(
            "WITH hits AS (SELECT x AS id, count(*) AS n, max(at) AS last"
            "  FROM {ret}, unnest(community_ids) x GROUP BY x)"
            " SELECT c.id, c.space, c.level, c.title, c.size, coalesce(h.n, 0), h.last"
            " FROM {comm} c LEFT JOIN hits h ON h.id = c.id WHERE {f} AND c.t_expired IS NULL"
            " ORDER BY coalesce(h.n, 0), h.last NULLS FIRST, c.id LIMIT %(limit)s"
        ).format(ret=table(s, "retrievals"), comm=table(s, "communities"), f=_space("c", space)),
        {"space": space, "limit": limit},
    )
    return [
        {
            "id": str(i),
            "space": sp,
            "level": int(lv),
            "title": ti,
            "size": int(sz),
            "retrievals": int(n),
            "last_retrieved_at": last,
        }
        for i, sp, lv, ti, sz, n, last in await cur.fetchall()
    ]


async def never_retrieved_entities(
    conn: AsyncConnection[Any], meta: RealmInfo, *, space: str, after_id: int, limit: int
) -> list[dict[str, Any]]:
    """Live entities (neither dormant nor archived) no recorded query touched, by id."""
    s = meta.schema
    cur = await conn.execute(
        sql.SQL(
            "SELECT e.id, e.space, e.name, e.type FROM {ent} e"
            " LEFT JOIN (SELECT DISTINCT unnest(entity_ids) AS id FROM {ret}) t ON t.id = e.id"
            " WHERE t.id IS NULL AND {alive} AND e.id > %(after)s AND {f}"
            " ORDER BY e.id LIMIT %(limit)s"
        ).format(
            ent=table(s, "entities"),
            ret=table(s, "retrievals"),
            alive=alive("e"),
            f=_space("e", space),
        ),
        {"space": space, "after": after_id, "limit": limit},
    )
    return [
        {"id": str(i), "space": sp, "name": n, "type": t} for i, sp, n, t in await cur.fetchall()
    ]
