"""Commit sequence numbers and belief instants (DESIGN invariants 6 and 7).

Every write of a realm draws, under the realm's lock (its ``meta`` row), the next commit
sequence number and its belief instant: the later of the realm's last belief instant and
the record's log-append time, so belief time never runs backwards even when the log's
clock does. The first write after a community build also carries the notice that the
communities are stale, once.

Two sequencers draw by that one rule (:func:`next_stamp`):

* :class:`LiveSequencer` — one write per transaction: the draw is an ``UPDATE … RETURNING``
  of the meta row, which also takes the lock and is undone with the transaction;
* :class:`BatchSequencer` — many writes per transaction (a replay batch, a catching-up
  indexer): the row is read and locked once, each draw is made in memory, and the row is
  stored once at the end. Within one transaction every update of the row leaves a row
  version the next update must step over, which costs more as the batch grows.

A contract test holds the two equal over the same draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from psycopg import AsyncConnection, sql

from tidegraph.store import RealmInfo, RealmSwapped


@dataclass(frozen=True)
class Stamp:
    """What one write is committed under."""

    seq: int
    """Commit sequence number: gap-free per realm."""
    belief_time: datetime
    """When the realm came to believe what the write says (non-decreasing)."""
    communities_stale: bool
    """First write since communities were built: the feed says once that they are stale."""


@dataclass(frozen=True)
class Meta:
    """The realm's sequencing state (its ``meta`` row)."""

    seq: int
    last_write_at: datetime | None
    built: bool
    """Communities were built at some point."""
    stale: bool
    """The feed has said that they are stale since."""


def next_stamp(meta: Meta, log_time: datetime) -> tuple[Stamp, Meta]:
    """The rule: the stamp of the next write, and the meta row after it."""
    bt = log_time if meta.last_write_at is None else max(meta.last_write_at, log_time)
    stamp = Stamp(meta.seq + 1, bt, meta.built and not meta.stale)
    return stamp, Meta(stamp.seq, bt, meta.built, meta.built)


class Sequencer(Protocol):
    """Draws the stamp of each write made inside the caller's transaction."""

    async def draw(self, conn: AsyncConnection[Any], log_time: datetime) -> Stamp:
        """The next stamp; the draw is part of the transaction (or savepoint) it is made
        in, and undone with it (:meth:`BatchSequencer.undo` for the in-memory one)."""
        ...


@dataclass
class LiveSequencer:
    """One draw per transaction, by the database."""

    info: RealmInfo

    async def draw(self, conn: AsyncConnection[Any], log_time: datetime) -> Stamp:
        cur = await conn.execute(
            sql.SQL(
                "UPDATE {meta} m SET seq = m.seq + 1,"
                " last_write_at = greatest(coalesce(m.last_write_at, %(t)s), %(t)s),"
                " communities_stale = m.communities_built_at IS NOT NULL"
                " FROM (SELECT communities_stale AS was FROM {meta} FOR UPDATE) old"
                " RETURNING m.seq, m.last_write_at,"
                " m.communities_built_at IS NOT NULL AND NOT old.was, m.swapped_out"
            ).format(meta=sql.Identifier(self.info.schema, "meta")),
            {"t": log_time},
        )
        rows = await cur.fetchall()
        seq, bt, stale, swapped_out = rows[0]
        if swapped_out:
            raise RealmSwapped(self.info.realm)
        return Stamp(int(seq), bt, bool(stale))


@dataclass
class BatchSequencer:
    """Many draws per transaction, in memory: :meth:`open` reads and locks the row,
    :meth:`close` stores it."""

    info: RealmInfo
    meta: Meta

    @classmethod
    async def open(cls, conn: AsyncConnection[Any], info: RealmInfo) -> BatchSequencer:
        """Lock the realm's meta row for the transaction and read it; refuses a schema a
        replay swapped out."""
        cur = await conn.execute(
            sql.SQL(
                "SELECT seq, last_write_at, communities_built_at IS NOT NULL,"
                " communities_stale, swapped_out FROM {} FOR UPDATE"
            ).format(sql.Identifier(info.schema, "meta"))
        )
        seq, last, built, stale, swapped_out = (await cur.fetchall())[0]
        if swapped_out:
            raise RealmSwapped(info.realm)
        return cls(info, Meta(int(seq), last, bool(built), bool(stale)))

    async def draw(self, conn: AsyncConnection[Any], log_time: datetime) -> Stamp:
        stamp, self.meta = next_stamp(self.meta, log_time)
        return stamp

    def undo(self, to: Meta) -> None:
        """Forget the draws since ``to`` (a savepoint they were made under rolled back)."""
        self.meta = to

    async def close(self, conn: AsyncConnection[Any], opened: Meta) -> None:
        """Store the row, unless nothing was drawn since ``opened``."""
        if self.meta == opened:
            return
        await conn.execute(
            sql.SQL("UPDATE {} SET seq = %s, last_write_at = %s, communities_stale = %s").format(
                sql.Identifier(self.info.schema, "meta")
            ),
            (self.meta.seq, self.meta.last_write_at, self.meta.stale),
        )
