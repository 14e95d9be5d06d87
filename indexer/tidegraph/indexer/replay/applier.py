"""Applying a realm's records to a shadow schema with the indexer's own functions.

The decision (:func:`tidegraph.indexer.decide.fold.decide`), the preparation (the pipeline the
caller passes in) and the write (:func:`tidegraph.indexer.write.writer.write_document`) are the
live indexer's, record by record in log order, each write with its own sequence number
and belief instant from the record's log-append time. So the shadow reproduces the live
realm's graph and belief history exactly (DESIGN invariant 6) — differences can only come
from a changed configuration or changed code, which is what a rebuild is for.

What differs is throughput, not meaning:

* positions: the batch's transaction moves the replay's position once, over every record
  it covers (written or not: other realms, no-ops, stale or dead-lettered versions);
* commits: a whole fetch is one transaction, with ``synchronous_commit`` off — a crash
  loses at most the last commits, and since the position commits with them, they are
  simply redone;
* round trips: the transaction is one pipeline and its records have no savepoints, so a
  record's last statements travel with the next record's first ones instead of each
  record waiting for its own to finish. When PostgreSQL refuses a value anywhere in it,
  the batch rolls back and is written again with a savepoint per record, where the
  refused version is recorded as the live indexer records it;
* stamps: the batch reads the shadow's meta row once, draws each record's sequence and
  belief instant the way the writer would (:class:`~tidegraph.indexer.write.writer.Stamp`) and
  stores the row once at the end, instead of updating it once per record;
* first versions: a record of a document the shadow has never held has nothing to
  withdraw, so the writer skips reading and withdrawing a previous version;
* decisions: document states are kept in memory once read, so the next fetch is decided
  and prepared while the current one is written;
* statistics: the shadow's tables grow from nothing within seconds, faster than autovacuum
  looks at them, and a plan chosen while a table was tiny (a hash join over a full scan
  instead of index lookups) would stay cached on the connection as the table grows. The
  applier analyses them each time the number of written records has doubled (mid-batch
  when it comes to that), which also makes the connection plan its statements again;
* plans: the write connection uses generic plans (``plan_cache_mode``, set by the
  caller). With custom plans PostgreSQL planned the relation reconciliation's statements
  again on every execution (their array parameters make a generic plan look costlier),
  about half a millisecond per record; the analyses above keep generic plans current.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql

from tidegraph.indexer.decide.fold import Action, DocState, decide, next_state
from tidegraph.indexer.decide.states import load_states
from tidegraph.indexer.extraction.interfaces import Embedder
from tidegraph.indexer.extraction.prepared import PreparedDocument, RecordPosition
from tidegraph.indexer.replay.log import Message, decode_for_realm, log_time
from tidegraph.indexer.write.writer import Stamp, write_document, write_record
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.store import positions
from tidegraph.store.errors import RealmSwapped
from tidegraph.store.realms import RealmInfo

log = logging.getLogger("tidegraph.replay")

ANALYSE_FIRST = 32
"""Written records before the shadow's statistics are first refreshed."""
GROWING_TABLES = (
    "documents",
    "chunks",
    "entities",
    "entity_aliases",
    "mentions",
    "relations",
    "relation_sources",
    "relation_history",
)
"""Tables a write looks rows up in."""

Prepare = Callable[[DocumentVersion, RealmInfo], Awaitable[PreparedDocument]]
EmbedderFor = Callable[[RealmInfo], Embedder]
Outcome = PreparedDocument | BaseException
"""A prepared document, or what preparing it raised (raised again when it is written)."""


@dataclass(frozen=True)
class ShadowPosition:
    """Where the replay's own consumer position row is, and the epoch it claimed."""

    group_id: str
    """``tidegraph-replay:<schema>``."""
    topic: str
    """Documents topic."""
    partition: int
    """The realm's partition."""
    epoch: int
    """Claimed epoch: a second replay into the same schema fences this one."""


@dataclass(frozen=True)
class Planned:
    """One record of the realm and what applying it means."""

    msg: Message
    record: DocumentVersion
    action: Action
    fresh: bool
    """The shadow held no version of the document before this record."""


@dataclass
class Batch:
    """A fetch, decided and (being) prepared."""

    first: int
    """Offset the stored position must be at before this batch."""
    end: int
    """Offset the stored position moves to after it."""
    read: int
    """Records of any realm this batch covers."""
    items: list[Planned]
    """The realm's records in it, in log order."""
    prepared: asyncio.Task[dict[int, Outcome]] | None = None


@dataclass
class Counters:
    """What the applier did so far."""

    read: int = 0
    """Records passed on the partition (any realm)."""
    realm_records: int = 0
    """Records of the realm among them."""
    written: int = 0
    """Records that wrote (applied or deleted a document version)."""


class ShadowApplier:
    """Decides, prepares and writes batches of one partition into one shadow schema."""

    def __init__(
        self,
        conn: AsyncConnection[Any],
        info: RealmInfo,
        position: ShadowPosition,
        next_offset: int,
        prepare: Prepare,
        embedder_for: EmbedderFor,
        *,
        concurrency: int = 8,
    ) -> None:
        self.conn = conn
        self.info = info
        self.position = position
        self.next_offset = next_offset
        """Offset the stored position is at (committed)."""
        self.counters = Counters()
        self._prepare = prepare
        self._embedder_for = embedder_for
        self._sem = asyncio.Semaphore(concurrency)
        self._states: dict[tuple[str, str], DocState | None] = {}
        self._analysed_at = 0
        """``counters.written`` when the shadow's statistics were last refreshed."""

    def forget(self) -> None:
        """Drop remembered document states (after a rollback they may be ahead), and the
        statistics refresh, which a rollback undoes as well."""
        self._states.clear()
        self._analysed_at = 0

    async def plan(self, first: int, end: int, msgs: list[Message]) -> Batch:
        """Decide every record of the realm in ``msgs`` and start preparing the applies."""
        decoded = [(m, decode_for_realm(m, self.info.realm)) for m in msgs]
        unknown = {
            (r.space, r.doc_key)
            for _, r in decoded
            if r is not None and (r.space, r.doc_key) not in self._states
        }
        if unknown:
            stored = await load_states(self.conn, self.info.schema, unknown)
            self._states.update({key: stored.get(key) for key in unknown})
        items: list[Planned] = []
        for msg, rec in decoded:
            if rec is None:
                continue
            key = (rec.space, rec.doc_key)
            state = self._states.get(key)
            action = decide(rec.op, rec.content_hash, rec.source_version, state)
            new_state = next_state(action, rec.content_hash, rec.source_version, state)
            if new_state is not None:
                self._states[key] = new_state
            items.append(Planned(msg, rec, action, fresh=state is None))
        batch = Batch(first, end, end - first, items)
        todo = [it for it in items if it.action is Action.APPLY]
        if todo:
            batch.prepared = asyncio.create_task(self._prepare_all(todo))
        return batch

    async def _prepare_all(self, todo: list[Planned]) -> dict[int, Outcome]:
        async def one(item: Planned) -> tuple[int, Outcome]:
            async with self._sem:
                try:
                    return item.msg.offset, await self._prepare(item.record, self.info)
                except BaseException as exc:  # noqa: BLE001 - raised when written, in order
                    return item.msg.offset, exc

        return dict(await asyncio.gather(*(one(it) for it in todo)))

    async def write(self, batch: Batch) -> None:
        """Write the batch in one transaction; the stored position ends at ``batch.end``.

        First as one pipeline without a savepoint per record, so a record's last statements
        travel with the next record's first ones; when PostgreSQL refuses anything in it,
        the batch rolls back and is written again one savepoint per record, where a refused
        value is recorded like the live indexer records it (``write_record``) and any other
        failure names its record.
        """
        if batch.first != self.next_offset:
            raise RuntimeError(f"batch starts at {batch.first}, position is {self.next_offset}")
        prepared = await batch.prepared if batch.prepared is not None else {}
        written: int | None = None
        if not any(isinstance(v, BaseException) for v in prepared.values()):
            analysed_at = self._analysed_at
            try:
                async with self.conn.transaction(), self.conn.pipeline():
                    written = await self._write_items(batch, prepared, savepoints=False)
            except psycopg.Error as exc:
                self._analysed_at = analysed_at  # the rollback took the statistics too
                log.info(
                    "replay batch at offset %d: %s; writing it again one savepoint per record",
                    batch.first,
                    type(exc).__name__,
                )
        if written is None:
            async with self.conn.transaction():
                written = await self._write_items(batch, prepared, savepoints=True)
        self.next_offset = batch.end
        self.counters.read += batch.read
        self.counters.realm_records += len(batch.items)
        self.counters.written += written

    async def _write_items(
        self, batch: Batch, prepared: dict[int, Outcome], *, savepoints: bool
    ) -> int:
        """The batch's records, its meta row and its position, in the caller's transaction;
        returns how many records wrote."""
        embedder = self._embedder_for(self.info)
        meta = await BatchMeta.read(self.conn, self.info)
        written = 0
        for item in batch.items:
            if item.action not in (Action.APPLY, Action.DELETE):
                continue
            doc = prepared.get(item.msg.offset) if item.action is Action.APPLY else None
            offset = item.msg.offset
            pos = RecordPosition(
                self.position.group_id,
                self.position.topic,
                self.position.partition,
                offset,
                self.position.epoch,
                log_time(item.msg),
            )
            rec = item.record
            try:
                if savepoints:
                    result = await write_record(
                        self.conn,
                        self.info,
                        pos,
                        embedder,
                        doc,
                        space=rec.space,
                        doc_key=rec.doc_key,
                        content_hash=rec.content_hash,
                        source_version=rec.source_version,
                        advance=False,
                        stamp=meta.next(pos.log_time),
                        fresh=item.fresh,
                    )
                else:
                    assert not isinstance(doc, BaseException)
                    result = await write_document(
                        self.conn,
                        self.info,
                        pos,
                        embedder,
                        doc,
                        space=rec.space,
                        doc_key=rec.doc_key,
                        source_version=rec.source_version,
                        advance=False,
                        stamp=meta.next(pos.log_time),
                        fresh=item.fresh,
                        within=True,
                    )
            except BaseException as exc:
                exc.add_note(f"writing offset {offset} ({rec.doc_key!r})")
                raise
            if result is not None:
                meta.drawn()
            written += 1
            if self.counters.written + written >= max(ANALYSE_FIRST, 2 * self._analysed_at):
                await self._analyse(self.counters.written + written)
        await meta.store(self.conn, self.info)
        if batch.end != batch.first:
            p = self.position
            await positions.advance(
                self.conn,
                p.group_id,
                p.topic,
                p.partition,
                batch.first,
                p.epoch,
                through=batch.end - 1,
            )
        return written

    async def _analyse(self, written: int) -> None:
        """Refresh the planner's statistics of the tables every write reads. Inside the
        batch's transaction: ANALYZE counts the transaction's own rows, and the plans of
        this connection are made again from the next statement on."""
        tables = sql.SQL(", ").join(sql.Identifier(self.info.schema, t) for t in GROWING_TABLES)
        await self.conn.execute(sql.SQL("ANALYZE {}").format(tables))
        self._analysed_at = written


@dataclass
class BatchMeta:
    """The shadow's meta row through one batch: what the writer's own draw would read and
    set (see ``writer._begin``), kept here and stored once."""

    seq: int
    last_write_at: datetime | None
    built: bool
    """Communities were built at some point."""
    stale: bool
    """The feed has said that they are stale since."""
    pending: Stamp | None = None
    changed: bool = False

    @classmethod
    async def read(cls, conn: AsyncConnection[Any], info: RealmInfo) -> BatchMeta:
        cur = await conn.execute(
            sql.SQL(
                "SELECT seq, last_write_at, communities_built_at IS NOT NULL,"
                " communities_stale, swapped_out FROM {} FOR UPDATE"
            ).format(sql.Identifier(info.schema, "meta"))
        )
        seq, last, built, stale, swapped_out = (await cur.fetchall())[0]
        if swapped_out:
            raise RealmSwapped(info.realm)
        return cls(int(seq), last, bool(built), bool(stale))

    def next(self, log_time: datetime) -> Stamp:
        """The stamp of the next write (taken only if :meth:`drawn` follows)."""
        bt = log_time if self.last_write_at is None else max(self.last_write_at, log_time)
        self.pending = Stamp(self.seq + 1, bt, self.built and not self.stale)
        return self.pending

    def drawn(self) -> None:
        assert self.pending is not None
        self.seq, self.last_write_at = self.pending.seq, self.pending.belief_time
        self.stale = self.built
        self.pending, self.changed = None, True

    async def store(self, conn: AsyncConnection[Any], info: RealmInfo) -> None:
        if not self.changed:
            return
        await conn.execute(
            sql.SQL("UPDATE {} SET seq = %s, last_write_at = %s, communities_stale = %s").format(
                sql.Identifier(info.schema, "meta")
            ),
            (self.seq, self.last_write_at, self.stale),
        )
