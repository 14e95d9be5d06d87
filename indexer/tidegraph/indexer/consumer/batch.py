"""One partition's fetched records, from the poll to their writes.

In order: admit each record (:mod:`~tidegraph.indexer.decide.admission`), pass over what
its realm has settled already and what waits behind a held realm, decide each realm's
records against its stored document states (:class:`~tidegraph.indexer.decide.planner.
Planner`), prepare the records to apply ahead of the writer
(:class:`~tidegraph.indexer.extraction.ahead.PrepareAhead`), then write them in runs, in
log order (:mod:`~tidegraph.indexer.write.runs`), each run settling its records for each
realm in its own transaction on the realm's server — and for the group, on ``main``,
which keeps the group's claims. A failed run goes to the failure policy
(:mod:`~tidegraph.indexer.consumer.failures`); a realm whose server does not answer waits
from its first record while the others go on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tidegraph.indexer.consumer import metrics
from tidegraph.indexer.consumer.failures import FailurePolicy
from tidegraph.indexer.consumer.partition import Partition
from tidegraph.indexer.consumer.realms import RealmCache
from tidegraph.indexer.decide import Admitted, Decision, Logged, Message, Planner, Refused, admit
from tidegraph.indexer.extraction import Embedder, PrepareAhead, PreparedDocument
from tidegraph.indexer.write import (
    Item,
    Judge,
    Outcome,
    Run,
    RunWriter,
    Settlement,
    as_record_failure,
    fallback,
    runs,
)
from tidegraph.schemas import MAIN, DocumentVersion
from tidegraph.store import Cluster, RealmInfo, ServerUnavailable, key_realm, positions

log = logging.getLogger("tidegraph.indexer")

Prepare = Callable[[DocumentVersion, RealmInfo], Awaitable[PreparedDocument]]
T = TypeVar("T")


@dataclass
class BatchProcessor:
    """Processes a partition's fetched records (one batch at a time per partition)."""

    consumer: AIOKafkaConsumer
    producer: AIOKafkaProducer
    cluster: Cluster
    realms: RealmCache
    embedder_for: Callable[[RealmInfo], Embedder]
    judge_for: Callable[[RealmInfo], Judge | None]
    policy: FailurePolicy
    prepare: Prepare
    running: asyncio.Semaphore
    """Documents prepared at once, across partitions."""
    window: int
    """How far preparation runs ahead of the writer."""
    catch_up_run: int
    owner: Callable[[TopicPartition], Partition | None]
    """The partition as this process owns it now (``None`` once revoked)."""
    lock: Callable[[TopicPartition], asyncio.Lock]
    """Held while a run is in flight; revocation waits for it."""
    stopping: asyncio.Event
    dlq_topic: str
    applied: int = 0
    """Records settled in this process (any outcome)."""

    async def process(self, tp: TopicPartition, msgs: list[Message]) -> None:
        part = self.owner(tp)
        if part is None or part.resume_at is not None or not msgs:
            return
        if msgs[0].offset < part.fetch_from:
            self.consumer.seek(tp, part.fetch_from)  # fetched before a seek: fetch again
            return
        part.fetch_from = msgs[-1].offset + 1
        by_offset = {m.offset: m for m in msgs}
        try:
            admitted = {m.offset: admit(m) for m in msgs}
            firsts: dict[str, int] = {}
            for a in admitted.values():
                firsts.setdefault(_key(a), _offset(a))
            for key, first in sorted(firsts.items()):
                if key not in part.held:
                    learning = part.stands.learn(self.cluster, key, self.realms.find)
                    await self._unless_away(tp, part, {key: first}, learning)
            pending = [
                a
                for a in admitted.values()
                if _key(a) not in part.held and not part.stands.settled(_key(a), _offset(a))
            ]
            items = await self._plan(tp, part, pending)
        except Exception as exc:  # noqa: BLE001 - judged by the failure policy
            first = msgs[0].offset
            await self.policy.failed(tp, part, first, key_realm(msgs[0].key), exc, single=False)
            return
        infos = {it.offset: it.info for it in items if it.info is not None}

        async def prepare_one(decision: Decision) -> PreparedDocument:
            started = time.perf_counter()
            doc = await self.prepare(decision.record, infos[decision.offset])
            metrics.PREPARE_SECONDS.observe(time.perf_counter() - started)
            return doc

        ahead = PrepareAhead(
            prepare_one,
            [it.decision for it in items if it.decision is not None],
            window=self.window,
            running=self.running,
        )
        taken: dict[int, Outcome] = {}

        async def outcome_of(decision: Decision) -> Outcome:
            """Prepared once: a catch-up run written again record by record reuses it."""
            if decision.offset not in taken:
                taken[decision.offset] = await ahead.take(decision)
            return taken[decision.offset]

        async def dead_letter(offset: int, error: str, error_class: str) -> None:
            await self._dead_letter(by_offset[offset], error, error_class)

        writer = RunWriter(self.embedder_for, self.judge_for, dead_letter)
        tally: dict[str, Counter[str]] = {}
        try:
            done = await self._write(tp, part, items, writer, outcome_of, tally)
            if done and self.owner(tp) is part:
                await self._pass_over(part, msgs[-1].offset)
        finally:
            await ahead.cancel()
            if tally:
                self._log_batch(tp, part, msgs, tally)

    async def _plan(
        self, tp: TopicPartition, part: Partition, pending: Sequence[Admitted | Refused]
    ) -> list[Item]:
        """Decide every admitted record against its realm's stored states, creating the
        realms first seen here."""
        by_realm: dict[str, list[Logged]] = {}
        for a in pending:
            if isinstance(a, Admitted):
                by_realm.setdefault(a.realm, []).append(a.logged)
        decided: dict[int, tuple[RealmInfo, Decision]] = {}
        for realm, logged in by_realm.items():
            deciding = self._decide(part, realm, logged)
            got = await self._unless_away(tp, part, {realm: logged[0].offset}, deciding)
            for info, decision in got or []:
                decided[decision.offset] = (info, decision)
        out: list[Item] = []
        for a in pending:
            key = _key(a)
            if key in part.held:
                continue  # its server went away while deciding
            if isinstance(a, Refused):
                out.append(
                    Item(
                        _offset(a),
                        a.key,
                        error=a.error,
                        error_class=a.error_class,
                        server=part.stands.server(key),
                    )
                )
            else:
                info, decision = decided[a.logged.offset]
                out.append(Item(a.logged.offset, a.realm, decision, info, server=info.server))
        return out

    async def _decide(
        self, part: Partition, realm: str, logged: list[Logged]
    ) -> list[tuple[RealmInfo, Decision]]:
        info = await self.realms.open(realm)
        if part.stands.schema(realm) != info.schema:
            await part.stands.hold(self.cluster, info)  # created just now
        async with self.cluster.connection(info.server) as conn:
            decisions = await Planner(info.schema).decide(conn, logged)
        return [(info, d) for d in decisions]

    async def _unless_away(
        self, tp: TopicPartition, part: Partition, firsts: dict[str, int], work: Awaitable[T]
    ) -> T | None:
        """``work`` on the realms ``firsts``; ``None`` when their server (not ``main``) does
        not answer: they wait from their first records (see the failure policy)."""
        try:
            return await work
        except ServerUnavailable as exc:
            if exc.server == MAIN:
                raise
            await self.policy.server_down(tp, part, exc.server, firsts, exc)
            return None

    async def _write(
        self,
        tp: TopicPartition,
        part: Partition,
        items: list[Item],
        writer: RunWriter,
        outcome_of: Callable[[Decision], Awaitable[Outcome]],
        tally: dict[str, Counter[str]],
    ) -> bool:
        """Write the items' runs in log order; False when the partition stopped (paused,
        lost, stopping)."""
        queue = deque(runs(items, self.catch_up_run))
        while queue:
            run = queue.popleft()
            if self.stopping.is_set():
                return False
            async with self.lock(tp):
                if self.owner(tp) is not part:
                    return False  # revoked while we worked
                kept = tuple(it for it in run.items if it.key not in part.held)
                if not kept:
                    continue
                run = Run(kept, run.catch_up)
                try:
                    for key, outcome in await self._write_run(tp, part, run, writer, outcome_of):
                        tally.setdefault(key, Counter())[outcome] += 1
                except Exception as exc:  # noqa: BLE001 - judged by the failure policy
                    smaller = fallback(run, exc)
                    if smaller is not None:
                        log.info(
                            "%s/%d: a catch-up run of %d records from offset %d failed (%s);"
                            " writing it record by record",
                            tp.topic,
                            tp.partition,
                            len(run.items),
                            run.first.offset,
                            type(exc).__name__,
                        )
                        queue.extendleft(reversed(smaller))
                        continue
                    failure = as_record_failure(run, tp.topic, tp.partition, exc)
                    firsts: dict[str, int] = {}
                    for it in run.items:
                        firsts.setdefault(it.key, it.offset)
                    if await self.policy.failed(
                        tp,
                        part,
                        run.first.offset,
                        run.first.key,
                        failure,
                        single=len(run.items) == 1,
                        server=run.first.server,
                        firsts=firsts,
                    ):
                        return False
        return True

    async def _write_run(
        self,
        tp: TopicPartition,
        part: Partition,
        run: Run,
        writer: RunWriter,
        outcome_of: Callable[[Decision], Awaitable[Outcome]],
    ) -> list[tuple[str, str]]:
        """Write one run and settle it; count and return what each record did.

        The run's documents are waited for before a connection is taken: preparing them
        reads the extraction cache through the same pool, so writers holding every
        connection while they waited (one per busy partition) left the documents they
        waited for unable to read it."""
        for it in run.items:
            if it.decision is not None and it.decision.writes:
                await outcome_of(it.decision)
        started = time.perf_counter()
        server = run.first.server
        marks = part.stands.mark([(it.key, it.offset) for it in run.items])
        # The group's cursor moves with the run where the claims are, else after the batch.
        cursor = part.cursor_after(run.items[-1].offset) if server == MAIN else None
        settlement = Settlement(part.claim, cursor, marks)
        async with self.cluster.connection(server) as conn:
            outcomes, why = await writer.write(conn, run, settlement, outcome_of)
        await self.policy.cleared(tp, part, {it.key for it in run.items}, run.first.offset)
        part.stands.moved(marks)
        if cursor is not None:
            part.cursor = cursor
        part.failures = 0
        part.server_failures.pop(server, None)
        if run.catch_up:
            metrics.CATCH_UP_RECORDS.inc(len(run.items))
            log.info(
                "%s/%d: caught up %d records of realm %s (offsets %d-%d) in one transaction",
                tp.topic,
                tp.partition,
                len(run.items),
                run.first.key,
                run.first.offset,
                run.items[-1].offset,
            )
        for key, outcome in outcomes:
            metrics.RECORDS.labels(key, outcome).inc()
            if outcome == "failed":
                _log_failed(tp, run.first, why)
        metrics.APPLY_SECONDS.observe(time.perf_counter() - started)
        self.applied += len(run.items)
        return outcomes

    async def _pass_over(self, part: Partition, last: int) -> None:
        """Store the group's cursor past the records the batch passed over (settled by
        their realms already) or wrote on other servers than ``main``, when no write
        stored it."""
        cursor = part.cursor_after(last)
        if cursor <= part.cursor:
            return
        async with self.cluster.connection(MAIN) as conn, conn.transaction():
            await positions.advance(conn, part.claim, cursor)
        part.cursor = cursor

    async def _dead_letter(self, msg: Message, error: str, kind: str) -> None:
        headers = [
            ("tg-error", error[:4000].encode()),
            ("tg-error-class", kind.encode()),
            ("tg-origin", f"{msg.topic}/{msg.partition}/{msg.offset}".encode()),
        ]
        await self.producer.send_and_wait(self.dlq_topic, msg.value, key=msg.key, headers=headers)
        log.warning("dead-lettered %s/%d/%d: %s", msg.topic, msg.partition, msg.offset, error)

    def _log_batch(
        self,
        tp: TopicPartition,
        part: Partition,
        msgs: Sequence[Message],
        tally: Mapping[str, Counter[str]],
    ) -> None:
        """One INFO line per batch: what each realm's records did, and the lag left."""
        high = self.consumer.highwater(tp)
        lag = "?" if high is None else str(max(0, high - part.cursor))
        realms = "; ".join(
            f"realm {realm or '(none)'} " + _counts(counts)
            for realm, counts in sorted(tally.items())
        )
        log.info(
            "batch %s/%d offsets %d-%d: %s; lag %s",
            tp.topic,
            tp.partition,
            msgs[0].offset,
            msgs[-1].offset,
            realms,
            lag,
        )


def _key(a: Admitted | Refused) -> str:
    return a.realm if isinstance(a, Admitted) else a.key


def _offset(a: Admitted | Refused) -> int:
    return a.logged.offset if isinstance(a, Admitted) else a.offset


_SAID = ("applied", "noop", "stale", "failed")
"""Outcomes a batch line always counts; others (deleted, dead-lettered, unstorable) when
they happened."""


def _counts(counts: Counter[str]) -> str:
    said = [f"{counts[o]} {o.replace('noop', 'no-op')}" for o in _SAID]
    said += [f"{n} {o.replace('_', '-')}" for o, n in sorted(counts.items()) if o not in _SAID]
    return ", ".join(said)


def _log_failed(tp: TopicPartition, item: Item, reason: str | None) -> None:
    """A document stored as ``failed``: which, and why — in the extractor's words, or
    PostgreSQL's refusal of a value (the reason the dead-lettered record carries)."""
    assert item.decision is not None
    rec = item.decision.record
    log.warning(
        "%s/%d offset %d: document %r (realm %s, space %s) failed: %s",
        tp.topic,
        tp.partition,
        item.offset,
        rec.doc_key,
        rec.realm,
        rec.space,
        reason or "no reason given",
    )
