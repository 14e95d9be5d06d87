"""Degrade fast, recover fast: the query service's view of whether PostgreSQL answers.

Why a gate in front of the pool: psycopg_pool waits its full timeout for a connection that
cannot be made, and backs off exponentially between reconnection attempts, so during an
outage every request waited ~10 s for its 503 and the service lagged ~20 s behind the
database coming back. The gate keeps one bit, *up* or *down*:

1. While up, each request's database work runs in a child task. If it is still running after
   ``probe_after`` seconds, the gate checks the database (a fresh connection and ``SELECT 1``
   within ``probe_timeout``); a transient error or pool timeout triggers the same check.
2. A failed check turns the gate down: every request waiting on the database is answered
   503 at once (its child task is cancelled and cleans up in the background: psycopg may
   spend seconds cancelling a query on a dead link), and new requests get 503 with
   ``Retry-After`` without touching the pool.
3. While down, the check repeats every ``recheck_every`` seconds; the first success turns the
   gate up. Stale pooled connections are dropped by the pool's own ``check`` on checkout
   (:func:`tidegraph.query_service.db.make_pool`), so the first request after recovery
   gets a live connection.

Slow is not down. A check is one round trip on a connection the gate keeps between checks
(a fresh one, made as the pool makes them, when it has none or the kept one broke), so it
does not pay a backend start and a password exchange on a loaded machine. And a check that
times out while other requests' database work went on completing meanwhile means the
server is slow, not gone: the gate stays up, those requests keep their answers (bounded by
``work_timeout``), and nothing is shed. Only a server that answers nobody within
``probe_timeout`` (stopped, unreachable, frozen, or so slow that no request completes) turns
it down. Each check's outcome — ``answered``, ``slow`` or ``down`` — is counted (``observe``;
the app exports ``tidegraph_db_checks_total{result}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from tidegraph.query_service.errors import Unavailable
from tidegraph.schemas import MAIN
from tidegraph.store import Cluster, is_transient

log = logging.getLogger(__name__)

T = TypeVar("T")
Work = Callable[[AsyncConnection[Any]], Awaitable[T]]
RETRY_AFTER_SECONDS = 1


@dataclass(frozen=True)
class GateTimings:
    """How quickly the gate notices an outage and its end (seconds)."""

    probe_after: float = 0.2
    """A request still waiting on the database this long makes the gate check it."""
    probe_timeout: float = 0.6
    """A check (connect and ``SELECT 1``) slower than this counts as a failure."""
    recheck_every: float = 0.2
    """Pause between checks while the database is down."""
    work_timeout: float = 30.0
    """Longest a request may spend on the database before its 503."""


class DatabaseDown(Unavailable):
    """PostgreSQL did not answer the gate's last check; retry after ``retry_after`` seconds."""

    code = "database_unavailable"
    retry_after = RETRY_AFTER_SECONDS

    def __init__(self, since: float, reason: str) -> None:
        super().__init__(
            f"the database is unreachable (for {max(0.0, time.monotonic() - since):.1f}s: "
            f"{reason}); retry in {RETRY_AFTER_SECONDS}s"
        )


class DatabaseGate:
    """Runs request work on pooled connections, answering 503 fast while PostgreSQL is down."""

    def __init__(
        self,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        timings: GateTimings,
        server: str = MAIN,
    ) -> None:
        self.pool = pool
        self.timings = timings
        self.server = server
        self._down_since: float | None = None
        self._reason = ""
        self._outage: asyncio.Future[None] | None = None
        self._checker: asyncio.Task[None] | None = None
        self._orphans: set[asyncio.Task[Any]] = set()
        self._probe: AsyncConnection[Any] | None = None
        self._last_answer = float("-inf")
        self.observe: Callable[[str], None] = _ignore
        """Told each check's outcome: ``answered``, ``slow`` or ``down``."""

    @property
    def up(self) -> bool:
        """False from a failed check until the next successful one."""
        return self._down_since is None

    def raise_if_down(self) -> None:
        if self._down_since is not None:
            raise DatabaseDown(self._down_since, self._where(self._reason))

    def _where(self, reason: str) -> str:
        return reason if self.server == MAIN else f"server {self.server!r}: {reason}"

    async def run(self, work: Work[T], *, within: float | None = None) -> T:
        """``work(conn)`` on a pooled connection, or a 503 as soon as the gate is down."""
        self.raise_if_down()
        limit = self.timings.work_timeout if within is None else within
        child = asyncio.create_task(self._with_connection(work), name="db-work")
        waiters: set[asyncio.Future[Any]] = {child, self._outage_future()}
        try:
            done, _ = await asyncio.wait(
                waiters,
                timeout=min(limit, self.timings.probe_after),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if not done:
                self.suspect()
                done, _ = await asyncio.wait(
                    waiters,
                    timeout=max(0.0, limit - self.timings.probe_after),
                    return_when=asyncio.FIRST_COMPLETED,
                )
        except BaseException:
            self._abandon(child)
            raise
        if child in done:
            return self._result(child)
        self._abandon(child)
        self.raise_if_down()
        self.suspect()
        raise Unavailable(f"the database did not answer within {limit:g}s; retry later")

    def _result(self, child: asyncio.Task[T]) -> T:
        exc = child.exception()
        if exc is None:
            return child.result()
        if isinstance(exc, PoolTimeout) or is_transient(exc):
            self.suspect()
        raise exc

    async def _with_connection(self, work: Work[T]) -> T:
        async with self.pool.connection() as conn:
            result = await work(conn)
        self._last_answer = time.monotonic()  # the database answered a request
        return result

    def _abandon(self, child: asyncio.Task[Any]) -> None:
        """Cancel ``child`` without waiting for it; keep a reference until it ends."""
        child.cancel()
        self._orphans.add(child)
        child.add_done_callback(self._orphan_done)

    def _orphan_done(self, child: asyncio.Task[Any]) -> None:
        self._orphans.discard(child)
        if not child.cancelled():
            child.exception()  # retrieved: the answer has gone out already

    def _outage_future(self) -> asyncio.Future[None]:
        if self._outage is None or self._outage.done():
            self._outage = asyncio.get_running_loop().create_future()
        return self._outage

    # --- checks ---------------------------------------------------------------------------------

    def suspect(self) -> None:
        """Check the database soon, unless a check is already running."""
        if self._checker is None or self._checker.done():
            self._checker = asyncio.create_task(self._check_loop(), name="db-gate-check")

    async def _check_loop(self) -> None:
        while True:
            started = time.monotonic()
            problem = await self.check()
            if problem is None:
                self.observe("answered")
                self._mark_up()
                return
            if problem.startswith(_NO_ANSWER) and self._last_answer >= started:
                # requests completed while the check waited: slow, not gone
                self.observe("slow")
                log.info("database slow (%s) but answering requests: not an outage", problem)
                self._mark_up()
                return
            self.observe("down")
            self._mark_down(problem)
            await asyncio.sleep(self.timings.recheck_every)

    async def check(self) -> str | None:
        """``None`` when the database answers ``SELECT 1`` within ``probe_timeout`` — on the
        connection kept from the last check, else on a fresh one — else the reason.

        The attempt runs as a task of its own and is abandoned, not awaited, when late:
        cancelling a statement in flight makes psycopg ask the server to cancel it and wait
        for that, which on an unresponsive link takes seconds the check must not spend."""
        attempt = asyncio.create_task(self._answer(), name="db-gate-probe")
        done, _ = await asyncio.wait({attempt}, timeout=self.timings.probe_timeout)
        if not done:
            self._abandon(attempt)  # it closes its connection once the cancellation is over
            return f"{_NO_ANSWER} {self.timings.probe_timeout:g}s"
        exc = attempt.exception()
        if exc is None:
            return None
        if isinstance(exc, psycopg.Error):
            return _first_line(exc)
        if isinstance(exc, OSError):
            return str(exc)
        raise exc

    async def _answer(self) -> None:
        """``SELECT 1`` on the kept connection, else on a fresh one, kept on success; a
        connection that failed (or whose attempt was abandoned) is closed, never kept."""
        kept, self._probe = self._probe, None
        if kept is not None:
            try:
                await kept.execute("SELECT 1")
            except psycopg.Error:
                await _close(kept)  # broken since the last check: a fresh one decides
            except BaseException:
                await _close(kept)
                raise
            else:
                self._probe = kept
                return
        conn = await self._connect()
        try:
            await conn.execute("SELECT 1")
        except BaseException:
            await _close(conn)
            raise
        self._probe = conn

    async def _connect(self) -> AsyncConnection[Any]:
        """A connection outside the pool, made the way the pool makes them."""
        conninfo, kwargs = self.pool.conninfo, self.pool.kwargs
        if not isinstance(conninfo, str) or not isinstance(kwargs, dict | None):
            raise psycopg.InterfaceError("the gate needs a pool with a static conninfo")
        options = dict(kwargs or {})
        options["connect_timeout"] = max(2, int(self.timings.probe_timeout + 0.999))
        return await AsyncConnection.connect(conninfo, **options)

    def _mark_down(self, reason: str) -> None:
        self._reason = reason
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning(
                "database unreachable: %s; answering 503 until it is back", self._where(reason)
            )
        if self._outage is not None and not self._outage.done():
            self._outage.set_result(None)

    def _mark_up(self) -> None:
        if self._down_since is not None:
            log.warning(
                "database answers again after %.1fs%s",
                time.monotonic() - self._down_since,
                "" if self.server == MAIN else f" (server {self.server!r})",
            )
        self._down_since = None
        self._reason = ""

    async def aclose(self) -> None:
        """Stop checking; cancel work left behind by answered requests."""
        tasks = [t for t in (self._checker, *self._orphans) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._probe is not None:
            conn, self._probe = self._probe, None
            await _close(conn)


class Gates:
    """A gate per server realms live on (``main``'s given, the others made when first
    needed over the cluster's pools): one server's outage answers 503 for its realms only."""

    def __init__(self, cluster: Cluster, main: DatabaseGate, observe: Callable[[str], None]):
        self.cluster = cluster
        self._gates = {MAIN: main}
        self._observe = observe
        main.observe = observe

    async def of(self, server: str) -> DatabaseGate:
        gate = self._gates.get(server)
        if gate is None:
            pool = self.cluster.pool(server)
            await pool.open(wait=False)
            gate = DatabaseGate(pool, self._gates[MAIN].timings, server)
            gate.observe = self._observe
            self._gates[server] = gate
        return gate

    async def standby(self, server: str, name: str) -> DatabaseGate:
        """The gate of ``server``'s standby ``name`` (keyed ``server/name``): a standby
        that stops answering is passed over by reads, never waited on by each."""
        label = f"{server}/{name}"
        gate = self._gates.get(label)
        if gate is None:
            pool = self.cluster.standby_pool(server, name)
            await pool.open(wait=False)
            gate = DatabaseGate(pool, self._gates[MAIN].timings, label)
            gate.observe = self._observe
            self._gates[label] = gate
        return gate

    async def aclose(self) -> None:
        """Close every gate but ``main``'s (its owner closes it)."""
        for server, gate in list(self._gates.items()):
            if server != MAIN:
                await gate.aclose()


_NO_ANSWER = "no answer within"


def _ignore(_: str) -> None:
    return None


async def _close(conn: AsyncConnection[Any]) -> None:
    with contextlib.suppress(psycopg.Error, OSError):
        await conn.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
