"""The one path by which every connector puts document versions on Kafka.

Key = realm (one partition per realm, so versions of a realm stay in order), ``acks=all``
with idempotence (a retried batch is never written twice), lz4 compression, the contract's
headers. A document over the size limit is refused here, before anything is buffered.

Two ways to publish:

* :meth:`DocumentProducer.publish` waits for the acknowledgement — one document, e.g. an
  HTTP request that must not answer before the record is durable.
* :meth:`DocumentProducer.submit` returns once the record is buffered, with a future that
  resolves to its :class:`Delivery` on acknowledgement — bulk paths submit many and then
  await the futures, so batches fill instead of one round trip per document.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
from typing import Any, NamedTuple

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from tidegraph.connectors.errors import DeliveryError, DocumentTooLargeError
from tidegraph.schemas import (
    DOCUMENT_SCHEMA,
    HEADER_CONTENT_HASH,
    HEADER_DOC_KEY,
    HEADER_SCHEMA,
    MAX_DOCUMENT_BYTES,
    DocumentVersion,
    Settings,
    max_message_bytes,
    partition_for_key,
    producer_options,
)

DEFAULT_BATCH_BYTES = 1024 * 1024
"""Per-partition batch size: a realm's documents all share one partition, so big batches."""
LZ4_LEVEL = 1
"""Fast LZ4. aiokafka 0.14 compresses at level 9 (high-compression mode) with no option to
choose, which costs more CPU than sending the batch; level 1 output is an ordinary LZ4 frame
any consumer reads."""


@functools.cache
def _use_fast_lz4() -> None:
    """Make aiokafka's record-batch builders compress LZ4 at :data:`LZ4_LEVEL`.

    The builders look ``lz4_encode`` up in their module globals at call time; where a
    future aiokafka no longer has that global, nothing changes and its default applies.
    """
    codec = importlib.import_module("aiokafka.codec")
    fast = functools.partial(codec.lz4_encode, level=LZ4_LEVEL)
    for name in ("aiokafka.record._crecords.default_records", "aiokafka.record.default_records"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "lz4_encode", None) is codec.lz4_encode:
            setattr(module, "lz4_encode", fast)  # noqa: B010 - module attribute, by name


class Delivery(NamedTuple):
    """Where Kafka stored an acknowledged document version."""

    realm: str
    doc_key: str
    topic: str
    partition: int
    offset: int
    size: int
    """Bytes of the encoded value."""


class Submitted(NamedTuple):
    """Documents buffered together by :meth:`DocumentProducer.submit_many`."""

    acked: asyncio.Future[list[Delivery]]
    """Resolves, in the order of ``accepted``, once Kafka acknowledged all of them."""
    accepted: list[DocumentVersion]
    refused: list[tuple[DocumentVersion, DocumentTooLargeError]]
    """Documents over the size limit, not buffered, with the error naming doc and size."""


class EncodedDocument(NamedTuple):
    """A document version as the record Kafka receives."""

    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


def encode(doc: DocumentVersion, max_document_bytes: int = MAX_DOCUMENT_BYTES) -> EncodedDocument:
    """Record key, value and headers; raises :class:`DocumentTooLargeError` over the limit."""
    value = doc.to_json()
    if len(value) > max_document_bytes:
        raise DocumentTooLargeError(doc.realm, doc.doc_key, len(value), max_document_bytes)
    headers = [
        (HEADER_SCHEMA, DOCUMENT_SCHEMA.encode()),
        (HEADER_DOC_KEY, doc.doc_key.encode()),
    ]
    if doc.content_hash is not None:
        headers.append((HEADER_CONTENT_HASH, doc.content_hash.encode()))
    return EncodedDocument(doc.realm.encode(), value, headers)


class DocumentProducer:
    """An idempotent Kafka producer of :class:`DocumentVersion` records onto one topic."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        max_document_bytes: int = MAX_DOCUMENT_BYTES,
        linger_ms: int = 5,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        request_timeout_ms: int = 30_000,
        client_id: str = "tidegraph-connector",
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.max_document_bytes = max_document_bytes
        self._options = {
            "linger_ms": linger_ms,
            "max_batch_size": batch_bytes,
            "request_timeout_ms": request_timeout_ms,
            "client_id": client_id,
        }
        self._producer: AIOKafkaProducer | None = None
        self._partition_of: dict[bytes, int] = {}

    @classmethod
    def from_settings(
        cls, settings: Settings, *, max_document_bytes: int = MAX_DOCUMENT_BYTES
    ) -> DocumentProducer:
        """A producer onto the settings' documents topic."""
        return cls(
            settings.kafka_bootstrap,
            settings.documents_topic,
            max_document_bytes=max_document_bytes,
        )

    @property
    def started(self) -> bool:
        return self._producer is not None

    async def start(self, connect_timeout: float | None = 30.0) -> None:
        """Connect; raises :class:`DeliveryError` when the broker cannot be reached in time.

        A failed start leaves the object stopped, so the caller may call ``start`` again.
        """
        if self._producer is not None:
            return
        _use_fast_lz4()
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            compression_type="lz4",
            max_request_size=max_message_bytes(self.max_document_bytes),
            **self._options,
            **producer_options(),
        )
        try:
            await asyncio.wait_for(producer.start(), connect_timeout)
        except (KafkaError, OSError, TimeoutError) as exc:
            await _quiet_stop(producer)
            raise DeliveryError(f"Kafka at {self.bootstrap} is unreachable: {exc!r}") from exc
        self._producer = producer

    async def stop(self) -> None:
        """Flush what is buffered and disconnect."""
        producer, self._producer = self._producer, None
        self._partition_of.clear()
        if producer is not None:
            await producer.stop()

    async def __aenter__(self) -> DocumentProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def submit(self, doc: DocumentVersion) -> asyncio.Future[Delivery]:
        """Buffer ``doc``; the returned future resolves on acknowledgement.

        Raises :class:`DocumentTooLargeError` at once for an oversize document, and
        :class:`DeliveryError` when the record cannot even be buffered. The future fails
        with :class:`DeliveryError` when Kafka does not acknowledge.
        """
        if self._producer is None:
            raise DeliveryError("producer is not started", doc_key=doc.doc_key)
        record = encode(doc, self.max_document_bytes)
        try:
            partition = self._partition_of.get(record.key)
            if partition is None:
                partition = await self._partition_for(record.key)
            sent = await self._producer.send(
                self.topic,
                record.value,
                key=record.key,
                headers=record.headers,
                partition=partition,
            )
        except KafkaError as exc:
            raise _delivery_error(exc, doc.doc_key) from exc
        result: asyncio.Future[Delivery] = asyncio.get_running_loop().create_future()
        size = len(record.value)

        def _acked(fut: asyncio.Future[object]) -> None:
            if result.done():
                return
            if fut.cancelled():
                result.set_exception(DeliveryError("send cancelled", doc_key=doc.doc_key))
                return
            exc = fut.exception()
            if exc is not None:
                err = exc if not isinstance(exc, KafkaError) else _delivery_error(exc, doc.doc_key)
                result.set_exception(err)
                return
            meta = fut.result()
            result.set_result(
                Delivery(
                    doc.realm,
                    doc.doc_key,
                    self.topic,
                    meta.partition,  # type: ignore[attr-defined]
                    meta.offset,  # type: ignore[attr-defined]
                    size,
                )
            )

        sent.add_done_callback(_acked)
        return result

    async def submit_many(self, docs: list[DocumentVersion]) -> Submitted:
        """Buffer ``docs`` as whole record batches, with one future for all of them.

        Cheaper per record than :meth:`submit` (no per-record future or partitioning), for
        paths that produce many documents at once; order is kept per realm. Oversize
        documents come back as refused; the others are still sent.
        """
        if self._producer is None:
            raise DeliveryError("producer is not started")
        producer = self._producer
        accepted: list[DocumentVersion] = []
        refused: list[tuple[DocumentVersion, DocumentTooLargeError]] = []
        placed: list[tuple[int, int, int]] = []  # (batch number, offset in batch, size)
        sent: dict[int, asyncio.Future[Any]] = {}  # batch number → acknowledgement
        building: dict[int, tuple[Any, int]] = {}  # partition → (builder, batch number)
        count = 0

        async def send(partition: int) -> None:
            builder, number = building.pop(partition)
            try:
                future = await producer.send_batch(builder, self.topic, partition=partition)
            except KafkaError as exc:
                raise _delivery_error(exc, "(batch)") from exc
            sent[number] = future

        for doc in docs:
            try:
                record = encode(doc, self.max_document_bytes)
            except DocumentTooLargeError as exc:
                refused.append((doc, exc))
                continue
            partition = self._partition_of.get(record.key)
            if partition is None:
                partition = await self._partition_for(record.key)
            while True:
                if partition not in building:
                    building[partition] = (producer.create_batch(), count)
                    count += 1
                builder, number = building[partition]
                meta = builder.append(
                    timestamp=None, key=record.key, value=record.value, headers=record.headers
                )
                if meta is not None:
                    break
                await send(partition)  # full: send it, the record starts the next one
            accepted.append(doc)
            placed.append((number, meta.offset, len(record.value)))
        for partition in sorted(building, key=lambda p: building[p][1]):
            await send(partition)
        batches = [sent[number] for number in range(count)]
        return Submitted(self._deliveries(batches, accepted, placed), accepted, refused)

    def _deliveries(
        self,
        batches: list[asyncio.Future[Any]],
        accepted: list[DocumentVersion],
        placed: list[tuple[int, int, int]],
    ) -> asyncio.Future[list[Delivery]]:
        result: asyncio.Future[list[Delivery]] = asyncio.get_running_loop().create_future()
        if not batches:
            result.set_result([])
            return result
        gathered = asyncio.gather(*batches, return_exceptions=True)

        def done(fut: asyncio.Future[list[Any]]) -> None:
            if result.done():
                return
            metas = fut.result()
            for meta in metas:
                if isinstance(meta, BaseException):
                    error = (
                        meta if isinstance(meta, DeliveryError) else _delivery_error(meta, "batch")
                    )
                    result.set_exception(error)
                    return
            result.set_result(
                [
                    Delivery(
                        doc.realm,
                        doc.doc_key,
                        self.topic,
                        metas[index].partition,
                        metas[index].offset + relative,
                        size,
                    )
                    for doc, (index, relative, size) in zip(accepted, placed, strict=True)
                ]
            )

        gathered.add_done_callback(done)
        return result

    async def _partition_for(self, key: bytes) -> int:
        """The default partitioner's choice for ``key``, worked out once per key.

        Same mapping as Kafka's (murmur2 of the key over the sorted partitions), so records
        from any producer keyed by a realm land together; caching it saves the per-record
        partitioning cost on bulk paths.
        """
        assert self._producer is not None
        partitions = sorted(await self._producer.partitions_for(self.topic))
        chosen = int(partitions[partition_for_key(key, len(partitions))])
        self._partition_of[key] = chosen
        return chosen

    async def publish(self, doc: DocumentVersion, *, ack_timeout: float | None = None) -> Delivery:
        """Send ``doc`` and wait for the acknowledgement (at most ``ack_timeout`` seconds)."""
        try:
            return await asyncio.wait_for(self._submit_and_wait(doc), ack_timeout)
        except TimeoutError:
            raise DeliveryError(
                f"no acknowledgement from Kafka at {self.bootstrap} within {ack_timeout}s",
                doc_key=doc.doc_key,
            ) from None

    async def _submit_and_wait(self, doc: DocumentVersion) -> Delivery:
        return await (await self.submit(doc))

    async def flush(self) -> None:
        """Wait until everything buffered has been sent and answered."""
        if self._producer is not None:
            await self._producer.flush()


def _delivery_error(exc: BaseException, doc_key: str) -> DeliveryError:
    retriable = bool(getattr(exc, "retriable", True))
    return DeliveryError(
        f"Kafka refused or lost the record: {exc!r}", doc_key=doc_key, retriable=retriable
    )


async def _quiet_stop(producer: AIOKafkaProducer) -> None:
    try:
        await producer.stop()
    except (KafkaError, OSError):
        pass
