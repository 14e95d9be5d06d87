"""The Debezium source: Debezium's topics in, document versions out, nothing lost or doubled.

Consume-transform-produce with the commit order written down. Per poll:

1. decode each record (:mod:`debezium_events`) and map it (:mod:`debezium_documents`);
   a record that cannot be read or mapped becomes a dead letter with the reason;
2. hand the documents to the producer (key = realm: one partition, log order kept) and
   the dead letters to the dead-letter topic, without waiting;
3. once every record of the poll — and of every poll before it — is acknowledged by Kafka,
   commit the consumed offsets (the consumer group's, in Kafka).

A crash anywhere therefore loses nothing Debezium's topic acknowledged: the group resumes at
the last commit, and what it publishes again carries the same ``source_version`` as
before, which the indexer takes as a no-op (same content) or stale (older than what it
holds) — never as a second application. Kafka transactions are not used: the indexer reads
uncommitted records, so an aborted transaction's documents would still be applied.

A truncate waits until everything before it is acknowledged, then deletes every live
document of the table (:mod:`documents_log`) at the truncate's position.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from tidegraph.connectors.dead_letters import DeadLetters
from tidegraph.connectors.debezium_documents import SOURCE, EventMapper
from tidegraph.connectors.debezium_events import (
    EventError,
    PassedOver,
    RowEvent,
    TruncateEvent,
    decode,
)
from tidegraph.connectors.documents_log import live_documents
from tidegraph.connectors.errors import DeliveryError
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.schemas import DocumentVersion, compare_source_versions, kafka_client_options

__all__ = ["DebeziumSource", "SourceStats"]

log = logging.getLogger(__name__)

Record = Any
"""An aiokafka ``ConsumerRecord`` of bytes."""


@dataclass
class SourceStats:
    """Counters, for progress lines, the tests and the benchmark."""

    consumed: int = 0
    published: int = 0
    dead_lettered: int = 0
    truncates: int = 0
    committed: int = 0
    passed: Counter[str] = field(default_factory=Counter)


@dataclass
class _Poll:
    """One poll's acknowledgements, and the offsets to commit once all of them arrived."""

    waits: list[asyncio.Future[Any]]
    offsets: dict[TopicPartition, int]
    published: int = 0


class DebeziumSource:
    """Reads Debezium topics matching a pattern into one realm's documents."""

    def __init__(
        self,
        bootstrap: str,
        pattern: str,
        group: str,
        mapper: EventMapper,
        producer: DocumentProducer,
        dead_letters: DeadLetters,
        *,
        max_polls_in_flight: int = 8,
        max_records: int = 2000,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.pattern = f"^(?:{pattern})$"
        self.group = group
        self.mapper = mapper
        self.producer = producer
        self.dead_letters = dead_letters
        self.max_polls_in_flight = max_polls_in_flight
        self.max_records = max_records
        self.on_event = on_event
        self.stats = SourceStats()
        self._pending: deque[_Poll] = deque()
        self._consumer: AIOKafkaConsumer | None = None
        self._unmapped: set[str] = set()
        self.assigned = asyncio.Event()

    def _say(self, message: str) -> None:
        log.info("%s", message)
        if self.on_event is not None:
            self.on_event(message)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; on the way out, commit what was acknowledged."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_poll_records=self.max_records,
            metadata_max_age_ms=5000,
            client_id="tidegraph-debezium",
            **kafka_client_options(),
        )
        try:
            await consumer.start()
        except (KafkaError, OSError) as exc:
            await consumer.stop()
            raise DeliveryError(f"Kafka at {self.bootstrap} is unreachable: {exc!r}") from exc
        self._consumer = consumer
        consumer.subscribe(pattern=self.pattern, listener=_Listener(self))
        self._say(f"reading topics matching {self.pattern} as group {self.group}")
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=self.max_records)
                if batch:
                    await self._handle(batch)
                await self._settle(block=len(self._pending) >= self.max_polls_in_flight)
            await self.drain()
        finally:
            self._consumer = None
            await consumer.stop()

    async def _handle(self, batch: dict[TopicPartition, list[Record]]) -> None:
        """Steps 1 and 2 for one poll: decode, map, hand over; nothing waits for Kafka."""
        docs: list[tuple[DocumentVersion, Record]] = []
        poll = _Poll(waits=[], offsets={})
        for tp, records in batch.items():
            for record in records:
                self.stats.consumed += 1
                poll.offsets[tp] = record.offset + 1
                try:
                    event = decode(record.topic, record.key, record.value)
                    if isinstance(event, PassedOver):
                        self.stats.passed[event.kind] += 1
                    elif isinstance(event, TruncateEvent):
                        await self._send(docs, poll)
                        docs = []
                        await self._truncate(event, poll)
                    elif not self.mapper.maps(event.table):
                        self._pass_unmapped(event)
                    else:
                        docs += [(d, record) for d in await self.mapper.documents(event)]
                except EventError as exc:
                    await self._dead_letter(record, exc.reason, exc.error_class, poll)
        await self._send(docs, poll)
        self._pending.append(poll)

    def _pass_unmapped(self, event: RowEvent) -> None:
        self.stats.passed["unmapped table"] += 1
        if event.table not in self._unmapped:
            self._unmapped.add(event.table)
            log.warning(
                "events of %s are passed over: the mapping has no entry for it", event.table
            )

    async def _send(self, docs: list[tuple[DocumentVersion, Record]], poll: _Poll) -> None:
        if not docs:
            return
        submitted = await self.producer.submit_many([d for d, _ in docs])
        origin = {id(d): r for d, r in docs}
        for doc, too_large in submitted.refused:
            await self._dead_letter(origin[id(doc)], str(too_large), "unmappable", poll)
        poll.waits.append(submitted.acked)
        poll.published += len(submitted.accepted)

    async def _dead_letter(self, record: Record, reason: str, kind: str, poll: _Poll) -> None:
        origin = f"{record.topic}/{record.partition}/{record.offset}"
        log.warning("dead-lettered %s: %s", origin, reason)
        poll.waits.append(
            await self.dead_letters.send(
                self.mapper.realm,
                record.key,
                record.value,
                error=reason,
                error_class=kind,
                origin=origin,
            )  # fmt: skip
        )
        self.stats.dead_lettered += 1

    async def _truncate(self, event: TruncateEvent, poll: _Poll) -> None:
        """Delete every live document of the table, once all before it is acknowledged."""
        await asyncio.gather(*(w for p in self._pending for w in p.waits), *poll.waits)
        self.stats.truncates += 1
        live = await live_documents(
            self.bootstrap, self.producer.topic, self.mapper.realm,
            space=self.mapper.space, prefix=f"{event.table}/", source=SOURCE,
        )  # fmt: skip
        deletes = [
            DocumentVersion.for_delete(
                self.mapper.realm,
                key,
                space=self.mapper.space,
                source=SOURCE,
                source_version=event.version,
                event_time=event.event_time,
            )  # fmt: skip
            for key, version in sorted(live.items())
            if version is None or compare_source_versions(version, event.version) < 0
        ]
        self._say(f"truncate of {event.table}: deleting its {len(deletes)} documents")
        if deletes:
            submitted = await self.producer.submit_many(deletes)
            poll.waits.append(submitted.acked)
            poll.published += len(submitted.accepted)

    async def _settle(self, *, block: bool) -> None:
        """Step 3: commit the polls whose acknowledgements all arrived, oldest first."""
        while self._pending:
            head = self._pending[0]
            if block:
                await asyncio.gather(*head.waits)
                block = False
            elif not all(w.done() for w in head.waits):
                return
            for wait in head.waits:
                if wait.exception() is not None:
                    raise DeliveryError(f"Kafka did not acknowledge: {wait.exception()!r}")
            self._pending.popleft()
            self.stats.published += head.published
            await self._commit(head.offsets)

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        consumer = self._consumer
        if consumer is None or not offsets:
            return
        assigned = consumer.assignment()
        mine = {tp: OffsetAndMetadata(o, "") for tp, o in offsets.items() if tp in assigned}
        try:
            await consumer.commit(mine)
        except CommitFailedError as exc:  # a rebalance took the partitions meanwhile
            log.warning("commit refused (%s); the new owner reads them again", exc)
            return
        self.stats.committed += sum(1 for _ in mine)

    async def drain(self) -> None:
        """Wait for everything handed over and commit it (on stop and before a rebalance)."""
        while self._pending:
            await self._settle(block=True)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Commits what is acknowledged before partitions go to another member."""

    def __init__(self, source: DebeziumSource) -> None:
        self.source = source

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        await self.source.drain()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        if assigned:
            self.source.assigned.set()
