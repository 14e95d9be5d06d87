"""The nested topic tree of paper §6.1 as stored by the last community build (earlier
builds are kept for reads ``as_believed_at`` an earlier instant, :mod:`retrieval`).

A build stores, per space, communities at several levels (0 the finest) with ``parent_id``
naming the community one level up that contains it; a community whose parent's report
failed is a root. The listing pages by id like the other listings, and every item names
its parent and all its children, so containment is complete on any page.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.query_service.db import table
from tidegraph.schemas import ANY_SPACE
from tidegraph.store import RealmInfo, live


async def community_tree(
    conn: AsyncConnection[Any],
    meta: RealmInfo,
    *,
    space: str,
    level: int | None,
    after_id: int,
    limit: int,
) -> dict[str, Any]:
    """A page of the realm's communities by id, each with its parent and children, plus
    when the build was made, whether the graph has moved since, and the levels present."""
    s = meta.schema
    comm = table(s, "communities")
    conds: list[sql.Composable] = [sql.SQL("c.id > %(after_id)s"), live("c")]
    if space != ANY_SPACE:
        conds.append(sql.SQL("c.space = %(space)s"))
    if level is not None:
        conds.append(sql.SQL("c.level = %(level)s"))
    params = {"after_id": after_id, "space": space, "level": level, "limit": limit}
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur = await conn.execute(
            sql.SQL(
                "SELECT c.id, c.space, c.level, c.parent_id, c.title, c.summary, c.rating,"
                " c.size, c.built_at FROM {comm} c WHERE {conds} ORDER BY c.id LIMIT %(limit)s"
            ).format(comm=comm, conds=sql.SQL(" AND ").join(conds)),
            params,
        )
        rows = await cur.fetchall()
        cur = await conn.execute(  # one pass for every child of the page
            sql.SQL(
                "SELECT parent_id, id FROM {} WHERE parent_id = ANY(%s::bigint[]) ORDER BY id"
            ).format(comm),
            ([r[0] for r in rows],),
        )
        children: dict[int, list[str]] = {}
        for parent, child in await cur.fetchall():
            children.setdefault(int(parent), []).append(str(child))
        cur = await conn.execute(
            sql.SQL(
                "SELECT DISTINCT level FROM {comm} c WHERE {f} AND {live} ORDER BY level"
            ).format(
                comm=comm,
                f=sql.SQL("true") if space == ANY_SPACE else sql.SQL("c.space = %(space)s"),
                live=live("c"),
            ),
            params,
        )
        levels = [int(r[0]) for r in await cur.fetchall()]
        cur = await conn.execute(
            sql.SQL("SELECT communities_built_at, communities_stale FROM {}").format(
                table(s, "meta")
            )
        )
        built = await cur.fetchone()
    communities = [
        {
            "id": str(i),
            "space": sp,
            "level": int(lv),
            "parent_id": None if pa is None else str(pa),
            "children": children.get(int(i), []),
            "title": ti,
            "summary": su,
            "rating": float(ra),
            "size": int(sz),
            "built_at": ba,
        }
        for i, sp, lv, pa, ti, su, ra, sz, ba in rows
    ]
    return {
        "communities": communities,
        "levels": levels,
        "built_at": built[0] if built else None,
        "stale": bool(built[1]) if built else False,
        "next_after_id": str(rows[-1][0]) if len(rows) == limit else None,
    }
