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
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from tidegraph.infra.errors import ServiceUnreachableError
from tidegraph.infra.local_pg import first_line, redact

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


async def wait_for_pg(
    dsn: str,
    *,
    say: Callable[[str], None] | None = None,
    repeat: float = WAIT_REPEAT_SECONDS,
    poll: float = 1.0,
) -> None:
    """Return once the server accepts a connection; meanwhile say so once, then every
    ``repeat`` seconds (not on every attempt)."""
    tell = say or log.warning
    started = time.monotonic()
    told_at: float | None = None
    while True:
        try:
            await check_pg(dsn)
        except ServiceUnreachableError as exc:
            now = time.monotonic()
            if told_at is None or now - told_at >= repeat:
                waited = "" if told_at is None else f" (for {now - started:.0f}s)"
                tell(f"waiting for PostgreSQL at {exc.address}{waited}: {exc.cause} — {PG_HINT}")
                told_at = now
            await asyncio.sleep(poll)
            continue
        if told_at is not None:
            tell(f"PostgreSQL at {redact(dsn)} answers after {time.monotonic() - started:.0f}s")
        return
