"""Reading one realm's history back from the documents topic, for a replay.

Every record of a realm is keyed by the realm, so all of them sit on the partition Kafka's
default partitioner (murmur2 of the key over the sorted partitions) picks for that key —
the same mapping every producer uses (DESIGN invariant 1). A replay reads that one
partition with a manually assigned consumer: no group, no rebalances, nothing committed to
Kafka; the replay's position lives in PostgreSQL like the indexer's, under its own group id.

Which records belong to the realm is the indexer's admission rule
(:func:`~tidegraph.indexer.decide.admission.admit`): a record the indexer dead-lettered (no
value, invalid, key not its realm, content hash mismatch) never reached the graph, so the
replay passes it by too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from tidegraph.indexer.decide import Admitted, Logged, Message, admit
from tidegraph.indexer.replay.errors import ReplayError
from tidegraph.schemas import TopicMissing, kafka_client_options, realm_partition, topic_partitions


def admitted_to(msg: Message, realm: str) -> Logged | None:
    """The record as the indexer gave it to ``realm``, or ``None`` when it did not."""
    admitted = admit(msg)
    if isinstance(admitted, Admitted) and admitted.realm == realm:
        return admitted.logged
    return None


@dataclass(frozen=True)
class Fetched:
    """One fetch from the partition."""

    messages: list[Message]
    """Records in offset order, all below the bound asked for."""
    reached: int
    """Offset the reader has certainly passed: the next record to read is at or after it."""


class PartitionReader:
    """A manually assigned consumer over one partition of the documents topic."""

    def __init__(self, bootstrap: str, topic: str, realm: str, *, fetch_max_records: int) -> None:
        self.topic = topic
        self.realm = realm
        self.fetch_max_records = fetch_max_records
        self._bootstrap = bootstrap
        self._consumer = AIOKafkaConsumer(
            **kafka_client_options(),
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=16 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
        )
        self.tp: TopicPartition | None = None
        self._cursor: int | None = None
        """Next offset to hand out; the buffer holds the records in [cursor, fetched_to)."""
        self._fetched_to = 0
        self._buffer: deque[Message] = deque()

    async def start(self) -> TopicPartition:
        """Connect, find the realm's partition and assign it."""
        await self._consumer.start()
        try:
            partitions = await topic_partitions(
                self._bootstrap, self.topic, **kafka_client_options()
            )
        except TopicMissing as exc:
            raise ReplayError(f"{exc}; nothing to replay from") from exc
        self.tp = TopicPartition(self.topic, realm_partition(self.realm, len(partitions)))
        self._consumer.assign([self.tp])
        return self.tp

    async def stop(self) -> None:
        await self._consumer.stop()

    def _tp(self) -> TopicPartition:
        if self.tp is None:
            raise RuntimeError("PartitionReader.start() was not awaited")
        return self.tp

    async def log_start(self) -> int:
        """Offset of the oldest record still in the log."""
        tp = self._tp()
        return int((await self._consumer.beginning_offsets([tp]))[tp])

    async def log_end(self) -> int:
        """The high watermark: offset the next published record will get."""
        tp = self._tp()
        return int((await self._consumer.end_offsets([tp]))[tp])

    async def offset_after(self, instant: datetime) -> int:
        """First offset whose log-append time is later than ``instant`` (else the end)."""
        tp = self._tp()
        ms = int(instant.timestamp() * 1000) + 1
        found: Any = (await self._consumer.offsets_for_times({tp: ms}))[tp]
        if found is None:
            return await self.log_end()
        return int(found.offset)

    async def fetch(self, start: int, bound: int, *, wait: float = 1.0) -> Fetched:
        """Records at offsets ``start ≤ offset < bound``, at most ``fetch_max_records``.

        Records fetched beyond ``bound`` stay buffered for the next call, so following a
        slowly moving bound (the live position) does not re-fetch from the broker.
        """
        tp = self._tp()
        if start >= bound:
            return Fetched([], start)
        if start != self._cursor:
            self._consumer.seek(tp, start)
            self._buffer.clear()
            self._cursor = self._fetched_to = start
        if not self._buffer:
            batch = await self._consumer.getmany(
                tp, timeout_ms=int(wait * 1000), max_records=self.fetch_max_records
            )
            got = [m for m in batch.get(tp, []) if m.offset >= start]
            if got:
                self._buffer.extend(got)
                self._fetched_to = got[-1].offset + 1
            else:
                position = int(await self._consumer.position(tp))
                self._fetched_to = max(self._fetched_to, position)
        out: list[Message] = []
        while self._buffer and self._buffer[0].offset < bound and len(out) < self.fetch_max_records:
            out.append(self._buffer.popleft())
        if self._buffer:
            # Nothing lies between the last record handed out and the next buffered one.
            reached = min(self._buffer[0].offset, bound)
        else:
            reached = min(self._fetched_to, bound)
        reached = max(reached, out[-1].offset + 1 if out else start)
        self._cursor = reached
        return Fetched(out, reached)
