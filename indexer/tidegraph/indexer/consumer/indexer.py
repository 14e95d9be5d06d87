"""The indexer: a Kafka consumer group applying document versions to realm graphs.

Per poll and partition: decode, decide (no-op / stale / apply / delete) against the stored
document states, prepare the records to apply concurrently (bounded), then write them one
transaction each, strictly in log order. The partitions of a poll proceed concurrently,
each on its own connection. Offsets live in PostgreSQL (``positions.py``);
Kafka's committed offsets are refreshed afterwards only so standard tools can show lag.

Failure handling (DESIGN invariant 8):
* undecodable, schema-invalid or hash-mismatched records → DLQ, then the position advances;
* a record PostgreSQL refuses a value of (a NUL character in its title, a key too long for
  its index) → DLQ with the refusal, the version recorded as ``failed``, the position
  advances: retrying would be refused the same way and hold up the partition for good;
* retriable failures (database, model endpoint) → the partition pauses, seeks back to the
  failed record and retries after a bounded, growing backoff; nothing advances;
* losing the partition (rebalance, fencing) → stop at once; the new owner continues.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.consumer import metrics
from tidegraph.indexer.decide.fold import Action, DocState, decide, next_state
from tidegraph.indexer.decide.states import load_states
from tidegraph.indexer.extraction.interfaces import Embedder
from tidegraph.indexer.extraction.prepared import PreparedDocument, RecordPosition
from tidegraph.indexer.write.writer import advance_only, write_record
from tidegraph.schemas._validation import RecordValidationError
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.errors import TidegraphError
from tidegraph.schemas.names import realm_schema
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import positions
from tidegraph.store.errors import Fenced, RealmSwapped, classify_db_error, refusal
from tidegraph.store.realms import RealmInfo, create_realm, ensure_control, open_realm

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
    """Longest pause between retries, seconds."""
    pool_size: int = 4
    """PostgreSQL connections."""


@dataclass
class _Owned:
    epoch: int
    next_offset: int | None = None
    failures: int = 0
    resume_at: float | None = None


@dataclass(frozen=True)
class _Item:
    msg: ConsumerRecord[bytes, bytes]
    action: Action | None
    """``None`` means dead-letter."""
    record: DocumentVersion | None = None
    error: str | None = None
    error_class: str | None = None
    info: RealmInfo | None = None
    """The realm as planned: the cache may be cleared while other partitions work."""


class Indexer:
    """Consumes ``tidegraph.documents`` and keeps realm graphs in step."""

    def __init__(
        self,
        config: IndexerConfig,
        prepare: Prepare,
        embedder_for: EmbedderFor,
        pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None,
    ) -> None:
        self.config = config
        self._prepare = prepare
        self._embedder_for = embedder_for
        self._owned: dict[TopicPartition, _Owned] = {}
        self._lock = asyncio.Lock()
        """Held while claiming partitions and while stopping."""
        self._partition_locks: dict[TopicPartition, asyncio.Lock] = {}
        """Held while a partition's record is in flight; revocation waits for it."""
        self._realms: dict[str, RealmInfo] = {}
        self._stop = asyncio.Event()
        self._sem = asyncio.Semaphore(config.prepare_concurrency)
        self.pool = pool or AsyncConnectionPool(
            config.pg_dsn,
            min_size=1,
            max_size=config.pool_size,
            open=False,
            kwargs={"autocommit": True},
        )
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
        )
        self.consumer = AIOKafkaConsumer(
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
                next_offset, epoch = await positions.claim(
                    conn, self.config.group_id, tp.topic, tp.partition, starts[tp]
                )
                self._owned[tp] = _Owned(epoch, next_offset)
                self.consumer.seek(tp, next_offset)
                # The consumer fetches as soon as it is assigned a partition, before this
                # claim; a batch taken meanwhile was dropped and left the partition paused.
                self.consumer.resume(tp)
                log.info(
                    "claimed %s/%d at offset %d (epoch %d)",
                    tp.topic,
                    tp.partition,
                    next_offset,
                    epoch,
                )
        metrics.PAUSED.set(sum(1 for o in self._owned.values() if o.resume_at))

    async def on_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        for tp in revoked:
            async with self._partition_lock(tp):  # waits for the record in flight
                self._owned.pop(tp, None)
        metrics.PAUSED.set(sum(1 for o in self._owned.values() if o.resume_at))

    # -- processing --------------------------------------------------------------------

    def _decode(self, msg: ConsumerRecord[bytes, bytes]) -> _Item:
        if msg.value is None:
            return _Item(msg, None, error="record has no value", error_class="invalid")
        try:
            record = DocumentVersion.from_json(msg.value)
        except RecordValidationError as exc:
            return _Item(msg, None, error=str(exc), error_class="invalid")
        if msg.key is not None and msg.key != record.realm.encode():
            return _Item(
                msg,
                None,
                error=f"record key {msg.key!r} is not its realm {record.realm!r}",
                error_class="invalid",
            )
        if not record.hash_matches():
            return _Item(
                msg,
                None,
                error=f"content_hash {record.content_hash} does not match the content",
                error_class="hash_mismatch",
            )
        return _Item(msg, Action.NOOP, record)

    async def _process_partition(
        self, tp: TopicPartition, msgs: list[ConsumerRecord[bytes, bytes]]
    ) -> None:
        owned = self._owned.get(tp)
        if owned is None or owned.resume_at is not None or not msgs:
            return
        assert self.pool is not None and self.consumer is not None
        if owned.next_offset is not None and msgs[0].offset < owned.next_offset:
            # Records fetched before a seek: fetch again from where we stand.
            self.consumer.seek(tp, owned.next_offset)
            return
        try:
            items = await self._plan([self._decode(m) for m in msgs])
        except BaseException as exc:  # noqa: BLE001 - classified below
            await self._pause(tp, msgs[0].offset, exc)
            return
        ahead = _PrepareAhead(self._prepare_one, items, self.config.prepare_concurrency)
        try:
            for group in _position_runs(items):
                if self._stop.is_set():
                    return
                async with self._partition_lock(tp):
                    if self._owned.get(tp) is not owned:
                        return  # revoked while we worked
                    try:
                        if len(group) > 1 or group[0].action in (Action.NOOP, Action.STALE):
                            await self._skip(tp, owned, group)
                        else:
                            await self._apply(tp, owned, group[0], await ahead.take(group[0]))
                    except Fenced as exc:
                        log.warning("%s", exc)
                        self._owned.pop(tp, None)
                        return
                    except BaseException as exc:  # noqa: BLE001 - classified in _pause
                        await self._pause(tp, group[0].msg.offset, exc)
                        return
                owned.failures = 0
                owned.next_offset = group[-1].msg.offset + 1
        finally:
            ahead.cancel()

    def _partition_lock(self, tp: TopicPartition) -> asyncio.Lock:
        return self._partition_locks.setdefault(tp, asyncio.Lock())

    async def _plan(self, decoded: list[_Item]) -> list[_Item]:
        """Decide every decodable record against stored state, in log order."""
        assert self.pool is not None
        keys: dict[str, set[tuple[str, str]]] = {}
        for it in decoded:
            if it.record is not None:
                keys.setdefault(it.record.realm, set()).add((it.record.space, it.record.doc_key))
        states: dict[tuple[str, str, str], DocState] = {}
        infos: dict[str, RealmInfo] = {}
        async with self.pool.connection() as conn:
            for realm, docs in keys.items():
                infos[realm] = info = await self._realm(conn, realm)
                stored = await load_states(conn, info.schema, docs)
                states.update({(realm, s, k): state for (s, k), state in stored.items()})
        out: list[_Item] = []
        for it in decoded:
            rec = it.record
            if rec is None:
                out.append(it)
                continue
            key = (rec.realm, rec.space, rec.doc_key)
            state = states.get(key)
            action = decide(rec.op, rec.content_hash, rec.source_version, state)
            new_state = next_state(action, rec.content_hash, rec.source_version, state)
            if new_state is not None:
                states[key] = new_state
            out.append(_Item(it.msg, action, rec, info=infos[rec.realm]))
        return out

    async def _prepare_one(self, item: _Item) -> PreparedDocument | BaseException:
        """Chunk, extract and embed one record; a failure is returned, raised in order."""
        assert item.record is not None and item.info is not None
        async with self._sem:
            started = time.perf_counter()
            try:
                doc = await self._prepare(item.record, item.info)
            except BaseException as exc:  # noqa: BLE001 - surfaced when applied in order
                return exc
            metrics.PREPARE_SECONDS.observe(time.perf_counter() - started)
            return doc

    async def _skip(self, tp: TopicPartition, owned: _Owned, group: list[_Item]) -> None:
        """Move the position over a run of no-op and stale records in one transaction."""
        assert self.pool is not None
        first, last = group[0].msg, group[-1].msg
        pos = RecordPosition(
            self.config.group_id,
            tp.topic,
            tp.partition,
            first.offset,
            owned.epoch,
            datetime.fromtimestamp(first.timestamp / 1000, tz=UTC),
        )
        started = time.perf_counter()
        async with self.pool.connection() as conn:
            await advance_only(conn, pos, through=last.offset)
        metrics.APPLY_SECONDS.observe(time.perf_counter() - started)
        for item in group:
            assert item.record is not None and item.action is not None
            metrics.RECORDS.labels(item.record.realm, item.action.value).inc()
        self.applied += len(group)

    async def _apply(
        self,
        tp: TopicPartition,
        owned: _Owned,
        item: _Item,
        prepared: PreparedDocument | BaseException | None,
    ) -> None:
        assert self.pool is not None
        msg = item.msg
        pos = RecordPosition(
            self.config.group_id,
            tp.topic,
            tp.partition,
            msg.offset,
            owned.epoch,
            datetime.fromtimestamp(msg.timestamp / 1000, tz=UTC),
        )
        rec = item.record
        if item.action is None or rec is None:
            await self._dead_letter(item)
            async with self.pool.connection() as conn:
                await advance_only(conn, pos)
            metrics.RECORDS.labels(_realm_label(msg), "dead_lettered").inc()
            self.applied += 1
            return
        started = time.perf_counter()
        info = item.info
        assert info is not None
        async with self.pool.connection() as conn:
            result = await write_record(
                conn,
                info,
                pos,
                self._embedder_for(info),
                prepared if item.action is Action.APPLY else None,
                space=rec.space,
                doc_key=rec.doc_key,
                content_hash=rec.content_hash,
                source_version=rec.source_version,
                on_refused=lambda exc: self._dead_letter(
                    dataclasses.replace(
                        item,
                        error=f"PostgreSQL refused a value of the record: {refusal(exc)}",
                        error_class="unstorable",
                    )
                ),
            )
        outcome = (
            "unstorable"
            if result is None
            else {"indexed": "applied", "deleted": "deleted"}.get(result.status, result.status)
        )
        metrics.APPLY_SECONDS.observe(time.perf_counter() - started)
        metrics.RECORDS.labels(rec.realm, outcome).inc()
        self.applied += 1

    async def _dead_letter(self, item: _Item) -> None:
        assert self.producer is not None
        msg = item.msg
        headers = [
            ("tg-error", (item.error or "")[:4000].encode()),
            ("tg-error-class", (item.error_class or "invalid").encode()),
            ("tg-origin", f"{msg.topic}/{msg.partition}/{msg.offset}".encode()),
        ]
        await self.producer.send_and_wait(
            self.config.dlq_topic, msg.value, key=msg.key, headers=headers
        )
        log.warning("dead-lettered %s/%d/%d: %s", msg.topic, msg.partition, msg.offset, item.error)

    async def _realm(self, conn: AsyncConnection[Any], realm: str) -> RealmInfo:
        info = self._realms.get(realm)
        if info is None:
            cur = await conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s"
                " AND table_name = 'meta'",
                (realm_schema(realm),),
            )
            if await cur.fetchone() is None:
                info = await create_realm(conn, realm, self.config.default_realm)
                log.info("created realm %s (%s, %s)", realm, info.extractor, info.embedder)
            else:
                info = await open_realm(conn, realm)
            self._realms[realm] = info
        return info

    async def _pause(self, tp: TopicPartition, offset: int, exc: BaseException) -> None:
        """Seek back to ``offset`` and retry after a growing backoff."""
        assert self.consumer is not None
        exc = classify_db_error(exc)
        owned = self._owned.get(tp)
        if owned is None:
            return
        cfg = self.config
        if isinstance(exc, RealmSwapped):
            delay = 0.0  # a replay swapped the realm in: retry against it at once
        else:
            owned.failures += 1
            delay = min(cfg.backoff_max, cfg.backoff_initial * 2 ** (owned.failures - 1))
        retriable = isinstance(exc, TidegraphError) and exc.retriable
        level = logging.WARNING if retriable else logging.ERROR
        log.log(
            level,
            "%s/%d offset %d: %s: %s; retrying in %.1fs",
            tp.topic,
            tp.partition,
            offset,
            type(exc).__name__,
            exc,
            delay,
            exc_info=not retriable,
        )
        metrics.TRANSIENT_FAILURES.labels(type(exc).__name__).inc()
        self._realms.clear()  # re-read realm state after any failure
        self.consumer.pause(tp)
        self.consumer.seek(tp, offset)
        owned.resume_at = time.monotonic() + delay
        metrics.PAUSED.set(sum(1 for o in self._owned.values() if o.resume_at))

    def _resume_due(self, busy: Mapping[TopicPartition, object]) -> None:
        """Resume partitions whose backoff has elapsed (unless a batch is in flight)."""
        now = time.monotonic()
        for tp, owned in list(self._owned.items()):
            if owned.resume_at is not None and owned.resume_at <= now:
                owned.resume_at = None
                if tp not in busy:
                    self._resume_idle(tp)
        metrics.PAUSED.set(sum(1 for o in self._owned.values() if o.resume_at))

    def _resume_idle(self, tp: TopicPartition) -> None:
        """Fetch a partition again after its batch, unless it waits out a backoff."""
        assert self.consumer is not None
        owned = self._owned.get(tp)
        if owned is not None and owned.resume_at is None:
            self.consumer.resume(tp)

    def _update_lag(self) -> None:
        assert self.consumer is not None
        for tp, owned in list(self._owned.items()):
            high = self.consumer.highwater(tp)
            if high is not None and owned.next_offset is not None:
                lag = max(0, high - owned.next_offset)
                metrics.LAG.labels(tp.topic, str(tp.partition)).set(lag)


def _position_runs(items: list[_Item]) -> list[list[_Item]]:
    """Items in log order, consecutive no-op and stale records grouped into one run."""
    runs: list[list[_Item]] = []
    for item in items:
        quiet = item.record is not None and item.action in (Action.NOOP, Action.STALE)
        if (
            quiet
            and runs
            and runs[-1][-1].record is not None
            and runs[-1][-1].action in (Action.NOOP, Action.STALE)
        ):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


class _PrepareAhead:
    """Prepares the records to apply at most ``window`` ahead of the writer.

    The writer works through a batch in log order while the next documents are chunked,
    extracted and embedded; a bounded window keeps memory flat however large the batch.
    """

    def __init__(
        self,
        prepare: Callable[[_Item], Coroutine[Any, Any, PreparedDocument | BaseException]],
        items: list[_Item],
        window: int,
    ) -> None:
        self._prepare = prepare
        self._queue = [it for it in items if it.action is Action.APPLY]
        self._window = max(1, window)
        self._next = 0
        self._tasks: dict[int, asyncio.Task[PreparedDocument | BaseException]] = {}
        self._fill()

    def _fill(self) -> None:
        while self._next < len(self._queue) and len(self._tasks) < self._window:
            item = self._queue[self._next]
            self._tasks[item.msg.offset] = asyncio.create_task(self._prepare(item))
            self._next += 1

    async def take(self, item: _Item) -> PreparedDocument | BaseException | None:
        """The prepared document of ``item`` (``None`` unless it applies)."""
        task = self._tasks.pop(item.msg.offset, None)
        if task is None:
            return None
        self._fill()
        return await task

    def cancel(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.indexer.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.indexer.on_assigned(assigned)


def _realm_label(msg: ConsumerRecord[bytes, bytes]) -> str:
    try:
        return msg.key.decode() if msg.key else "unknown"
    except UnicodeDecodeError:
        return "unknown"
