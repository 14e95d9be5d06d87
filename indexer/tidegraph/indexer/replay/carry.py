"""What a rebuilt realm inherits from the live one that the log does not hold.

The retention state (archived flags, coverage telemetry), the community builds and the model
caches (extraction results, contradiction answers) are not in the documents topic, so a
replay cannot rebuild them: the swap (:mod:`~tidegraph.indexer.replay.swap`, step 4 and 6)
carries them over, most of it ahead of the lock (:func:`premerge_retention`,
:func:`premerge_cache`) so the hold only carries what changed since.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.store import contradiction_answers_ddl, has_telemetry


def qualified(schema: str, table: str) -> sql.Composed:
    """``schema.table`` with both quoted as identifiers."""
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


async def carry_retention(conn: AsyncConnection[Any], live: str, shadow: str) -> tuple[int, int]:
    """Step 4: bring the shadow's archived flags and coverage telemetry level with
    ``live`` (module docstring); returns (archived entities, telemetry rows) the shadow
    then holds.

    It writes only what differs, so the replay runs it ahead of the lock as well
    (:func:`premerge_retention`) and the swap's own run is left with what changed since:
    archiving an entity rewrites its row and index entries, a fifth of a realm at a time
    with ``--keep 0.8``. Telemetry rows keep their ids, so the rows already carried are
    passed by.
    """
    ent_s, ent_l = qualified(shadow, "entities"), qualified(live, "entities")
    if await _has_column(conn, live, "entities", "archived_since"):
        await conn.execute(
            sql.SQL(
                "UPDATE {s} s SET archived_since = NULL WHERE s.archived_since IS NOT NULL"
                " AND NOT EXISTS (SELECT 1 FROM {l} l WHERE l.id = s.id AND l.space = s.space"
                " AND l.name_key = s.name_key AND l.archived_since IS NOT NULL)"
            ).format(s=ent_s, l=ent_l)
        )
        await conn.execute(
            sql.SQL(
                "UPDATE {s} s SET archived_since = l.archived_since FROM {l} l"
                " WHERE l.archived_since IS NOT NULL AND l.id = s.id AND l.space = s.space"
                " AND l.name_key = s.name_key"
                " AND s.archived_since IS DISTINCT FROM l.archived_since"
            ).format(s=ent_s, l=ent_l)
        )
    ret_s = qualified(shadow, "retrievals")
    if await has_telemetry(conn, live):
        await conn.execute(
            sql.SQL(
                "WITH same AS (SELECT s.id FROM {s} s JOIN {l} l"
                "  ON l.id = s.id AND l.space = s.space AND l.name_key = s.name_key),"
                " fresh AS (SELECT * FROM {rl} WHERE id > (SELECT coalesce(max(id), 0)"
                "  FROM {rs})),"
                " kept AS (SELECT r.id, array_agg(u.x ORDER BY u.n) AS ids"
                "  FROM fresh r CROSS JOIN unnest(r.entity_ids) WITH ORDINALITY AS u(x, n)"
                "  JOIN same ON same.id = u.x GROUP BY r.id)"
                " INSERT INTO {rs} (id, at, query_hash, mode, entity_ids, community_ids)"
                " SELECT r.id, r.at, r.query_hash, r.mode, k.ids, '{{}}' FROM fresh r"
                " JOIN kept k ON k.id = r.id ORDER BY r.id"
            ).format(s=ent_s, l=ent_l, rl=qualified(live, "retrievals"), rs=ret_s)
        )
        await conn.execute(
            sql.SQL(
                "SELECT setval(pg_get_serial_sequence(%s, 'id'), max(id)) FROM {}"
                " HAVING max(id) IS NOT NULL"
            ).format(ret_s),
            (sql.Identifier(shadow, "retrievals").as_string(conn),),
        )
    cur = await conn.execute(
        sql.SQL(
            "SELECT (SELECT count(*) FROM {} WHERE archived_since IS NOT NULL),"
            " (SELECT count(*) FROM {})"
        ).format(ent_s, ret_s)
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def carry_communities(conn: AsyncConnection[Any], live: str, shadow: str) -> int:
    """Step 4 too: the old realm's community builds — every build it kept, with its belief
    interval, so global answers now and ``as_believed_at`` an earlier instant read the same
    reports — and the build state of its ``meta`` row. A member is kept where the rebuilt
    realm has the same entity (same id, space and name); returns the communities carried.

    Communities are not in the log, so a rebuild cannot make them: rebuilding them would
    ask a model for reports again and could cluster differently. Under another embedder
    (another vector dimension) the reports cannot be carried: the rebuild notice says the
    communities are stale, and `tidegraph communities` builds them anew.
    """
    cur = await conn.execute(
        sql.SQL("SELECT (SELECT dimension FROM {}) = (SELECT dimension FROM {})").format(
            qualified(live, "meta"), qualified(shadow, "meta")
        )
    )
    row = await cur.fetchone()
    if not (row and row[0]):
        return 0
    columns = sql.SQL(
        "id, space, level, parent_id, title, summary, findings, rating, size, built_at,"
        " t_created, t_expired, embedding"
    )
    cur = await conn.execute(
        sql.SQL("INSERT INTO {s} ({c}) SELECT {c} FROM {l}").format(
            s=qualified(shadow, "communities"), l=qualified(live, "communities"), c=columns
        )
    )
    carried = cur.rowcount
    await conn.execute(
        sql.SQL(
            "INSERT INTO {sm} (community_id, entity_id) SELECT m.community_id, m.entity_id"
            " FROM {lm} m JOIN {le} l ON l.id = m.entity_id"
            " JOIN {se} s ON s.id = l.id AND s.space = l.space AND s.name_key = l.name_key"
        ).format(
            sm=qualified(shadow, "community_members"),
            lm=qualified(live, "community_members"),
            le=qualified(live, "entities"),
            se=qualified(shadow, "entities"),
        )
    )
    await conn.execute(
        sql.SQL(
            "SELECT setval(pg_get_serial_sequence(%s, 'id'), max(id)) FROM {}"
            " HAVING max(id) IS NOT NULL"
        ).format(qualified(shadow, "communities")),
        (sql.Identifier(shadow, "communities").as_string(conn),),
    )
    await conn.execute(
        sql.SQL(
            "UPDATE {s} SET communities_built_at = l.communities_built_at,"
            " communities_stale = l.communities_stale FROM {l} l"
        ).format(s=qualified(shadow, "meta"), l=qualified(live, "meta"))
    )
    return carried


async def premerge_retention(conn: AsyncConnection[Any], live: str, shadow: str) -> None:
    """Carry the retention state ahead of the swap (:func:`carry_retention`), in a
    transaction of its own, so the swap's run only has what changed since."""
    async with conn.transaction():
        await carry_retention(conn, live, shadow)


async def _has_column(conn: AsyncConnection[Any], schema: str, table: str, column: str) -> bool:
    cur = await conn.execute(
        "SELECT 1 FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = %s AND column_name = %s",
        (schema, table, column),
    )
    return await cur.fetchone() is not None


CACHES: dict[str, tuple[str, ...]] = {
    "extraction_cache": ("key", "output", "created_at"),
    "contradiction_answers": (
        "key",
        "first_text",
        "second_text",
        "prompt_version",
        "contradicts",
        "model",
        "answered_at",
    ),
}
"""The model caches a swap hands over, with their columns (keyed by ``key``)."""


def merge_cache(table: str, into: str, source: str, *, moving: bool) -> sql.Composed:
    """Copy (or move) ``source``'s cached answers into ``into``'s; a kept key stays."""
    columns = sql.SQL(", ").join(map(sql.Identifier, CACHES[table]))
    if moving:
        return sql.SQL(
            "WITH moved AS (DELETE FROM {src} RETURNING {cols})"
            " INSERT INTO {dst} ({cols}) SELECT * FROM moved ON CONFLICT (key) DO NOTHING"
        ).format(src=qualified(source, table), dst=qualified(into, table), cols=columns)
    return sql.SQL(
        "INSERT INTO {dst} ({cols}) SELECT {cols} FROM {src} ON CONFLICT (key) DO NOTHING"
    ).format(src=qualified(source, table), dst=qualified(into, table), cols=columns)


async def premerge_cache(conn: AsyncConnection[Any], live: str, shadow: str) -> int:
    """Move the shadow's cached model answers into the live caches ahead of the swap, so
    the merge under the lock (step 6) only has what was asked since. The shadow still reads
    them there (its cache reads fall through to the live realm's)."""
    await conn.execute(contradiction_answers_ddl(live))  # a live realm not opened since
    moved = 0
    for table in CACHES:
        cur = await conn.execute(merge_cache(table, live, shadow, moving=True))
        moved += cur.rowcount
    return moved
