"""Applying a realm's records to a shadow schema with the indexer's own rules.

The decision (:class:`~tidegraph.indexer.decide.planner.Planner`), the preparation
(:class:`~tidegraph.indexer.extraction.ahead.PrepareAhead` over the pipeline the caller
passes in) and the write (:func:`~tidegraph.indexer.write.writer.apply_version`) are the
live indexer's, record by record in log order, each write with its own sequence number and
belief instant from the record's log-append time. So the shadow reproduces the live
realm's graph and belief history exactly (DESIGN invariant 6) — differences can only come
from a changed configuration or changed code, which is what a rebuild is for.

What differs is the unit of work (:class:`~tidegraph.indexer.write.units.BatchUnit`), not
meaning:

* positions: the batch's transaction moves the shadow's own position once, over every
  record it covers (written or not: other realms, no-ops, stale or dead-lettered
  versions), after checking the replay's claim (another replay process fences it);
* commits: a whole fetch is one transaction, with ``synchronous_commit`` off — a crash
  loses at most the last commits, and since the position commits with them, they are
  simply redone;
* round trips and stamps: see ``BatchUnit`` and ``BatchSequencer``;
* decisions: the planner keeps document states once read, so the next fetch is decided
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.indexer.decide import Decision, Message, Planner
from tidegraph.indexer.extraction import Embedder, PrepareAhead, PreparedDocument
from tidegraph.indexer.replay.log import admitted_to
from tidegraph.indexer.write import BatchUnit, Judge, Settlement
from tidegraph.schemas import DocumentVersion
from tidegraph.store import Claim, RealmInfo

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
    "entity_sources",
    "entity_history",
)
"""Tables a write looks rows up in."""

Prepare = Callable[[DocumentVersion, RealmInfo], Awaitable[PreparedDocument]]
EmbedderFor = Callable[[RealmInfo], Embedder]


@dataclass
class Batch:
    """A fetch, decided and (being) prepared."""

    first: int
    """Offset the stored position must be at before this batch."""
    end: int
    """Offset the stored position moves to after it."""
    read: int
    """Records of any realm this batch covers."""
    decisions: list[Decision]
    """The realm's records in it, in log order."""
    ahead: PrepareAhead


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
        claim: Claim,
        next_offset: int,
        prepare: Prepare,
        embedder_for: EmbedderFor,
        *,
        concurrency: int = 8,
        judge: Judge | None = None,
    ) -> None:
        self.conn = conn
        self.info = info
        self.claim = claim
        self.next_offset = next_offset
        """Offset the stored position is at (committed)."""
        self.counters = Counters()
        self._prepare = prepare
        self._running = asyncio.Semaphore(concurrency)
        self._planner = Planner(info.schema)
        self._unit = BatchUnit(info, embedder_for(info), after_write=self._written, judge=judge)
        self._analysed_at = 0
        """``counters.written`` when the shadow's statistics were last refreshed."""

    def forget(self) -> None:
        """Drop remembered document states (after a rollback they may be ahead), and the
        statistics refresh, which a rollback undoes as well."""
        self._planner.forget()
        self._analysed_at = 0

    async def plan(self, first: int, end: int, msgs: list[Message]) -> Batch:
        """Decide every record of the realm in ``msgs`` and start preparing the applies."""
        logged = [lg for m in msgs if (lg := admitted_to(m, self.info.realm)) is not None]
        decisions = await self._planner.decide(self.conn, logged)

        async def prepare(decision: Decision) -> PreparedDocument:
            return await self._prepare(decision.record, self.info)

        ahead = PrepareAhead(
            prepare, decisions, window=max(1, len(decisions)), running=self._running
        )
        return Batch(first, end, end - first, decisions, ahead)

    async def write(self, batch: Batch) -> None:
        """Write the batch in one transaction; the stored position ends at ``batch.end``."""
        if batch.first != self.next_offset:
            raise RuntimeError(f"batch starts at {batch.first}, position is {self.next_offset}")
        outcomes = await batch.ahead.all()
        analysed_at = self._analysed_at
        try:
            settlement = Settlement.of_realm(self.claim, self.info, batch.first, batch.end)
            written = await self._unit.write(self.conn, settlement, batch.decisions, outcomes)
        except BaseException:
            self._analysed_at = analysed_at  # the rollback took the statistics too
            raise
        self.next_offset = batch.end
        self.counters.read += batch.read
        self.counters.realm_records += len(batch.decisions)
        self.counters.written += written

    async def _written(self, conn: AsyncConnection[Any], in_batch: int) -> None:
        """After each written record: refresh the planner's statistics of the tables every
        write reads once the written records doubled. Inside the batch's transaction:
        ANALYZE counts the transaction's own rows, and the plans of this connection are
        made again from the next statement on."""
        written = self.counters.written + in_batch
        if written >= max(ANALYSE_FIRST, 2 * self._analysed_at):
            tables = sql.SQL(", ").join(sql.Identifier(self.info.schema, t) for t in GROWING_TABLES)
            await conn.execute(sql.SQL("ANALYZE {}").format(tables))
            self._analysed_at = written
