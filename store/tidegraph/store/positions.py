"""Consumer group claims in PostgreSQL: the fence against a zombie of the same group.

A partition's row per group holds an ownership epoch and the group's cursor. Claiming a
partition bumps the epoch; every write of the group checks its epoch with a
compare-and-set inside the write's own transaction (:func:`advance`). A zombie that lost
the partition holds an old epoch, so its next compare-and-set matches no row and its
transaction rolls back.

What a record's realm has applied is not kept here: it belongs to the realm
(:mod:`tidegraph.store.realm_positions`), so a second group, a demo or a replay reading
the same topic passes over what is settled. The cursor only says where the group reads
from after a restart: every record below it is settled for every realm, as far as the
group knows (a held realm keeps it at its record).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from tidegraph.store.errors import Fenced


@dataclass(frozen=True)
class Claim:
    """A partition this process owns, and the epoch it claimed it with."""

    group_id: str
    """Consumer group (or a replay's ``tidegraph-replay:<schema>``)."""
    topic: str
    partition: int
    epoch: int
    """A later claim's epoch fences this one."""


def replay_group(schema: str) -> str:
    """The claim group of a replay into ``schema``."""
    return f"tidegraph-replay:{schema}"


async def claim(
    conn: AsyncConnection[Any], group_id: str, topic: str, partition: int, start_offset: int
) -> tuple[Claim, int]:
    """Take ownership of a partition; return our claim and the group's cursor on it."""
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
    return Claim(group_id, topic, partition, int(row[1])), int(row[0])


async def end_owners_in_the_way(
    conn: AsyncConnection[Any], waiting_pid: int, application_name: str
) -> int:
    """End the sessions named ``application_name`` holding a lock the session
    ``waiting_pid`` (a claim) waits for; return how many were ended.

    Such a session is a previous owner frozen inside its write transaction (SIGSTOP, a
    paused VM): Kafka gave its partitions away, and a member that is not frozen finishes
    its record before giving a partition up. Its backend waits for the client and no
    PostgreSQL timeout ends it, so the claim would wait as long as the member stays frozen.
    Ending it rolls its transaction back, position included: the new owner writes that
    record once more, and the old owner can no longer commit it.
    """
    cur = await conn.execute(
        "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a"
        " WHERE a.pid = ANY(pg_blocking_pids(%s)) AND a.application_name = %s",
        (waiting_pid, application_name),
    )
    return sum(1 for (ended,) in await cur.fetchall() if ended)


async def advance(conn: AsyncConnection[Any], claim: Claim, cursor: int) -> None:
    """Check our epoch and raise the group's cursor to ``cursor`` (never lower it), inside
    the caller's transaction, or raise :class:`Fenced`."""
    cur = await conn.execute(
        "UPDATE tidegraph.consumer_positions SET next_offset = greatest(next_offset, %s),"
        " updated_at = now() WHERE group_id = %s AND topic = %s AND partition = %s"
        " AND epoch = %s RETURNING 1",
        (cursor, claim.group_id, claim.topic, claim.partition, claim.epoch),
    )
    if await cur.fetchone() is None:  # fetching (not rowcount) also works in pipeline mode
        raise Fenced(claim.topic, claim.partition, cursor)


async def read(conn: AsyncConnection[Any], group_id: str, topic: str, partition: int) -> int | None:
    """A group's cursor on a partition, ``None`` before it first claimed it."""
    cur = await conn.execute(
        "SELECT next_offset FROM tidegraph.consumer_positions"
        " WHERE group_id = %s AND topic = %s AND partition = %s",
        (group_id, topic, partition),
    )
    row = await cur.fetchone()
    return None if row is None else int(row[0])


async def read_group(conn: AsyncConnection[Any], group_id: str, topic: str) -> dict[int, int]:
    """Partition → cursor of every partition a group has claimed (empty before the control
    schema exists)."""
    cur = await conn.execute("SELECT to_regclass('tidegraph.consumer_positions') IS NOT NULL")
    row = await cur.fetchone()
    if not (row and row[0]):
        return {}
    cur = await conn.execute(
        "SELECT partition, next_offset FROM tidegraph.consumer_positions"
        " WHERE group_id = %s AND topic = %s",
        (group_id, topic),
    )
    return {int(p): int(o) for p, o in await cur.fetchall()}


async def applied(conn: AsyncConnection[Any], group_id: str, topic: str) -> int:
    """Records a group has passed on a topic, its partitions' cursors summed: how progress
    is read from outside the group (benchmarks, tests)."""
    return sum((await read_group(conn, group_id, topic)).values())


async def drop(conn: AsyncConnection[Any], group_id: str) -> None:
    """Forget every claim of a group (a replay that is finished or abandoned)."""
    await conn.execute("DELETE FROM tidegraph.consumer_positions WHERE group_id = %s", (group_id,))
