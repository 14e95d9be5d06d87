"""Consumer positions in PostgreSQL: the fencing half of exactly-once (invariant 2).

A partition's row holds the next offset to apply and an ownership epoch. Claiming a
partition bumps the epoch; every apply advances the offset with a compare-and-set on
(offset, epoch) inside the record's own transaction. A zombie that lost the partition
holds an old epoch, so its next CAS matches no row and its transaction rolls back.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from tidegraph.store.errors import Fenced


async def claim(
    conn: AsyncConnection[Any], group_id: str, topic: str, partition: int, start_offset: int
) -> tuple[int, int]:
    """Take ownership of a partition; return (next offset to apply, our epoch)."""
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO tidegraph.consumer_positions (group_id, topic, partition, next_offset)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (group_id, topic, partition, start_offset),
        )
        cur = await conn.execute(
            "UPDATE tidegraph.consumer_positions SET epoch = epoch + 1, updated_at = now()"
            " WHERE group_id = %s AND topic = %s AND partition = %s"
            " RETURNING next_offset, epoch",
            (group_id, topic, partition),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def advance(
    conn: AsyncConnection[Any],
    group_id: str,
    topic: str,
    partition: int,
    offset: int,
    epoch: int,
    *,
    through: int | None = None,
) -> None:
    """Move the position past ``offset`` (or past ``through``, for a run of records that
    write nothing), inside the caller's transaction, or raise Fenced.

    ``offset`` may lie beyond the stored position when the log has no records in between
    (retention removed them, or transaction markers hold those offsets); never before it.
    """
    last = offset if through is None else through
    cur = await conn.execute(
        "UPDATE tidegraph.consumer_positions SET next_offset = %s, updated_at = now()"
        " WHERE group_id = %s AND topic = %s AND partition = %s"
        " AND next_offset <= %s AND epoch = %s RETURNING next_offset",
        (last + 1, group_id, topic, partition, offset, epoch),
    )
    if await cur.fetchone() is None:  # fetching (not rowcount) also works in pipeline mode
        raise Fenced(topic, partition, offset)
