"""The indexer: a Kafka consumer group applying document versions to realm graphs.

A thin loop: poll, hand each partition's records to a task of its own
(:class:`~tidegraph.indexer.consumer.batch.BatchProcessor`), resume partitions whose
backoff has elapsed. The partitions of a poll proceed concurrently, each on its own
connection; within a partition everything is in log order.

What a record's realm has applied is the realm's own (``tidegraph.store.realm_positions``):
a record is applied at most once whatever group, process or command reads it, and a second
group passes over what is settled. The group's claim and epoch
(``tidegraph.store.positions``) fence a zombie of the same group, and its cursor says where
reading resumes. Kafka's committed offsets are not used; lag is exported as a metric.

Failures follow :mod:`~tidegraph.indexer.consumer.failures` (DESIGN invariant 8):
undecodable, schema-invalid or hash-mismatched records and values PostgreSQL refuses go to
the DLQ and are settled; transient failures pause the partition; anything else holds the
record's realm while the partition's other realms go on; a lost partition stops at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.consumer import metrics
from tidegraph.indexer.consumer.batch import BatchProcessor
from tidegraph.indexer.consumer.failures import FailurePolicy
from tidegraph.indexer.consumer.partition import Partition, Stands
from tidegraph.indexer.consumer.realms import RealmCache
from tidegraph.indexer.extraction import Embedder, PreparedDocument
from tidegraph.indexer.write import Backoff, Judge, JudgeFor
from tidegraph.schemas import (
    DocumentVersion,
    RealmConfig,
    Servers,
    kafka_client_options,
    producer_options,
)
from tidegraph.store import Claim, Cluster, RealmInfo, positions

log = logging.getLogger("tidegraph.indexer")

Prepare = Callable[[DocumentVersion, RealmInfo], Awaitable[PreparedDocument]]
EmbedderFor = Callable[[RealmInfo], Embedder]


@dataclass(frozen=True)
class IndexerConfig:
    """How one indexer process consumes."""

    bootstrap: str
    """Kafka bootstrap servers."""
    pg_dsn: str
    """PostgreSQL connection string of ``main``: the catalogue and the group's claims."""
    servers: Servers | None = None
    """Every server realms live on (``None``: ``pg_dsn`` alone, as ``main``)."""
    topic: str = "tidegraph.documents"
    """Documents topic."""
    dlq_topic: str = "tidegraph.documents.dlq"
    """Where records that can never be applied go."""
    group_id: str = "tidegraph-indexer"
    """Consumer group: shares the partitions among its members, fences its zombies and
    keeps where it reads; what is applied belongs to each realm, whatever the group."""
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
    """PostgreSQL connections, per server."""
    catch_up_run: int = 16
    """Records of one realm fetched back to back from which they are written as one
    transaction (the indexer is behind); 0 writes every record on its own."""
    idle_in_transaction_timeout: float = 15.0
    """PostgreSQL ends a session idle this long inside a transaction: a member frozen
    mid-write (SIGSTOP, a paused VM) releases its realm locks instead of blocking the
    member that takes its partitions for as long as it stays frozen; its commit then fails
    and the record is applied once, by the new owner."""

    @property
    def all_servers(self) -> Servers:
        if self.servers is None:
            return Servers.single(self.pg_dsn)
        if self.servers.main_dsn != self.pg_dsn:
            raise ValueError("IndexerConfig: servers' main is not pg_dsn")
        return self.servers


APPLICATION_NAME = "tidegraph-indexer"
"""How the indexer's sessions name themselves, so a claim can tell them apart."""
TAKE_OVER_AFTER = 5.0
"""Seconds a claim waits for a previous owner's open write before ending its session."""


def make_pool(
    config: IndexerConfig, dsn: str | None = None
) -> AsyncConnectionPool[AsyncConnection[Any]]:
    """An unopened pool of autocommit connections (to ``main``, unless ``dsn`` names
    another server) whose sessions PostgreSQL ends after ``idle_in_transaction_timeout``
    idle inside a transaction (see that field)."""
    timeout_ms = int(config.idle_in_transaction_timeout * 1000)
    return AsyncConnectionPool(
        dsn or config.pg_dsn,
        min_size=1,
        max_size=config.pool_size,
        open=False,
        kwargs={
            "autocommit": True,
            "application_name": APPLICATION_NAME,
            "options": f"-c idle_in_transaction_session_timeout={timeout_ms}",
        },
    )


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
        self._owned: dict[TopicPartition, Partition] = {}
        self._lock = asyncio.Lock()
        """Held while claiming partitions and while stopping."""
        self._partition_locks: dict[TopicPartition, asyncio.Lock] = {}
        """Held while a partition's run is in flight; revocation waits for it."""
        self._stop = asyncio.Event()
        self._running = asyncio.Semaphore(config.prepare_concurrency)
        self.cluster = Cluster(
            config.all_servers,
            lambda _, dsn: make_pool(config, dsn),
            main_pool=pool or make_pool(config),
        )
        self._realms = RealmCache(self.cluster, config.default_realm)
        self.consumer: AIOKafkaConsumer | None = None
        self.producer: AIOKafkaProducer | None = None
        self._batches: BatchProcessor | None = None
        self._policy: FailurePolicy | None = None

    @property
    def pool(self) -> AsyncConnectionPool[AsyncConnection[Any]]:
        """``main``'s pool: the catalogue and the group's claims."""
        return self.cluster.main

    @property
    def applied(self) -> int:
        """Records settled in this process (any outcome)."""
        return self._batches.applied if self._batches is not None else 0

    def stop(self) -> None:
        """Finish the record in flight, leave the group cleanly, return from ``run``."""
        self._stop.set()

    async def run(self) -> None:
        cfg = self.config
        await self.cluster.open()
        self.producer = AIOKafkaProducer(
            bootstrap_servers=cfg.bootstrap,
            compression_type="lz4",
            max_request_size=16 * 1024 * 1024,
            **producer_options(),
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
        self._policy = FailurePolicy(
            self.consumer, self.cluster, self._backoff, self._realms.forget, self._lose
        )
        self._batches = BatchProcessor(
            consumer=self.consumer,
            producer=self.producer,
            cluster=self.cluster,
            realms=self._realms,
            embedder_for=self._embedder_for,
            judge_for=self._judge_for,
            policy=self._policy,
            prepare=self._prepare,
            running=self._running,
            window=cfg.prepare_concurrency,
            catch_up_run=cfg.catch_up_run,
            owner=self._owned.get,
            lock=self._partition_lock,
            stopping=self._stop,
            dlq_topic=cfg.dlq_topic,
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
            await self.cluster.close()

    async def _loop(self) -> None:
        """Poll, and hand each partition's records to a task of its own.

        Partitions usually carry different realms, so one's writes wait on PostgreSQL while
        another's documents are prepared. A partition with a batch in flight is paused, so
        the next poll brings nothing of it until that batch is done: log order holds and
        fetched records never pile up.
        """
        assert self.consumer is not None and self._batches is not None
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
                    busy[tp] = asyncio.create_task(self._batches.process(tp, batch[tp]))
                for tp, task in list(busy.items()):
                    if task.done():
                        del busy[tp]
                        task.result()
                        self._resume_idle(tp)
                self._gauge()
                self._update_lag()
        finally:
            if busy:
                await asyncio.gather(*busy.values(), return_exceptions=True)

    # -- rebalance ---------------------------------------------------------------------

    async def on_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        assert self.consumer is not None
        if not assigned:
            return
        starts = await self.consumer.beginning_offsets(list(assigned))
        async with self._lock, self.pool.connection() as conn:
            for tp in assigned:
                claim, cursor = await self._claim(conn, tp, starts[tp])
                cursor = max(cursor, starts[tp])  # retention may have removed records since
                stands = Stands(tp.topic, tp.partition)
                self._owned[tp] = Partition(claim, cursor, cursor, stands)
                self.consumer.seek(tp, cursor)
                # The consumer fetches as soon as it is assigned a partition, before this
                # claim; a batch taken meanwhile was dropped and left the partition paused.
                self.consumer.resume(tp)
                log.info(
                    "claimed %s/%d at offset %d (epoch %d)",
                    tp.topic,
                    tp.partition,
                    cursor,
                    claim.epoch,
                )
        self._gauge()

    async def _claim(
        self, conn: AsyncConnection[Any], tp: TopicPartition, start: int
    ) -> tuple[Claim, int]:
        """Claim ``tp``; a previous owner frozen inside its write transaction holds the
        claim row, and its session is ended after :data:`TAKE_OVER_AFTER` (see
        ``positions.end_owners_in_the_way``)."""
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
            async with self._partition_lock(tp):  # waits for the run in flight
                self._owned.pop(tp, None)
        self._gauge()

    def _lose(self, tp: TopicPartition) -> None:
        self._owned.pop(tp, None)

    def _partition_lock(self, tp: TopicPartition) -> asyncio.Lock:
        return self._partition_locks.setdefault(tp, asyncio.Lock())

    # -- pauses and holds --------------------------------------------------------------

    def _resume_due(self, busy: Mapping[TopicPartition, object]) -> None:
        """Resume partitions whose backoff has elapsed, and try held realms again (unless a
        batch is in flight): from the earliest held record, the records settled since
        are passed over."""
        assert self._policy is not None
        now = time.monotonic()
        for tp, part in list(self._owned.items()):
            if tp in busy:
                continue
            if part.retry_held_at is not None and part.retry_held_at <= now:
                part.retry_held_at = None
                if part.held:
                    log.info(
                        "%s/%d: trying held realms again from their records (%s)",
                        tp.topic,
                        tp.partition,
                        ", ".join(f"{r} at offset {o}" for r, o in sorted(part.held.items())),
                    )
                    self._policy.seek(tp, part, min(part.held.values()))
                    part.held.clear()
                    part.stands.forget()
                    self._realms.forget()
            if part.resume_at is not None and part.resume_at <= now:
                part.resume_at = None
                log.log(
                    logging.INFO,
                    "%s/%d resumes at offset %d: retrying after %s",
                    tp.topic,
                    tp.partition,
                    part.fetch_from,
                    part.paused_for,
                )
                self._resume_idle(tp)

    def _resume_idle(self, tp: TopicPartition) -> None:
        """Fetch a partition again after its batch, unless it waits out a backoff."""
        assert self.consumer is not None
        part = self._owned.get(tp)
        if part is not None and part.resume_at is None:
            self.consumer.resume(tp)

    def _gauge(self) -> None:
        metrics.PAUSED.set(sum(1 for p in self._owned.values() if p.resume_at))
        metrics.HELD.set(sum(len(p.held) for p in self._owned.values()))

    def _update_lag(self) -> None:
        assert self.consumer is not None
        for tp, part in list(self._owned.items()):
            high = self.consumer.highwater(tp)
            if high is not None:
                metrics.LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - part.cursor))


def _no_judge(info: RealmInfo) -> Judge | None:
    return None


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.indexer.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.indexer.on_assigned(assigned)
