"""The indexer: a Kafka consumer group applying document versions to realm graphs.

Per poll and partition: decode, decide each realm's records against its stored document
states (:class:`~tidegraph.indexer.decide.planner.Planner`), prepare the records to apply
ahead of the writer (:class:`~tidegraph.indexer.extraction.ahead.PrepareAhead`), then
write them strictly in log order: one transaction each when caught up (:class:`RecordUnit`,
freshness), and, when the indexer is behind — a poll brought a run of at least
``catch_up_run`` records of one realm — the whole run in one transaction with the replay's
unit of work (:class:`BatchUnit`: the same stamps, ids and changes as record by record,
DESIGN invariant 5). A run that fails is written again record by record, so the failure
policy judges the one record that failed. The partitions of a poll proceed concurrently,
each on its own connection. Positions live in
PostgreSQL (``tidegraph.store.positions``), per realm within a partition; Kafka's committed
offsets are refreshed afterwards only so standard tools can show lag.

Failure handling (DESIGN invariant 8; the policy is ``write.failures``):
* undecodable, schema-invalid or hash-mismatched records → DLQ, then the position advances;
* a record PostgreSQL refuses a value of → DLQ with the refusal, the version recorded as
  ``failed``, the position advances (``write.units``);
* retriable failures (database, model endpoint) → the partition pauses, seeks back to the
  failed record and retries after a bounded, growing backoff honouring ``Retry-After``;
* anything else → the record's realm is held at the record (fail closed, never skipped):
  its later records wait while the partition's other realms go on; it is tried again
  after the longest backoff, and ``tidegraph status`` says why it waits;
* losing the partition (rebalance, fencing) → stop at once; the new owner continues.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.consumer import metrics
from tidegraph.indexer.decide.planner import Decision, Logged, Planner
from tidegraph.indexer.extraction.ahead import PrepareAhead
from tidegraph.indexer.extraction.interfaces import Embedder
from tidegraph.indexer.extraction.prepared import PreparedDocument
from tidegraph.indexer.write.contradictions import Judge, JudgeFor
from tidegraph.indexer.write.failures import Backoff, RecordFailed, Verdict, retry_after, verdict
from tidegraph.indexer.write.units import BatchUnit, Outcome, RecordUnit
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.errors import RecordValidationError, TidegraphError
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.names import realm_schema
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import holds, positions
from tidegraph.store.errors import classify_db_error, refusal
from tidegraph.store.positions import Claim, Position, key_realm
from tidegraph.store.realms import RealmInfo, create_realm, ensure_control, open_realm, realm_exists

log = logging.getLogger("tidegraph.indexer")

Prepare = Callable[[DocumentVersion, RealmInfo], Awaitable[PreparedDocument]]
EmbedderFor = Callable[[RealmInfo], Embedder]


@dataclass(frozen=True)
class IndexerConfig:
    """How one indexer process consumes."""

    bootstrap: str
    """Kafka bootstrap servers."""
    pg_dsn: str
    """PostgreSQL connection string."""
    topic: str = "tidegraph.documents"
    """Documents topic."""
    dlq_topic: str = "tidegraph.documents.dlq"
    """Where records that can never be applied go."""
    group_id: str = "tidegraph-indexer"
    """Consumer group; positions in PostgreSQL are kept per group."""
    default_realm: RealmConfig = field(default_factory=RealmConfig)
    """Configuration of a realm first seen in a record."""
    max_poll_records: int = 256
    """Records fetched per poll."""
    prepare_concurrency: int = 8
    """Documents chunked, extracted and embedded at once."""
    backoff_initial: float = 0.5
    """First pause after a transient failure, seconds."""
    backoff_max: float = 30.0
    """Longest pause between retries, seconds; a held realm is tried again this often."""
    pool_size: int = 4
    """PostgreSQL connections."""
    catch_up_run: int = 16
    """Records of one realm fetched back to back from which they are written as one
    transaction (the indexer is behind); 0 writes every record on its own."""
    idle_in_transaction_timeout: float = 15.0
    """PostgreSQL ends a session idle this long inside a transaction: a member frozen
    mid-write (SIGSTOP, a paused VM) releases its realm locks instead of blocking the
    member that takes its partitions for as long as it stays frozen; its commit then fails
    and the record is applied once, by the new owner."""


APPLICATION_NAME = "tidegraph-indexer"
"""How the indexer's sessions name themselves, so a claim can tell them apart."""
TAKE_OVER_AFTER = 5.0
"""Seconds a claim waits for a previous owner's open write before ending its session."""


def make_pool(config: IndexerConfig) -> AsyncConnectionPool[AsyncConnection[Any]]:
    """An unopened pool of autocommit connections whose sessions PostgreSQL ends after
    ``idle_in_transaction_timeout`` idle inside a transaction (see that field)."""
    timeout_ms = int(config.idle_in_transaction_timeout * 1000)
    return AsyncConnectionPool(
        config.pg_dsn,
        min_size=1,
        max_size=config.pool_size,
        open=False,
        kwargs={
            "autocommit": True,
            "application_name": APPLICATION_NAME,
            "options": f"-c idle_in_transaction_session_timeout={timeout_ms}",
        },
    )


@dataclass
class _Owned:
    """A partition this process owns."""

    claim: Claim
    position: Position
    """As committed."""
    fetch_from: int
    """Offset the consumer was last sought to: records fetched before are dropped."""
    failures: int = 0
    resume_at: float | None = None
    """A transient failure paused the partition until then."""
    paused_for: str = ""
    """Why (said again when it resumes)."""
    held: dict[str, int] = field(default_factory=dict)
    """Realm → offset of the record it is held at."""
    retry_held_at: float | None = None
    waiting: set[str] = field(default_factory=set)
    """Realms with a row in ``tidegraph.indexer_holds``."""


@dataclass(frozen=True)
class _Item:
    """A fetched record: decoded and decided, or why it goes to the DLQ."""

    msg: ConsumerRecord[bytes, bytes]
    realm: str
    decision: Decision | None = None
    info: RealmInfo | None = None
    error: str | None = None
    error_class: str | None = None

    @property
    def quiet(self) -> bool:
        """Writes nothing but the position (and maybe the highest version seen)."""
        return self.decision is None or not self.decision.writes


@dataclass(frozen=True)
class _Run:
    """Items written in one transaction: a record that writes, records that write nothing,
    or (``catch_up``) a realm's run of records fetched back to back."""

    items: list[_Item]
    catch_up: bool = False


class Indexer:
    """Consumes ``tidegraph.documents`` and keeps realm graphs in step."""

    def __init__(
        self,
        config: IndexerConfig,
        prepare: Prepare,
        embedder_for: EmbedderFor,
        pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None,
        judge_for: JudgeFor | None = None,
    ) -> None:
        self.config = config
        self._prepare = prepare
        self._embedder_for = embedder_for
        self._judge_for: JudgeFor = judge_for or _no_judge
        self._backoff = Backoff(config.backoff_initial, config.backoff_max)
        self._owned: dict[TopicPartition, _Owned] = {}
        self._lock = asyncio.Lock()
        """Held while claiming partitions and while stopping."""
        self._partition_locks: dict[TopicPartition, asyncio.Lock] = {}
        """Held while a partition's record is in flight; revocation waits for it."""
        self._realms: dict[str, RealmInfo] = {}
        self._stop = asyncio.Event()
        self._running = asyncio.Semaphore(config.prepare_concurrency)
        self.pool = pool or make_pool(config)
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None
        self.applied = 0
        """Records whose position advanced in this process (any outcome)."""

    def stop(self) -> None:
        """Finish the record in flight, leave the group cleanly, return from ``run``."""
        self._stop.set()

    async def run(self) -> None:
        cfg = self.config
        await self.pool.open(wait=True, timeout=30)
        async with self.pool.connection() as conn:
            await ensure_control(conn)
        self.producer = AIOKafkaProducer(
            bootstrap_servers=cfg.bootstrap,
            acks="all",
            enable_idempotence=True,
            compression_type="lz4",
            max_request_size=16 * 1024 * 1024,
            **kafka_client_options(),
        )
        self.consumer = AIOKafkaConsumer(
            **kafka_client_options(),
            bootstrap_servers=cfg.bootstrap,
            group_id=cfg.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=16 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
            session_timeout_ms=30000,
            heartbeat_interval_ms=3000,
            max_poll_interval_ms=600000,
            fetch_max_wait_ms=50,
        )
        await self.producer.start()
        try:
            self.consumer.subscribe([cfg.topic], listener=_Listener(self))
            await self.consumer.start()
            try:
                await self._loop()
            finally:
                async with self._lock:
                    for tp in list(self._owned):
                        async with self._partition_lock(tp):
                            self._owned.pop(tp, None)
                await self.consumer.stop()
        finally:
            await self.producer.stop()
            await self.pool.close()

    async def _loop(self) -> None:
        """Poll, and hand each partition's records to a task of its own.

        Partitions usually carry different realms, so one's writes wait on PostgreSQL while
        another's documents are prepared. A partition with a batch in flight is paused, so
        the next poll brings nothing of it until that batch is done: log order holds and
        fetched records never pile up.
        """
        assert self.consumer is not None
        busy: dict[TopicPartition, asyncio.Task[None]] = {}
        try:
            while not self._stop.is_set():
                self._resume_due(busy)
                batch = await self.consumer.getmany(
                    timeout_ms=20 if busy else 200, max_records=self.config.max_poll_records
                )
                for tp in sorted(batch, key=lambda t: t.partition):
                    if tp in busy:  # fetched before the pause took effect
                        await busy.pop(tp)
                    self.consumer.pause(tp)
                    busy[tp] = asyncio.create_task(self._process_partition(tp, batch[tp]))
                for tp, task in list(busy.items()):
                    if task.done():
                        del busy[tp]
                        task.result()
                        self._resume_idle(tp)
                self._update_lag()
        finally:
            if busy:
                await asyncio.gather(*busy.values(), return_exceptions=True)

    # -- rebalance ---------------------------------------------------------------------

    async def on_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        assert self.consumer is not None and self.pool is not None
        if not assigned:
            return
        starts = await self.consumer.beginning_offsets(list(assigned))
        async with self._lock, self.pool.connection() as conn:
            for tp in assigned:
                claim, position = await self._claim(conn, tp, starts[tp])
                self._owned[tp] = _Owned(claim, position, position.next_offset)
                self.consumer.seek(tp, position.next_offset)
                # The consumer fetches as soon as it is assigned a partition, before this
                # claim; a batch taken meanwhile was dropped and left the partition paused.
                self.consumer.resume(tp)
                log.info(
                    "claimed %s/%d at offset %d (epoch %d)",
                    tp.topic,
                    tp.partition,
                    position.next_offset,
                    claim.epoch,
                )
        self._gauge()

    async def _claim(
        self, conn: AsyncConnection[Any], tp: TopicPartition, start: int
    ) -> tuple[Claim, Position]:
        """Claim ``tp``; a previous owner frozen inside its write transaction holds the
        position row, and its session is ended after :data:`TAKE_OVER_AFTER` (see
        ``positions.end_owners_in_the_way``)."""
        assert self.pool is not None
        claiming = asyncio.ensure_future(
            positions.claim(conn, self.config.group_id, tp.topic, tp.partition, start)
        )
        while True:
            done, _ = await asyncio.wait({claiming}, timeout=TAKE_OVER_AFTER)
            if done:
                return claiming.result()
            try:
                async with self.pool.connection() as other:
                    ended = await positions.end_owners_in_the_way(
                        other, conn.info.backend_pid, APPLICATION_NAME
                    )
            except psycopg.Error as exc:  # e.g. not allowed to end another role's session
                log.warning("%s/%d: claim waits; %s", tp.topic, tp.partition, exc)
                continue
            if ended:
                log.warning(
                    "%s/%d: ended %d session(s) of a previous owner frozen inside its write",
                    tp.topic,
                    tp.partition,
                    ended,
                )

    async def on_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        for tp in revoked:
            async with self._partition_lock(tp):  # waits for the record in flight
                self._owned.pop(tp, None)
        self._gauge()

    # -- processing --------------------------------------------------------------------

    def _decode(self, msg: ConsumerRecord[bytes, bytes]) -> _Item | tuple[str, Logged]:
        realm = _realm_label(msg)
        if msg.value is None:
            return _Item(msg, realm, error="record has no value", error_class="invalid")
        try:
            record = DocumentVersion.from_json(msg.value)
        except RecordValidationError as exc:
            return _Item(msg, realm, error=str(exc), error_class="invalid")
        if msg.key is not None and msg.key != record.realm.encode():
            return _Item(
                msg,
                realm,
                error=f"record key {msg.key!r} is not its realm {record.realm!r}",
                error_class="invalid",
            )
        if not record.hash_matches():
            return _Item(
                msg,
                record.realm,
                error=f"content_hash {record.content_hash} does not match the content",
                error_class="hash_mismatch",
            )
        when = datetime.fromtimestamp(msg.timestamp / 1000, tz=UTC)
        return record.realm, Logged(msg.offset, when, record)

    async def _process_partition(
        self, tp: TopicPartition, msgs: list[ConsumerRecord[bytes, bytes]]
    ) -> None:
        owned = self._owned.get(tp)
        if owned is None or owned.resume_at is not None or not msgs:
            return
        assert self.pool is not None and self.consumer is not None
        if msgs[0].offset < owned.fetch_from:
            # Records fetched before a seek: fetch again from where we stand.
            self.consumer.seek(tp, owned.fetch_from)
            return
        owned.fetch_from = msgs[-1].offset + 1
        pending = [
            m
            for m in msgs
            if not owned.position.settled(_realm_label(m), m.offset)
            and _realm_label(m) not in owned.held
        ]
        try:
            items = await self._plan(pending)
        except Exception as exc:  # noqa: BLE001 - judged by the failure policy
            await self._failed(tp, owned, pending[0] if pending else msgs[0], exc, single=False)
            return
        ahead = PrepareAhead(
            self._prepare_one,
            [it.decision for it in items if it.decision is not None],
            window=self.config.prepare_concurrency,
            running=self._running,
        )
        taken: dict[int, Outcome | None] = {}

        async def outcome_of(decision: Decision) -> Outcome | None:
            """Prepared once: a catch-up run written again record by record reuses it."""
            if decision.offset not in taken:
                taken[decision.offset] = await ahead.take(decision)
            return taken[decision.offset]

        queue = deque(_runs(items, self.config.catch_up_run))
        tally: dict[str, Counter[str]] = {}
        try:
            while queue:
                run = queue.popleft()
                if self._stop.is_set():
                    return
                async with self._partition_lock(tp):
                    if self._owned.get(tp) is not owned:
                        return  # revoked while we worked
                    kept = [it for it in run.items if it.realm not in owned.held]
                    if not kept:
                        continue
                    try:
                        outcomes = await self._write_run(
                            tp, owned, _Run(kept, run.catch_up), outcome_of
                        )
                        for realm, outcome in outcomes:
                            tally.setdefault(realm, Counter())[outcome] += 1
                    except Exception as exc:  # noqa: BLE001 - judged by the failure policy
                        if run.catch_up and verdict(exc) is not Verdict.LOST:
                            log.info(
                                "%s/%d: a catch-up run of %d records from offset %d failed"
                                " (%s); writing it record by record",
                                tp.topic,
                                tp.partition,
                                len(kept),
                                kept[0].msg.offset,
                                type(exc).__name__,
                            )
                            queue.extendleft(reversed(_runs(kept, 0)))
                            continue
                        first = kept[0]
                        single = len(kept) == 1
                        if single and first.decision is not None:
                            rec = first.decision.record
                            exc = (
                                RecordFailed(
                                    rec.realm,
                                    tp.topic,
                                    tp.partition,
                                    first.msg.offset,
                                    rec.doc_key,
                                    exc,
                                )
                                if not isinstance(exc, RecordFailed)
                                else exc
                            )
                        if await self._failed(tp, owned, first.msg, exc, single=single):
                            return
        finally:
            await ahead.cancel()
            if tally:
                self._log_batch(tp, owned, msgs, tally)

    def _log_batch(
        self,
        tp: TopicPartition,
        owned: _Owned,
        msgs: Sequence[ConsumerRecord[bytes, bytes]],
        tally: Mapping[str, Counter[str]],
    ) -> None:
        """One INFO line per batch: what each realm's records did, and the lag left."""
        assert self.consumer is not None
        high = self.consumer.highwater(tp)
        lag = "?" if high is None else str(max(0, high - owned.position.next_offset))
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

    def _partition_lock(self, tp: TopicPartition) -> asyncio.Lock:
        return self._partition_locks.setdefault(tp, asyncio.Lock())

    async def _plan(self, msgs: Sequence[ConsumerRecord[bytes, bytes]]) -> list[_Item]:
        """Decode every record and decide each realm's against its stored states."""
        assert self.pool is not None
        decoded = [self._decode(m) for m in msgs]
        by_realm: dict[str, list[Logged]] = {}
        for d in decoded:
            if not isinstance(d, _Item):
                by_realm.setdefault(d[0], []).append(d[1])
        decided: dict[int, tuple[RealmInfo, Decision]] = {}
        async with self.pool.connection() as conn:
            for realm, logged in by_realm.items():
                info = await self._realm(conn, realm)
                for decision in await Planner(info.schema).decide(conn, logged):
                    decided[decision.offset] = (info, decision)
        out: list[_Item] = []
        for m, d in zip(msgs, decoded, strict=True):
            if isinstance(d, _Item):
                out.append(d)
            else:
                info, decision = decided[m.offset]
                out.append(_Item(m, d[0], decision, info))
        return out

    async def _prepare_one(self, decision: Decision) -> PreparedDocument:
        started = time.perf_counter()
        doc = await self._prepare(decision.record, self._realms[decision.record.realm])
        metrics.PREPARE_SECONDS.observe(time.perf_counter() - started)
        return doc

    async def _write_run(
        self,
        tp: TopicPartition,
        owned: _Owned,
        run: _Run,
        outcome_of: Callable[[Decision], Awaitable[Outcome | None]],
    ) -> list[tuple[str, str]]:
        """Write one record that applies or deletes a version, a catch-up run, or move the
        position over a run of records that write nothing, in one transaction; count what
        happened and return it, (realm, outcome) per record."""
        assert self.pool is not None
        items = run.items
        now = owned.position
        for it in items:
            now = now.settle(it.realm, it.msg.offset, owned.held)
        first = items[0]
        by_offset = {it.msg.offset: it.msg for it in items}
        refusals: dict[int, str] = {}

        async def refused(decision: Decision, error: psycopg.Error) -> None:
            reason = f"PostgreSQL refused a value of the record: {refusal(error)}"
            refusals[decision.offset] = reason
            await self._dead_letter(by_offset[decision.offset], reason, "unstorable")

        started = time.perf_counter()
        if run.catch_up:
            assert first.info is not None
            decisions = [it.decision for it in items if it.decision is not None]
            prepared_docs = {d.offset: await outcome_of(d) for d in decisions if d.writes}
            batch = BatchUnit(
                first.info,
                self._embedder_for(first.info),
                owned.claim,
                refused,
                judge=self._judge_for(first.info),
            )
            async with self.pool.connection() as conn:
                await batch.write(conn, first.msg.offset, now, decisions, prepared_docs)
                await self._cleared(conn, tp, owned, items)
            outcomes = [
                (first.realm, _OUTCOMES.get(d.action.value, d.action.value)) for d in decisions
            ]
            metrics.CATCH_UP_RECORDS.inc(len(items))
            log.info(
                "%s/%d: caught up %d records of realm %s (offsets %d-%d) in one transaction",
                tp.topic,
                tp.partition,
                len(items),
                first.realm,
                first.msg.offset,
                items[-1].msg.offset,
            )
        elif first.quiet:
            unit = RecordUnit(owned.claim, refused)
            for it in items:
                if it.decision is None:
                    await self._dead_letter(it.msg, it.error or "", it.error_class or "invalid")
            async with self.pool.connection() as conn:
                await unit.settle(
                    conn,
                    first.msg.offset,
                    now,
                    [(it.info, it.decision) for it in items if it.decision and it.info],
                )
                await self._cleared(conn, tp, owned, items)
            outcomes = [
                (it.realm, it.decision.action.value if it.decision else "dead_lettered")
                for it in items
            ]
        else:
            assert first.decision is not None and first.info is not None
            unit = RecordUnit(owned.claim, refused, self._judge_for(first.info))
            prepared = await outcome_of(first.decision)
            async with self.pool.connection() as conn:
                result = await unit.apply(
                    conn,
                    first.info,
                    self._embedder_for(first.info),
                    now,
                    first.decision,
                    prepared,
                )
                await self._cleared(conn, tp, owned, items)
            outcome = (
                "unstorable"
                if result is None
                else {"indexed": "applied", "deleted": "deleted"}.get(result.status, result.status)
            )
            if outcome == "failed":
                _log_failed(tp, first, prepared, refusals.get(first.msg.offset))
            outcomes = [(first.realm, outcome)]
        for realm, outcome in outcomes:
            metrics.RECORDS.labels(realm, outcome).inc()
        metrics.APPLY_SECONDS.observe(time.perf_counter() - started)
        owned.position = now
        owned.failures = 0
        self.applied += len(items)
        return outcomes

    async def _dead_letter(self, msg: ConsumerRecord[bytes, bytes], error: str, kind: str) -> None:
        assert self.producer is not None
        headers = [
            ("tg-error", error[:4000].encode()),
            ("tg-error-class", kind.encode()),
            ("tg-origin", f"{msg.topic}/{msg.partition}/{msg.offset}".encode()),
        ]
        await self.producer.send_and_wait(
            self.config.dlq_topic, msg.value, key=msg.key, headers=headers
        )
        log.warning("dead-lettered %s/%d/%d: %s", msg.topic, msg.partition, msg.offset, error)

    async def _realm(self, conn: AsyncConnection[Any], realm: str) -> RealmInfo:
        info = self._realms.get(realm)
        if info is None:
            if not await realm_exists(conn, realm_schema(realm)):
                info = await create_realm(conn, realm, self.config.default_realm)
                log.info("created realm %s (%s, %s)", realm, info.extractor, info.embedder)
            else:
                info = await open_realm(conn, realm)
            self._realms[realm] = info
        return info

    # -- failures ----------------------------------------------------------------------

    async def _failed(
        self,
        tp: TopicPartition,
        owned: _Owned,
        msg: ConsumerRecord[bytes, bytes],
        exc: BaseException,
        *,
        single: bool,
    ) -> bool:
        """Apply the failure policy to ``exc``, raised by the record ``msg`` (``single``) or
        by a run of records starting there; True when the partition stops here (paused or
        lost), False when only the record's realm is held and the others go on."""
        assert self.consumer is not None
        judged = verdict(exc)
        failed = exc if isinstance(exc, RecordFailed) else None
        gone = _schema_gone(failed.cause if failed else exc)
        if judged is Verdict.HOLD and (gone or not single):
            # Not one record's: the partition waits (the longest, unless the realm's schema
            # was dropped under us — `realm delete` — and is created again on the retry).
            judged = Verdict.RETRY
        self._realms.clear()  # re-read realm state after any failure
        realm = _realm_label(msg)
        offset = msg.offset
        cause = failed.cause if failed else classify_db_error(exc)
        where = f"{tp.topic}/{tp.partition} offset {offset} (realm {realm})"
        if judged is Verdict.LOST:
            log.warning("%s: %s", where, cause)
            self._owned.pop(tp, None)
            return True
        if judged is Verdict.HOLD:
            owned.held[realm] = offset
            if owned.retry_held_at is None:
                owned.retry_held_at = time.monotonic() + self._backoff.longest
            first = realm not in owned.waiting
            log.log(
                logging.ERROR if first else logging.WARNING,
                "%s: realm held at this record, other realms go on; %s: %s;"
                " trying it again in %.1fs",
                where,
                type(cause).__name__,
                cause,
                self._backoff.longest,
                exc_info=cause if first and not isinstance(cause, TidegraphError) else None,
            )
            metrics.HELD_FAILURES.labels(realm, type(cause).__name__).inc()
            await self._note(tp, owned, realm, "held", offset, failed, cause, self._backoff.longest)
            self._gauge()
            return False
        if judged is Verdict.RETRY_NOW:
            delay = 0.0  # a replay swapped the realm in: retry against it at once
        elif verdict(exc) is Verdict.HOLD and not gone:
            delay = self._backoff.longest
        else:
            owned.failures += 1
            delay = self._backoff.delay(owned.failures, retry_after(exc))
        log.warning(
            "%s: %s: %s; partition paused, retrying in %.1fs",
            where,
            type(cause).__name__,
            cause,
            delay,
        )
        metrics.TRANSIENT_FAILURES.labels(type(cause).__name__).inc()
        if judged is Verdict.RETRY:
            await self._note(tp, owned, realm, "paused", offset, failed, cause, delay)
        self.consumer.pause(tp)
        self._seek(tp, owned, offset)
        owned.resume_at = time.monotonic() + delay
        owned.paused_for = f"{type(cause).__name__}: {cause}"
        self._gauge()
        return True

    def _seek(self, tp: TopicPartition, owned: _Owned, offset: int) -> None:
        assert self.consumer is not None
        self.consumer.seek(tp, offset)
        owned.fetch_from = offset

    async def _note(
        self,
        tp: TopicPartition,
        owned: _Owned,
        realm: str,
        kind: str,
        offset: int,
        failed: RecordFailed | None,
        cause: BaseException,
        retry_in: float,
    ) -> None:
        """Say in ``tidegraph.indexer_holds`` why ``realm`` waits (best effort: the
        database may be what failed)."""
        assert self.pool is not None
        try:
            async with self.pool.connection(timeout=2) as conn:
                await holds.put(
                    conn,
                    owned.claim.group_id,
                    tp.topic,
                    tp.partition,
                    realm,
                    kind=kind,
                    offset=offset,
                    doc_key=failed.doc_key if failed else None,
                    error_class=type(cause).__name__,
                    error=str(cause),
                    retry_in=retry_in,
                )
            owned.waiting.add(realm)
        except Exception as exc:  # noqa: BLE001 - bookkeeping never stops the indexer
            log.debug("could not record why realm %s waits: %s", realm, exc)

    async def _cleared(
        self, conn: AsyncConnection[Any], tp: TopicPartition, owned: _Owned, run: list[_Item]
    ) -> None:
        """Forget why the realms of ``run`` waited: their records are settled now."""
        for realm in sorted({it.realm for it in run} & owned.waiting):
            await holds.clear(conn, owned.claim.group_id, tp.topic, tp.partition, realm)
            owned.waiting.discard(realm)
            log.info(
                "%s/%d: realm %s goes on: its record at offset %d is settled",
                tp.topic,
                tp.partition,
                realm,
                run[0].msg.offset,
            )

    def _resume_due(self, busy: Mapping[TopicPartition, object]) -> None:
        """Resume partitions whose backoff has elapsed, and try held realms again (unless a
        batch is in flight): from the earliest held record, the records settled since
        are passed over."""
        now = time.monotonic()
        for tp, owned in list(self._owned.items()):
            if tp in busy:
                continue
            if owned.retry_held_at is not None and owned.retry_held_at <= now:
                owned.retry_held_at = None
                if owned.held:
                    log.info(
                        "%s/%d: trying held realms again from their records (%s)",
                        tp.topic,
                        tp.partition,
                        ", ".join(f"{r} at offset {o}" for r, o in sorted(owned.held.items())),
                    )
                    self._seek(tp, owned, min(owned.held.values()))
                    owned.held.clear()
                    self._realms.clear()
            if owned.resume_at is not None and owned.resume_at <= now:
                owned.resume_at = None
                log.info(
                    "%s/%d resumes at offset %d: retrying after %s",
                    tp.topic,
                    tp.partition,
                    owned.fetch_from,
                    owned.paused_for,
                )
                self._resume_idle(tp)
        self._gauge()

    def _resume_idle(self, tp: TopicPartition) -> None:
        """Fetch a partition again after its batch, unless it waits out a backoff."""
        assert self.consumer is not None
        owned = self._owned.get(tp)
        if owned is not None and owned.resume_at is None:
            self.consumer.resume(tp)

    def _gauge(self) -> None:
        metrics.PAUSED.set(sum(1 for o in self._owned.values() if o.resume_at))
        metrics.HELD.set(sum(len(o.held) for o in self._owned.values()))

    def _update_lag(self) -> None:
        assert self.consumer is not None
        for tp, owned in list(self._owned.items()):
            high = self.consumer.highwater(tp)
            if high is not None:
                lag = max(0, high - owned.position.next_offset)
                metrics.LAG.labels(tp.topic, str(tp.partition)).set(lag)


_SAID = ("applied", "noop", "stale", "failed")
"""Outcomes a batch line always counts; others (deleted, dead-lettered, unstorable) when
they happened."""


def _no_judge(info: RealmInfo) -> Judge | None:
    return None


def _counts(counts: Counter[str]) -> str:
    said = [f"{counts[o]} {o.replace('noop', 'no-op')}" for o in _SAID]
    said += [f"{n} {o.replace('_', '-')}" for o, n in sorted(counts.items()) if o not in _SAID]
    return ", ".join(said)


def _log_failed(
    tp: TopicPartition, item: _Item, prepared: Outcome | None, refused: str | None = None
) -> None:
    """A document stored as ``failed``: which, and why — in the extractor's words, or
    PostgreSQL's when it ``refused`` a value of the record (dead-lettered with it)."""
    assert item.decision is not None
    rec = item.decision.record
    reason = refused or (prepared.failure if isinstance(prepared, PreparedDocument) else None)
    log.warning(
        "%s/%d offset %d: document %r (realm %s, space %s) failed: %s",
        tp.topic,
        tp.partition,
        item.msg.offset,
        rec.doc_key,
        rec.realm,
        rec.space,
        reason or "no reason given",
    )


def _schema_gone(cause: BaseException) -> bool:
    """A realm's tables or schema missing: deleted while cached here (`realm delete`)."""
    return isinstance(cause, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName)


def _runs(items: list[_Item], catch_up_run: int) -> list[_Run]:
    """Items in log order, in units of work: a realm's records decided back to back make
    one catch-up run when there are at least ``catch_up_run`` of them (and one writes);
    otherwise each record that writes is its own run, and consecutive records that write
    nothing share one."""
    runs: list[_Run] = []
    for segment in _same_realm_segments(items):
        if 0 < catch_up_run <= len(segment) and not all(it.quiet for it in segment):
            runs.append(_Run(segment, catch_up=True))
            continue
        for item in segment:
            last = runs[-1] if runs else None
            if item.quiet and last is not None and not last.catch_up and last.items[-1].quiet:
                last.items.append(item)
            else:
                runs.append(_Run([item]))
    return runs


def _same_realm_segments(items: list[_Item]) -> list[list[_Item]]:
    """Maximal stretches of decided records of one realm (a record for the DLQ is a
    stretch of its own)."""
    segments: list[list[_Item]] = []
    for item in items:
        last = segments[-1] if segments else None
        if (
            last is not None
            and item.decision is not None
            and last[-1].decision is not None
            and last[-1].realm == item.realm
        ):
            last.append(item)
        else:
            segments.append([item])
    return segments


_OUTCOMES = {"apply": "applied", "delete": "deleted"}
"""A decision's action as the records metric names its outcome."""


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.indexer.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.indexer.on_assigned(assigned)


def _realm_label(msg: ConsumerRecord[bytes, bytes]) -> str:
    """The realm a record's key names (its position is kept under it), or
    :data:`NO_REALM`."""
    return key_realm(msg.key)
