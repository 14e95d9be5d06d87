"""What every named standby of a server has replayed: the fence a change passes before
anyone outside is told of it.

Replication is asynchronous: the primary acknowledges a commit before any standby has it,
so a standby promoted after the primary died may lack the last commits. A realm's
position rolls back with them and the indexer applies those records again — drawing the
same sequence numbers for changes that may differ (another model answer, another
belief time). A change shown before every standby had it could therefore vanish, or come
back as a different change under the same id. Whoever shows changes reads the fence first:
the primary's WAL insert position, read after the rows (any row that was visible then was
committed below it), and shows the rows only once every standby named for that server has
replayed up to it (:meth:`StandbyFence.wait`).

A named standby that is no longer in recovery was promoted. It has the rows only when it is
the very server they were read from (a multi-host DSN reaches it now): a fence names its
server by the cluster's system identifier and the postmaster's start time. Rows read from
the old primary just before a promotion may be missing on the promoted one, so they stay
fenced, and the next round reads what the new primary has. A standby that does not answer
has nothing, as far as anyone can tell: the fence holds (fail closed), and the waiting is
visible in the caller's metrics and log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection

from tidegraph.schemas import Standby

CONNECT_TIMEOUT = 2


_SERVER = (
    "(SELECT system_identifier FROM pg_control_system())::text || '@'"
    " || pg_postmaster_start_time()::text"
)


@dataclass(frozen=True)
class Fence:
    """Where the rows a reader saw end, on which server."""

    lsn: str
    """The WAL insert position (``pg_lsn`` text) read after the rows: past the commit record
    of every transaction they came from."""
    server: str
    """The server read from: its cluster's system identifier and postmaster start time."""


async def read_fence(conn: AsyncConnection[Any]) -> Fence:
    """The fence of everything ``conn`` (on a primary, outside a transaction) has seen so
    far, flushed to disk: the insert position is read in a transaction that writes a
    logical message (nothing decodes it: logical decoding passes messages of an unknown
    prefix by) and commits synchronously, and a commit that wrote WAL flushes all WAL
    below it. Without the flush a fence may point into WAL only the WAL writer flushes,
    when it next wakes (another session's asynchronous commit, a background record), and
    the standbys could not pass it until then: the feed stalled for seconds."""
    async with conn.transaction():
        await conn.execute("SET LOCAL synchronous_commit = on")
        cur = await conn.execute(
            f"SELECT pg_current_wal_insert_lsn()::text, {_SERVER},"  # noqa: S608
            " pg_logical_emit_message(true, 'tidegraph-fence', '')"
        )
        row = await cur.fetchone()
    assert row is not None  # noqa: S101 - functions always return one row
    return Fence(str(row[0]), str(row[1]))


async def fence_after_read(conn: AsyncConnection[Any]) -> Fence:
    """The fence of what ``conn`` has seen so far, on a primary or on a standby: on a
    standby its replay position (every row it showed was replayed below it, and the
    position only grows), named by that standby, so it holds for the others and for the
    standby itself once promoted; on a primary :func:`read_fence`."""
    cur = await conn.execute(
        f"SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text END, {_SERVER}"
    )
    row = await cur.fetchone()
    assert row is not None  # noqa: S101 - one row always
    if row[0] is None:
        return await read_fence(conn)
    return Fence(str(row[0]), str(row[1]))


async def has_replayed(conn: AsyncConnection[Any], fence: Fence) -> bool:
    """Whether the server behind ``conn`` (a named standby) has what ``fence`` covers: in
    recovery, replayed up to it; promoted, only when it is the server the fence names."""
    cur = await conn.execute(
        "SELECT CASE WHEN pg_is_in_recovery()"
        " THEN coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false)"
        f" ELSE {_SERVER} = %s END",
        (fence.lsn, fence.server),
    )
    row = await cur.fetchone()
    return bool(row and row[0])


class StandbyFence:
    """Asks named standbys how far they have replayed, on one connection each (made on
    first use, dropped on any error and made again next time)."""

    def __init__(self, poll: float = 0.01) -> None:
        self.poll = poll
        self._conns: dict[str, AsyncConnection[Any]] = {}

    async def behind(self, standbys: Sequence[Standby], fence: Fence) -> list[str]:
        """Labels of the standbys that have not replayed up to ``fence`` (or do not answer)."""
        lagging = []
        for standby in standbys:
            if not await self.has(standby, fence):
                lagging.append(standby.label)
        return lagging

    async def wait(self, standbys: Sequence[Standby], fence: Fence, within: float) -> list[str]:
        """Wait up to ``within`` seconds for every standby to pass ``fence``; the labels of
        those still behind (empty: the fence is passed)."""
        deadline = time.monotonic() + within
        while True:
            lagging = await self.behind(standbys, fence)
            if not lagging or time.monotonic() >= deadline:
                return lagging
            standbys = [s for s in standbys if s.label in lagging]
            await asyncio.sleep(self.poll)

    async def has(self, standby: Standby, fence: Fence) -> bool:
        """Whether ``standby`` has what ``fence`` covers; one that fails to answer has not."""
        try:
            return await has_replayed(await self._connection(standby), fence)
        except psycopg.Error:
            await self._drop(standby.label)
            return False

    async def _connection(self, standby: Standby) -> AsyncConnection[Any]:
        conn = self._conns.get(standby.label)
        if conn is None or conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                standby.dsn,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT,
                application_name="tidegraph-fence",
            )
            self._conns[standby.label] = conn
        return conn

    async def _drop(self, label: str) -> None:
        conn = self._conns.pop(label, None)
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()

    async def close(self) -> None:
        for label in list(self._conns):
            await self._drop(label)
