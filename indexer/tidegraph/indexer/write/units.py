"""The two units of work that drive :func:`~tidegraph.indexer.write.writer.apply_version`.

* :class:`RecordUnit` — the live indexer when caught up: each record its own transaction
  and pipeline, its stamp drawn by the database (:class:`LiveSequencer`), committed as
  soon as it is written (freshness);
* :class:`BatchUnit` — a replay (and a run of records written set-wise): one transaction
  and one pipeline for many records, stamps drawn in memory (:class:`BatchSequencer`);
  when PostgreSQL refuses anything, the batch is written again one savepoint per record.

A write that needs the model's answers about the residue (``contradictions``) is rolled
back, the unit asks its judge outside any transaction, and the record (or batch) is
written again.

Both settle their records in the transaction that writes (:class:`Settlement`): the
group's claim is checked first (a zombie writes nothing), then each realm's own position
moves over its records, or the transaction is refused because another reader settled
them first. Both turn a value
PostgreSQL refuses into the recorded failure through :func:`_write_guarded`: the refusal is
reported (``on_refused``: the live indexer dead-letters the record) and a ``failed``
version is written in its place; when even that is refused, only the highest version seen
is kept. Such a record is never retried: the same value would be refused again.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection

from tidegraph.indexer.decide import Action, Decision
from tidegraph.indexer.extraction import Embedder, PreparedDocument
from tidegraph.indexer.write.contradictions import AnswersNeeded, Judge, answering
from tidegraph.indexer.write.failures import RecordFailed
from tidegraph.indexer.write.sequencer import BatchSequencer, LiveSequencer, Sequencer
from tidegraph.indexer.write.writer import (
    Version,
    WriteResult,
    apply_version,
    refused_version,
    remember_version,
)
from tidegraph.store import (
    AlreadySettled,
    Claim,
    Fenced,
    Mark,
    RealmInfo,
    RealmSwapped,
    is_unstorable,
    positions,
    realm_positions,
    refusal,
)

Outcome = PreparedDocument | BaseException | None
"""What preparing a record gave: its document, what preparing raised (raised again when it
is written, in order), or ``None`` for a record that prepares nothing (a delete)."""
OnRefused = Callable[[Decision, psycopg.Error], Awaitable[None]]
"""Told of a record whose value PostgreSQL refused, before its failure is recorded."""
Scope = Callable[[], contextlib.AbstractAsyncContextManager[Sequencer]]


@dataclass(frozen=True)
class Settlement:
    """What a transaction settles: the records of one run, for the group and each realm."""

    claim: Claim
    """The group's claim on the partition: checked first, the fence against a zombie of
    the group, when the transaction stores the group's cursor."""
    cursor: int | None
    """The group's cursor after the run (where it reads from after a restart); ``None``
    for a run written on another server than the one keeping the group's claims
    (``main``): its realm's position alone settles it, exactly once whoever writes, and
    the cursor is stored on ``main`` after it."""
    marks: tuple[Mark, ...]
    """Each realm's (or key's) position over its records in the run."""

    @classmethod
    def of_realm(cls, claim: Claim, info: RealmInfo, first: int, end: int) -> Settlement:
        """Records ``first`` (included) to ``end`` (excluded) of one realm's reader (a
        replay): the group's cursor and the realm's position both move to ``end``."""
        return cls(claim, end, (Mark(info.realm, info.schema, first, end),))

    async def take(self, conn: AsyncConnection[Any]) -> None:
        """Settle inside the caller's transaction, before anything is written: raises
        :class:`Fenced` (the group lost the partition), :class:`AlreadySettled` (another
        reader applied the records first) or :class:`RealmSwapped`."""
        if self.cursor is not None:
            await positions.advance(conn, self.claim, self.cursor)
        await realm_positions.settle(conn, self.claim.topic, self.claim.partition, self.marks)


def version_of(decision: Decision, doc: PreparedDocument | None) -> Version:
    """The version a decided record writes (``doc`` is its prepared document)."""
    rec = decision.record
    state = decision.state
    if decision.action is Action.APPLY and doc is None:
        raise ValueError(f"offset {decision.offset}: a version to apply without its document")
    if rec.source_version is not None and "\0" in rec.source_version:
        # Refused like any value PostgreSQL cannot store; the version is not remembered.
        raise psycopg.DataError("source_version cannot contain NUL (0x00) characters")
    return Version(
        rec.space,
        rec.doc_key,
        doc if decision.action is Action.APPLY else None,
        state.source_version if state is not None else None,
        decision.previous,
        decision.offset,
    )


async def remember(conn: AsyncConnection[Any], info: RealmInfo, decision: Decision) -> None:
    """Keep the highest version seen of a record that writes nothing else."""
    if decision.version_moved and decision.state is not None:
        rec = decision.record
        await remember_version(
            conn, info, rec.space, rec.doc_key, decision.state, decision.logged.log_time
        )


async def _write_guarded(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    embedder: Embedder,
    decision: Decision,
    outcome: Outcome,
    scope: Scope,
    on_refused: OnRefused,
) -> WriteResult | None:
    """Write one decided record within ``scope`` (a transaction or savepoint holding the
    stamp's sequencer), recording a refused value as described in the module docstring;
    ``None`` when nothing but the highest version seen could be kept."""
    rec = decision.record

    async def write(version: Version) -> WriteResult:
        async with scope() as sequencer:
            stamp = await sequencer.draw(conn, decision.logged.log_time)
            return await apply_version(conn, info, embedder, version, stamp)

    try:
        if isinstance(outcome, BaseException):
            raise outcome
        return await write(version_of(decision, outcome))
    except psycopg.Error as exc:
        if not is_unstorable(exc):
            raise
        await on_refused(decision, exc)
        deleted = Version(rec.space, rec.doc_key, None, None, decision.previous, decision.offset)
        fallback = refused_version(deleted, rec.version_hash, refusal(exc))
    if fallback is not None:
        try:
            return await write(fallback)
        except psycopg.Error as exc:
            if not is_unstorable(exc):
                raise
    return None


def _failed(claim: Claim, decision: Decision, exc: BaseException) -> BaseException:
    """``exc`` with the record's position as typed fields (fencing, swaps and records
    settled by another reader pass as they are: they concern the partition or the realm,
    not the record)."""
    if isinstance(exc, Fenced | RealmSwapped | AlreadySettled | RecordFailed | AnswersNeeded):
        return exc
    rec = decision.record
    return RecordFailed(rec.realm, claim.topic, claim.partition, decision.offset, rec.doc_key, exc)


async def _no_refusal(decision: Decision, error: psycopg.Error) -> None:
    return None


@dataclass
class RecordUnit:
    """One record, one transaction: the live indexer's unit of work (a partition carries
    several realms, so the realm comes with each record)."""

    on_refused: OnRefused = _no_refusal
    judge: Judge | None = None
    """Asked about the residue when the record's realm asks the model (``contradictions``)."""

    @contextlib.asynccontextmanager
    async def transaction(
        self, conn: AsyncConnection[Any], info: RealmInfo, settlement: Settlement
    ) -> AsyncIterator[Sequencer]:
        """One record's transaction and pipeline, with the sequencer its stamp is drawn
        from; the record is settled in it, first."""
        async with conn.transaction(), conn.pipeline():
            # Settled first: a zombie, or a reader that comes second, writes nothing.
            await settlement.take(conn)
            yield LiveSequencer(info)

    async def settle(
        self,
        conn: AsyncConnection[Any],
        settlement: Settlement,
        quiet: Sequence[tuple[RealmInfo, Decision]] = (),
    ) -> None:
        """Settle records that write nothing (no-op, stale, dead-lettered), keeping their
        versions."""
        async with conn.transaction():
            await settlement.take(conn)
            for info, decision in quiet:
                await remember(conn, info, decision)

    async def apply(
        self,
        conn: AsyncConnection[Any],
        info: RealmInfo,
        embedder: Embedder,
        settlement: Settlement,
        decision: Decision,
        outcome: Outcome,
    ) -> WriteResult | None:
        """Write one record that applies or deletes a version, settling it with it."""

        def scope() -> contextlib.AbstractAsyncContextManager[Sequencer]:
            return self.transaction(conn, info, settlement)

        async def attempt() -> WriteResult | None:
            return await _write_guarded(
                conn, info, embedder, decision, outcome, scope, self.on_refused
            )

        try:
            result = await answering(conn, info, self.judge, attempt)
            if result is None:
                await self.settle(conn, settlement, [(info, decision)])
        except BaseException as exc:
            raise _failed(settlement.claim, decision, exc) from exc
        return result


@dataclass
class BatchUnit:
    """Many records, one transaction: the replay's unit of work."""

    info: RealmInfo
    embedder: Embedder
    on_refused: OnRefused = _no_refusal
    after_write: Callable[[AsyncConnection[Any], int], Awaitable[None]] | None = None
    """Called after each written record with how many the batch wrote so far, in its
    transaction (the replay refreshes the statistics of a fast-growing schema there)."""
    judge: Judge | None = None
    """Asked about the residue when the realm asks the model (``contradictions``)."""

    async def write(
        self,
        conn: AsyncConnection[Any],
        settlement: Settlement,
        decisions: Sequence[Decision],
        outcomes: Mapping[int, Outcome],
    ) -> int:
        """Write ``decisions`` (a realm's records in log order, their outcomes by offset)
        and settle them; returns how many records wrote.

        First as one pipeline without a savepoint per record, so a record's last statements
        travel with the next record's first ones; when PostgreSQL refuses anything in it,
        the batch rolls back and is written again one savepoint per record. A batch that
        needs the model's answers is rolled back, and written again once they are in.
        """

        async def attempt() -> int:
            if not any(isinstance(o, BaseException) for o in outcomes.values()):
                with contextlib.suppress(psycopg.Error):
                    async with conn.transaction(), conn.pipeline():
                        return await self._write(
                            conn, settlement, decisions, outcomes, guarded=False
                        )
            async with conn.transaction():
                return await self._write(conn, settlement, decisions, outcomes, guarded=True)

        return await answering(conn, self.info, self.judge, attempt)

    async def _write(
        self,
        conn: AsyncConnection[Any],
        settlement: Settlement,
        decisions: Sequence[Decision],
        outcomes: Mapping[int, Outcome],
        *,
        guarded: bool,
    ) -> int:
        await settlement.take(conn)  # settled before anything is written
        sequencer = await BatchSequencer.open(conn, self.info)
        opened = sequencer.meta

        @contextlib.asynccontextmanager
        async def savepoint() -> AsyncIterator[Sequencer]:
            before = sequencer.meta
            try:
                async with conn.transaction():
                    yield sequencer
            except BaseException:
                sequencer.undo(before)
                raise

        written = 0
        for decision in decisions:
            if not decision.writes:
                await remember(conn, self.info, decision)
                continue
            outcome = outcomes.get(decision.offset)
            try:
                if guarded:
                    result = await _write_guarded(
                        conn,
                        self.info,
                        self.embedder,
                        decision,
                        outcome,
                        savepoint,
                        self.on_refused,
                    )
                    if result is None:
                        await remember(conn, self.info, decision)
                else:
                    assert not isinstance(outcome, BaseException)
                    stamp = await sequencer.draw(conn, decision.logged.log_time)
                    await apply_version(
                        conn, self.info, self.embedder, version_of(decision, outcome), stamp
                    )
            except BaseException as exc:
                if not guarded and isinstance(exc, psycopg.Error):
                    raise  # the batch is written again, guarded
                raise _failed(settlement.claim, decision, exc) from exc
            written += 1
            if self.after_write is not None:
                await self.after_write(conn, written)
        await sequencer.close(conn, opened)
        return written
