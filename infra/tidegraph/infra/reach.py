"""Reaching PostgreSQL from a command: one line when it does not answer, or a wait that says
what it waits for.

One-shot commands (``realm``, ``diff``, ``replay``, ``status``) fail at once with
``tidegraph: PostgreSQL at … does not answer (…) — run `tidegraph up` …``. Services
(``indexer``, ``serve``) wait instead: they say once what they wait for and then repeat it at
a bounded rate, so a log never fills with pool warnings while the database is down.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from tidegraph.infra.errors import ServiceUnreachableError
from tidegraph.infra.local_kafka import brokers_answering
from tidegraph.infra.local_pg import first_line, redact
from tidegraph.schemas import kafka_client_options

PG_HINT = "run `tidegraph up`, or point --pg-dsn / TIDEGRAPH_PG_DSN at a running server"
KAFKA_HINT = (
    "run `tidegraph up`, or point --bootstrap / TIDEGRAPH_KAFKA_BOOTSTRAP at a running broker"
)
CONNECT_TIMEOUT = 5
WAIT_REPEAT_SECONDS = 30.0

log = logging.getLogger("tidegraph.infra")


def pg_unreachable(dsn: str, exc: BaseException) -> ServiceUnreachableError:
    """The one-line error for a server that refused or did not answer a connection."""
    return ServiceUnreachableError("PostgreSQL", redact(dsn), first_line(exc), hint=PG_HINT)


def kafka_unreachable(bootstrap: str, exc: BaseException | str) -> ServiceUnreachableError:
    """The one-line error for a broker that does not answer."""
    cause = exc if isinstance(exc, str) else first_line(exc)
    return ServiceUnreachableError("Kafka", bootstrap, cause, hint=KAFKA_HINT)


@asynccontextmanager
async def connect_pg(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """An autocommit connection, or :class:`ServiceUnreachableError` when none can be made."""
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        )
    except psycopg.OperationalError as exc:
        raise pg_unreachable(dsn, exc) from None
    async with conn:
        yield conn


async def check_pg(dsn: str) -> None:
    """Raise :class:`ServiceUnreachableError` unless the server accepts a connection."""
    async with connect_pg(dsn):
        return


async def wait_until_answering(
    service: str,
    address: str,
    probe: Callable[[], Awaitable[str | None]],
    hint: str,
    *,
    say: Callable[[str], None] | None = None,
    repeat: float = WAIT_REPEAT_SECONDS,
    poll: float = 1.0,
) -> None:
    """Return once ``probe`` answers None (it returns the cause otherwise); meanwhile say what
    we wait for once, then every ``repeat`` seconds — never once per attempt."""
    tell = say or log.warning
    started = time.monotonic()
    told_at: float | None = None
    while (cause := await probe()) is not None:
        now = time.monotonic()
        if told_at is None or now - told_at >= repeat:
            waited = "" if told_at is None else f" (for {now - started:.0f}s)"
            tell(f"waiting for {service} at {address}{waited}: {cause} — {hint}")
            told_at = now
        await asyncio.sleep(poll)
    if told_at is not None:
        tell(f"{service} at {address} answers after {time.monotonic() - started:.0f}s")


async def wait_for_pg(dsn: str, **options: Any) -> None:
    """Wait until PostgreSQL at ``dsn`` accepts a connection (see :func:`wait_until_answering`)."""

    async def probe() -> str | None:
        try:
            await check_pg(dsn)
        except ServiceUnreachableError as exc:
            return exc.cause
        return None

    await wait_until_answering("PostgreSQL", redact(dsn), probe, PG_HINT, **options)


async def check_kafka(bootstrap: str) -> None:
    """Raise :class:`ServiceUnreachableError` unless a broker answers a metadata request
    (asked quietly: a one-shot command prints only its own line)."""
    if not await asyncio.to_thread(brokers_answering, bootstrap, timeout=5.0):
        raise kafka_unreachable(bootstrap, "no metadata answer")


async def log_ends(bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    """(topic, partition) → the offset the next record will get, for every partition of
    ``topic`` (none when the topic does not exist)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, **kafka_client_options()
    )
    try:
        await admin.start()
        [described] = await admin.describe_topics([topic])
        if described["error_code"] != 0:
            return {}
        tps = [TopicPartition(topic, int(p["partition"])) for p in described["partitions"]]
        await consumer.start()
        ends = await consumer.end_offsets(tps)
        return {(tp.topic, tp.partition): int(end) for tp, end in ends.items()}
    except (KafkaError, OSError) as exc:
        raise kafka_unreachable(bootstrap, exc) from None
    finally:
        await consumer.stop()
        await admin.close()


async def wait_for_kafka(bootstrap: str, **options: Any) -> None:
    """Wait until a broker at ``bootstrap`` answers a metadata request."""

    async def probe() -> str | None:
        answers = await asyncio.to_thread(brokers_answering, bootstrap, timeout=3.0)
        return None if answers else "no metadata answer"

    await wait_until_answering("Kafka", bootstrap, probe, KAFKA_HINT, **options)


async def until_stopped(wait: Awaitable[None]) -> bool:
    """Run ``wait`` unless SIGTERM or SIGINT comes first; True when it finished.

    A service told to stop while it still waits for a dependency exits quietly instead of
    with a traceback from the interrupted wait.
    """
    task = asyncio.ensure_future(wait)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise
        return False
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return True
