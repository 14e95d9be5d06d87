"""Reading the dead-letter topic, and choosing which records to publish again.

The indexer dead-letters a record with its value and key unchanged and three headers
(CONTRACT, "Failure behaviour"): ``tg-error`` (why), ``tg-error-class`` (``invalid``,
``hash_mismatch``, ``unstorable``) and ``tg-origin`` (``topic/partition/offset`` it came
from). A record is only worth publishing again once it decodes and its ``content_hash``
matches its content: :func:`replayable` says so, or why not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from tidegraph.schemas import (
    DocumentVersion,
    RecordValidationError,
    kafka_client_options,
    topic_partitions,
)


@dataclass(frozen=True)
class DeadLetter:
    """One record of the dead-letter topic."""

    partition: int
    """Where it sits in the dead-letter topic (with :attr:`offset`: how to choose it)."""
    offset: int
    dead_at: datetime
    """When it was dead-lettered."""
    realm: str
    """The record key: the realm it was for."""
    doc_key: str | None
    """The document, when the value still says which."""
    origin: str
    """``topic/partition/offset`` in the documents topic."""
    error_class: str
    error: str
    value: bytes | None

    @property
    def at(self) -> str:
        """``partition:offset``, as ``dlq replay --at`` takes it."""
        return f"{self.partition}:{self.offset}"


async def read_dead_letters(bootstrap: str, topic: str) -> list[DeadLetter]:
    """Every record of the dead-letter topic as it stands now, oldest first per partition;
    a topic that does not exist is an error (``tidegraph topics`` creates it), not "none"."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        client_id="tidegraph-dlq",
        **kafka_client_options(),
    )
    await consumer.start()
    try:
        partitions = await topic_partitions(bootstrap, topic, **kafka_client_options())
        tps = [TopicPartition(topic, p) for p in partitions]
        ends = await consumer.end_offsets(tps)
        todo = {tp: end for tp, end in ends.items() if end > 0}
        consumer.assign(list(todo) or tps)
        await consumer.seek_to_beginning(*todo)
        out: list[DeadLetter] = []
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=1000)
            if not batch:
                break
            for tp, records in batch.items():
                out.extend(_letter(r) for r in records if r.offset < todo.get(tp, 0))
                if tp in todo and await consumer.position(tp) >= todo[tp]:
                    del todo[tp]
        return sorted(out, key=lambda d: (d.partition, d.offset))
    finally:
        await consumer.stop()


def _letter(record: ConsumerRecord[bytes, bytes]) -> DeadLetter:
    headers = {k: v.decode(errors="replace") for k, v in record.headers}
    return DeadLetter(
        partition=record.partition,
        offset=record.offset,
        dead_at=datetime.fromtimestamp(record.timestamp / 1000, tz=UTC),
        realm=record.key.decode(errors="replace") if record.key else "",
        doc_key=_doc_key(record.value),
        origin=headers.get("tg-origin", ""),
        error_class=headers.get("tg-error-class", "unknown"),
        error=headers.get("tg-error", ""),
        value=record.value,
    )


def _doc_key(value: bytes | None) -> str | None:
    try:
        decoded = orjson.loads(value) if value else None
    except orjson.JSONDecodeError:
        return None
    key = decoded.get("doc_key") if isinstance(decoded, dict) else None
    return key if isinstance(key, str) else None


def replayable(letter: DeadLetter) -> DocumentVersion | str:
    """The record as a document version worth publishing again, or why it is not."""
    if letter.value is None:
        return "the record has no value"
    try:
        doc = DocumentVersion.from_json(letter.value)
    except RecordValidationError as exc:
        return f"still not a valid document: {exc}"
    if not doc.hash_matches():
        return f"content_hash {doc.content_hash} still does not match the content"
    if letter.realm and doc.realm != letter.realm:
        return f"record key {letter.realm!r} is not its realm {doc.realm!r}"
    return doc


def refused_again(letter: DeadLetter) -> str | None:
    """What publishing ``letter`` again will meet, when its bytes were valid but PostgreSQL
    refused a value of them (``unstorable``): the same bytes meet the same refusal unless
    its cause (a server setting, a bug since fixed) is gone; None for other classes."""
    if letter.error_class != "unstorable":
        return None
    return (
        f"it was dead-lettered as unstorable ({letter.error}): the indexer refuses the same"
        " value again, and dead-letters it once more, unless that cause has been fixed since"
    )
