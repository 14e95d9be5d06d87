"""Consumer positions in PostgreSQL: the fencing half of exactly-once (DESIGN invariant 2).

A partition's row holds a :class:`Position` and an ownership epoch. Claiming a partition
bumps the epoch; every write moves the position with a compare-and-set on (position,
epoch) inside the write's own transaction. A zombie that lost the partition holds an old
epoch, so its next compare-and-set matches no row and its transaction rolls back.

Realms share partitions, and a realm can be held up on its own (a record that cannot be
applied until an operator fixes its cause) while the others go on. So a position is per
realm within a partition: ``next_offset`` is where every realm stands at least, and
``ahead`` how much further the realms that went on stand. A record is settled — applied,
skipped or dead-lettered, never to be looked at again — when its offset lies below its
realm's position (:meth:`Position.settled`); a consumer that restarts reads from
``next_offset`` and passes over what is settled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from tidegraph.store.errors import Fenced

NO_REALM = ""
"""The realm of a record whose key names none: it is settled with the partition."""


def key_realm(key: bytes | None) -> str:
    """The realm a record's key names (its position is kept under it), or :data:`NO_REALM`."""
    try:
        return key.decode() if key else NO_REALM
    except UnicodeDecodeError:
        return NO_REALM


@dataclass(frozen=True)
class Claim:
    """A partition this process owns, and the epoch it claimed it with."""

    group_id: str
    """Consumer group (or a replay's ``tidegraph-replay:<schema>``)."""
    topic: str
    partition: int
    epoch: int
    """A later claim's epoch fences this one."""


@dataclass(frozen=True)
class Position:
    """Where a consumer stands on one partition."""

    next_offset: int
    """Every record below it is settled, whatever its realm."""
    ahead: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Realm → offset it is settled up to (exclusive), for realms beyond ``next_offset``."""

    def of(self, realm: str) -> int:
        """The offset ``realm`` stands at: its records below it are settled."""
        return max(self.next_offset, self.ahead.get(realm, 0))

    def settled(self, realm: str, offset: int) -> bool:
        return offset < self.of(realm)

    def settle(self, realm: str, offset: int, held: Mapping[str, int]) -> Position:
        """The position after settling the record of ``realm`` at ``offset``, read in log
        order while the realms in ``held`` wait at the offsets given (their records from
        there on are not settled): nothing moves below the lowest of them, and the realms
        that went on beyond it are remembered in ``ahead``."""
        after = offset + 1
        floor = min([after, *held.values()])
        ahead = {r: o for r, o in {**self.ahead, realm: max(self.of(realm), after)}.items()}
        next_offset = max(self.next_offset, floor)
        return Position(
            next_offset,
            MappingProxyType({r: o for r, o in sorted(ahead.items()) if o > next_offset}),
        )


def replay_group(schema: str) -> str:
    """The consumer-positions group of a replay into ``schema``."""
    return f"tidegraph-replay:{schema}"


async def claim(
    conn: AsyncConnection[Any], group_id: str, topic: str, partition: int, start_offset: int
) -> tuple[Claim, Position]:
    """Take ownership of a partition; return our claim and where the partition stands."""
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO tidegraph.consumer_positions (group_id, topic, partition, next_offset)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (group_id, topic, partition, start_offset),
        )
        cur = await conn.execute(
            "UPDATE tidegraph.consumer_positions SET epoch = epoch + 1, updated_at = now()"
            " WHERE group_id = %s AND topic = %s AND partition = %s"
            " RETURNING next_offset, ahead, epoch",
            (group_id, topic, partition),
        )
        row = await cur.fetchone()
    assert row is not None
    return Claim(group_id, topic, partition, int(row[2])), _position(row[0], row[1])


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


async def advance(conn: AsyncConnection[Any], claim: Claim, at: int, now: Position) -> None:
    """Move the position to ``now`` over records from offset ``at`` on, inside the
    caller's transaction, or raise :class:`Fenced`.

    ``at`` may lie beyond the stored position when the log has no records in between
    (retention removed them, or transaction markers hold those offsets); never before it:
    a record below the stored position was settled already, and a later claim's epoch
    fences ours.
    """
    cur = await conn.execute(
        "UPDATE tidegraph.consumer_positions SET next_offset = %s, ahead = %s,"
        " updated_at = now() WHERE group_id = %s AND topic = %s AND partition = %s"
        " AND epoch = %s AND next_offset <= %s RETURNING 1",
        (
            now.next_offset,
            Jsonb(dict(now.ahead)),
            claim.group_id,
            claim.topic,
            claim.partition,
            claim.epoch,
            at,
        ),
    )
    if await cur.fetchone() is None:  # fetching (not rowcount) also works in pipeline mode
        raise Fenced(claim.topic, claim.partition, at)


async def read(
    conn: AsyncConnection[Any], group_id: str, topic: str, partition: int
) -> Position | None:
    """Where a group stands on a partition, ``None`` before it first claimed it."""
    cur = await conn.execute(
        "SELECT next_offset, ahead FROM tidegraph.consumer_positions"
        " WHERE group_id = %s AND topic = %s AND partition = %s",
        (group_id, topic, partition),
    )
    row = await cur.fetchone()
    return None if row is None else _position(row[0], row[1])


async def read_group(conn: AsyncConnection[Any], group_id: str, topic: str) -> dict[int, Position]:
    """Partition → position of every partition a group has claimed."""
    cur = await conn.execute(
        "SELECT partition, next_offset, ahead FROM tidegraph.consumer_positions"
        " WHERE group_id = %s AND topic = %s",
        (group_id, topic),
    )
    return {int(p): _position(o, a) for p, o, a in await cur.fetchall()}


async def applied(conn: AsyncConnection[Any], group_id: str, topic: str) -> int:
    """Records a group has applied on a topic, its partitions' next offsets summed: how
    progress is read from outside the group (benchmarks, tests). 0 while the control schema
    does not exist yet (the first indexer creates it)."""
    cur = await conn.execute("SELECT to_regclass('tidegraph.consumer_positions') IS NOT NULL")
    row = await cur.fetchone()
    if not (row and row[0]):
        return 0
    return sum(p.next_offset for p in (await read_group(conn, group_id, topic)).values())


async def place(
    conn: AsyncConnection[Any], group_id: str, topic: str, partition: int, position: Position
) -> None:
    """Start a group that has never claimed the partition at ``position`` (a swapped-in
    rebuild: the live indexer continues the realm where it ends); a claimed one is left
    alone."""
    await conn.execute(
        "INSERT INTO tidegraph.consumer_positions (group_id, topic, partition, next_offset,"
        " ahead) VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (group_id, topic, partition, position.next_offset, Jsonb(dict(position.ahead))),
    )


async def drop(conn: AsyncConnection[Any], group_id: str) -> None:
    """Forget every position of a group (a replay that is finished or abandoned)."""
    await conn.execute("DELETE FROM tidegraph.consumer_positions WHERE group_id = %s", (group_id,))


def _position(next_offset: object, ahead: object) -> Position:
    realms = ahead if isinstance(ahead, dict) else {}
    return Position(
        int(str(next_offset)),
        MappingProxyType({str(r): int(o) for r, o in sorted(realms.items())}),
    )
