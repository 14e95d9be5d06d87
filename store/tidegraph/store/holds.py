"""Records the indexer stopped at, for operators (``tidegraph status``).

A row per (group, partition, realm) the indexer waits on: ``paused`` while a transient
failure (database, model endpoint) is retried, ``held`` when trying again cannot help
until the cause is fixed (the realm stops at the record; other realms go on). The row goes
when the realm's record is settled. Bookkeeping only: the positions decide what is
applied, these rows explain why something is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection


@dataclass(frozen=True)
class Hold:
    """Why a realm's records wait on a partition."""

    group_id: str
    topic: str
    partition: int
    realm: str
    kind: str
    """``paused`` (retried after a backoff) or ``held`` (waits for a fix)."""
    offset: int
    doc_key: str | None
    error_class: str
    error: str
    since: datetime
    retry_at: datetime | None


async def put(
    conn: AsyncConnection[Any],
    group_id: str,
    topic: str,
    partition: int,
    realm: str,
    *,
    kind: str,
    offset: int,
    doc_key: str | None,
    error_class: str,
    error: str,
    retry_in: float,
) -> None:
    """Record (or refresh) why ``realm`` waits; ``since`` stays the first failure's."""
    await conn.execute(
        "INSERT INTO tidegraph.indexer_holds (group_id, topic, partition, realm, kind,"
        " record_offset, doc_key, error_class, error, retry_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, now() + %s * interval '1 second')"
        " ON CONFLICT (group_id, topic, partition, realm) DO UPDATE SET kind = excluded.kind,"
        " record_offset = excluded.record_offset, doc_key = excluded.doc_key,"
        " error_class = excluded.error_class, error = excluded.error,"
        " retry_at = excluded.retry_at,"
        " since = CASE WHEN indexer_holds.record_offset = excluded.record_offset"
        "  THEN indexer_holds.since ELSE now() END",
        (
            group_id,
            topic,
            partition,
            realm,
            kind,
            offset,
            doc_key,
            error_class,
            error[:2000],
            retry_in,
        ),
    )


async def clear(
    conn: AsyncConnection[Any], group_id: str, topic: str, partition: int, realm: str
) -> None:
    await conn.execute(
        "DELETE FROM tidegraph.indexer_holds"
        " WHERE group_id = %s AND topic = %s AND partition = %s AND realm = %s",
        (group_id, topic, partition, realm),
    )


async def listed(conn: AsyncConnection[Any], group_id: str | None = None) -> list[Hold]:
    """Every recorded hold (of one group), oldest first."""
    cur = await conn.execute(
        "SELECT group_id, topic, partition, realm, kind, record_offset, doc_key, error_class,"
        " error, since, retry_at FROM tidegraph.indexer_holds"
        " WHERE %s::text IS NULL OR group_id = %s ORDER BY since, partition, realm",
        (group_id, group_id),
    )
    return [Hold(*row) for row in await cur.fetchall()]
