"""Units of work for a poll's records: which records one transaction writes, and with what.

Records of a partition are written strictly in log order, in runs (:func:`runs`):

* a record that applies or deletes a version is its own run, written by a
  :class:`~tidegraph.indexer.write.units.RecordUnit` when the indexer is caught up —
  committed as soon as it is written (freshness);
* records that write nothing (no-ops, stale versions, dead-lettered records) share a run
  that only settles them and keeps the versions they raise;
* when the indexer is behind — a poll brought at least ``catch_up_run`` records of one
  realm back to back — they are written in catch-up runs of ``catch_up_run`` records, each
  one transaction by the replay's :class:`~tidegraph.indexer.write.units.BatchUnit` (the
  same stamps, ids and changes as record by record, DESIGN invariant 5). Runs of a bounded
  size rather than one for the whole stretch, because a run is written once all its
  records are prepared: with a model in the path, a poll's worth of documents written
  only after the last of them was extracted left every model call idle while they were
  written, and the next poll waited for that write.

A catch-up run that fails is written again record by record (:func:`fallback`), so the
failure policy judges the one record that failed. :class:`RunWriter` writes a run with
its unit and says what each record did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection

from tidegraph.indexer.decide import Decision
from tidegraph.indexer.extraction import Embedder, PreparedDocument
from tidegraph.indexer.write.contradictions import Judge
from tidegraph.indexer.write.failures import RecordFailed, Verdict, verdict
from tidegraph.indexer.write.units import BatchUnit, Outcome, RecordUnit, Settlement
from tidegraph.schemas import MAIN
from tidegraph.store import RealmInfo, refusal


@dataclass(frozen=True)
class Item:
    """A fetched record: decided, or why it goes to the dead-letter topic."""

    offset: int
    key: str
    """The realm the record is filed under (its position's key)."""
    decision: Decision | None = None
    info: RealmInfo | None = None
    error: str | None = None
    error_class: str | None = None
    server: str = MAIN
    """The server keeping the key's position: a run's items share one."""

    @property
    def quiet(self) -> bool:
        """Writes nothing but its position (and maybe the highest version seen)."""
        return self.decision is None or not self.decision.writes


@dataclass(frozen=True)
class Run:
    """Items written in one transaction."""

    items: tuple[Item, ...]
    catch_up: bool = False

    @property
    def first(self) -> Item:
        return self.items[0]


def runs(items: Sequence[Item], catch_up_run: int) -> list[Run]:
    """Items in log order, in units of work: a realm's records decided back to back make
    catch-up runs of ``catch_up_run`` records (the last one what is left) when there are
    at least ``catch_up_run`` of them (and one writes); otherwise each record that writes
    is its own run, and consecutive records that write nothing share one when their
    positions are kept on one server."""
    out: list[list[Item]] = []
    catch_up: list[bool] = []
    for segment in _same_realm_segments(items):
        if 0 < catch_up_run <= len(segment) and not all(it.quiet for it in segment):
            for start in range(0, len(segment), catch_up_run):
                out.append(list(segment[start : start + catch_up_run]))
                catch_up.append(True)
            continue
        for item in segment:
            last = out[-1][-1] if out else None
            if (
                item.quiet
                and last is not None
                and not catch_up[-1]
                and last.quiet
                and last.server == item.server
            ):
                out[-1].append(item)
            else:
                out.append([item])
                catch_up.append(False)
    return [Run(tuple(r), c) for r, c in zip(out, catch_up, strict=True)]


def _same_realm_segments(items: Sequence[Item]) -> list[list[Item]]:
    """Maximal stretches of decided records of one realm (a record for the dead-letter
    topic is a stretch of its own)."""
    segments: list[list[Item]] = []
    for item in items:
        last = segments[-1] if segments else None
        if (
            last is not None
            and item.decision is not None
            and last[-1].decision is not None
            and last[-1].key == item.key
        ):
            last.append(item)
        else:
            segments.append([item])
    return segments


def fallback(run: Run, exc: BaseException) -> list[Run] | None:
    """The runs a failed catch-up run is written again as — record by record — unless the
    partition is lost (then nothing is written again here); ``None`` for a run that is
    already as small as it gets."""
    if not run.catch_up or verdict(exc) is Verdict.LOST:
        return None
    return runs(run.items, 0)


def as_record_failure(run: Run, topic: str, partition: int, exc: BaseException) -> BaseException:
    """``exc`` of a one-record run, with the record's position as typed fields."""
    first = run.first
    if len(run.items) != 1 or first.decision is None or isinstance(exc, RecordFailed):
        return exc
    rec = first.decision.record
    return RecordFailed(rec.realm, topic, partition, first.offset, rec.doc_key, exc)


OUTCOMES = {"apply": "applied", "delete": "deleted"}
"""A decision's action as the records metric names its outcome."""

DeadLetter = Callable[[int, str, str], Awaitable[None]]
"""``dead_letter(offset, error, error_class)``: send the record at ``offset`` to the
dead-letter topic with its reason."""
OutcomeOf = Callable[[Decision], Awaitable[Outcome]]
"""What preparing a decided record gave (prepared once, reused by a fallback)."""


@dataclass
class RunWriter:
    """Writes a run with the unit of work it needs; returns (realm, outcome) per record."""

    embedder_for: Callable[[RealmInfo], Embedder]
    judge_for: Callable[[RealmInfo], Judge | None]
    dead_letter: DeadLetter

    async def write(
        self,
        conn: AsyncConnection[Any],
        run: Run,
        settlement: Settlement,
        outcome_of: OutcomeOf,
    ) -> tuple[list[tuple[str, str]], str | None]:
        """Write ``run`` settling it as ``settlement`` says; also returns why the one record
        failed, when it did (logged by the caller): the extractor's reason, or PostgreSQL's
        refusal of a value, as dead-lettered."""
        refusals: dict[int, str] = {}

        async def refused(decision: Decision, error: psycopg.Error) -> None:
            reason = f"PostgreSQL refused a value of the record: {refusal(error)}"
            refusals[decision.offset] = reason
            await self.dead_letter(decision.offset, reason, "unstorable")

        first = run.first
        if run.catch_up:
            assert first.info is not None
            decisions = [it.decision for it in run.items if it.decision is not None]
            prepared = {d.offset: await outcome_of(d) for d in decisions if d.writes}
            batch = BatchUnit(
                first.info,
                self.embedder_for(first.info),
                refused,
                judge=self.judge_for(first.info),
            )
            await batch.write(conn, settlement, decisions, prepared)
            return [
                (first.key, OUTCOMES.get(d.action.value, d.action.value)) for d in decisions
            ], None
        if first.quiet:
            for it in run.items:
                if it.decision is None:
                    await self.dead_letter(it.offset, it.error or "", it.error_class or "invalid")
            quiet = [(it.info, it.decision) for it in run.items if it.decision and it.info]
            await RecordUnit(refused).settle(conn, settlement, quiet)
            return [
                (it.key, it.decision.action.value if it.decision else "dead_lettered")
                for it in run.items
            ], None
        assert first.decision is not None and first.info is not None
        outcome = await outcome_of(first.decision)
        unit = RecordUnit(refused, self.judge_for(first.info))
        result = await unit.apply(
            conn, first.info, self.embedder_for(first.info), settlement, first.decision, outcome
        )
        said = (
            "unstorable"
            if result is None
            else {"indexed": "applied", "deleted": "deleted"}.get(result.status, result.status)
        )
        failure = outcome.failure if isinstance(outcome, PreparedDocument) else None
        return [(first.key, said)], refusals.get(first.offset, failure)
