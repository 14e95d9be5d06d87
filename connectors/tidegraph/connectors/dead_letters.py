"""Records a connector cannot turn into documents, onto the dead-letter topic with why.

The indexer's dead letters keep the documents topic's key (the realm) and bytes; a
connector's keep the source record's bytes, keyed by the realm they were meant for (so
``tidegraph dlq list --realm R`` finds them), with the contract's headers — ``tg-error``,
``tg-error-class``, ``tg-origin`` (``topic/partition/offset`` of the source record) — and
``tg-source-key``, the source record's own key. Sent with ``acks=all`` and idempotence: a
source commits past such a record only once its dead letter is acknowledged.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from tidegraph.connectors.errors import DeliveryError
from tidegraph.schemas import HEADER_ERROR, HEADER_ERROR_CLASS, HEADER_ORIGIN, producer_options

__all__ = ["HEADER_SOURCE_KEY", "DeadLetters"]

HEADER_SOURCE_KEY = "tg-source-key"
_MAX_ERROR = 4000


class DeadLetters:
    """An idempotent producer of raw records onto one dead-letter topic."""

    def __init__(self, bootstrap: str, topic: str, *, max_request_size: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._producer: AIOKafkaProducer | None = None
        self._max = max_request_size
        self.sent = 0

    async def start(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            max_request_size=self._max,
            client_id="tidegraph-dead-letters",
            **producer_options(),
        )
        try:
            await producer.start()
        except (KafkaError, OSError) as exc:
            await producer.stop()
            raise DeliveryError(f"Kafka at {self.bootstrap} is unreachable: {exc!r}") from exc
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def send(
        self,
        realm: str,
        key: bytes | None,
        value: bytes | None,
        *,
        error: str,
        error_class: str,
        origin: str,
    ) -> asyncio.Future[Any]:
        """Buffer the dead letter; the future resolves when Kafka acknowledged it."""
        assert self._producer is not None, "start() first"
        headers = [
            (HEADER_ERROR, error[:_MAX_ERROR].encode()),
            (HEADER_ERROR_CLASS, error_class.encode()),
            (HEADER_ORIGIN, origin.encode()),
        ]
        if key is not None:
            headers.append((HEADER_SOURCE_KEY, key))
        try:
            future: asyncio.Future[Any] = await self._producer.send(
                self.topic, value, key=realm.encode(), headers=headers
            )
        except KafkaError as exc:
            raise DeliveryError(f"the dead-letter topic refused a record: {exc!r}") from exc
        self.sent += 1
        return future
