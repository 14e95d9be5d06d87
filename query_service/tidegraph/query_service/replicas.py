"""Realm reads from the streaming standbys of the realm's server, with read-your-writes.

Every realm read answers with the realm's head sequence (``X-Tidegraph-Head-Sequence``): the
read reflects at least that commit. A caller that must see its own writes sends back the
highest sequence it has seen (``X-Tidegraph-Min-Sequence`` or ``min_seq``). A read then goes:

1. The server's turn-taker picks the next of its nodes (the primary, unless told to leave
   reads to the standbys, then each standby), round robin, so reads spread.
2. On a standby, with a required sequence S: the realm's ``meta.seq`` is read on the standby
   itself (:func:`~tidegraph.store.standbys.realm_head`; exact, since that row is replicated
   with the commit) and read again every ``poll`` seconds until it reaches S or ``wait``
   has passed; then the work runs on the same connection, so it sees at least S.
3. On a standby without one: its replay lag (measured at most every ``lag_every`` seconds on
   the connection the read already holds) must be within ``max_lag``.
4. A standby behind, lagging, down (its own outage gate) or failing in any way hands the read
   to the next node, the primary last: a standby never fails a read, it only slows one by at
   most ``wait`` (a standby that stops answering: until its gate's check gives up on it).

The change feed is read through :meth:`ReadRouter.fenced`: a page is shown only once
every standby of the server has replayed what the node that read it had seen
(:mod:`tidegraph.store.standby_fence`), so a failover to any of them never takes back a change
already shown; a page no standby passes within ``fence_wait`` is a 503 ``standbys_behind``.

Writes never come here: telemetry and the catalogue go to the primary through
:meth:`~tidegraph.query_service.service.Service.run`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import PoolTimeout

from tidegraph.query_service.errors import StandbysBehind, Unavailable
from tidegraph.query_service.gate import DatabaseGate, Gates
from tidegraph.query_service.metrics import ServiceMetrics
from tidegraph.schemas import Standby
from tidegraph.store import (
    Fence,
    RealmInfo,
    StandbyFence,
    fence_after_read,
    has_replayed,
    realm_head,
    replay_lag,
)

T = TypeVar("T")
Work = Callable[[AsyncConnection[Any]], Awaitable[T]]


class Reader(Protocol):
    """:meth:`ReadRouter.read` or :meth:`ReadRouter.on_primary`: runs work on some node."""

    async def __call__(self, meta: RealmInfo, work: Work[T], /) -> T: ...


@dataclass
class ReadTicket:
    """One request's consistency: what it requires, and what answered it."""

    min_seq: int | None = None
    """The realm commit sequence the caller requires the answer to reflect."""
    head_seq: int | None = None
    """The realm's head sequence where the read ran (the answer reflects at least it)."""
    served_by: str | None = None
    """The node that answered: the server's name, or ``server/standby``."""


TICKET: ContextVar[ReadTicket | None] = ContextVar("tidegraph_read_ticket", default=None)
"""The current request's ticket; set per request by the app's middleware."""


@dataclass(frozen=True)
class ReplicaPolicy:
    """When a standby may answer a read (seconds)."""

    wait: float = 0.2
    """Longest a read waits for a standby to apply its required sequence."""
    max_lag: float = 5.0
    """A standby lagging more than this answers no read that requires no sequence."""
    lag_every: float = 1.0
    """A standby's lag is measured again after this long."""
    poll: float = 0.01
    """Pause between two looks at a standby's head sequence while waiting."""
    primary_reads: bool = True
    """The primary takes its turn with the standbys; off: it answers only their misses."""
    fence_wait: float = 2.0
    """Longest a change feed page waits for every standby to replay what it read."""


class _Behind:
    """What a standby's attempt returns instead of an answer: why it passed the read on."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


_UNUSABLE = (psycopg.Error, PoolTimeout, Unavailable, OSError)
"""What a standby may raise that hands the read to the next node."""


class ReadRouter:
    """Picks the node of a realm's server that answers a read (module docstring)."""

    def __init__(self, gates: Gates, policy: ReplicaPolicy, metrics: ServiceMetrics) -> None:
        self.gates = gates
        self.policy = policy
        self.metrics = metrics
        self._turns: dict[str, itertools.count[int]] = {}
        self._lags: dict[str, tuple[float, float | None]] = {}
        self._fence = _GatedFence(gates, policy.poll)

    async def read(self, meta: RealmInfo, work: Work[T]) -> T:
        """``work`` on a node of ``meta``'s server that satisfies the request's ticket."""
        ticket = TICKET.get() or ReadTicket()
        server = meta.server
        for standby in self._order(server):
            gate = await self.gates.standby(server, standby)
            node = f"{server}/{standby}"
            if not gate.up:
                self._passed(server, node, "unavailable")
                continue
            if ticket.min_seq is None and self._known_lagging(node):
                self._passed(server, node, "lagging")
                continue
            outcome = await self._try(gate, node, meta, ticket.min_seq, work)
            if isinstance(outcome, _Behind):
                self._passed(server, node, outcome.reason)
                continue
            result, head = outcome
            self._served(ticket, node, head, "standby")
            return result
        reason = "turn" if self.gates.cluster.standbys(server) else "no_standby"
        return await self._on_primary(ticket, meta, work, reason)

    async def fenced(self, meta: RealmInfo, work: Work[T], read: Reader) -> T:
        """``work`` as ``read`` (:meth:`read` or :meth:`on_primary`) runs it, answered only
        once every standby of the server has what the node it ran on had seen (module
        docstring)."""
        standbys = self.gates.cluster.servers.standbys(meta.server)
        if not standbys:
            return await read(meta, work)

        async def with_fence(conn: AsyncConnection[Any]) -> tuple[T, Fence]:
            result = await work(conn)
            return result, await fence_after_read(conn)

        result, fence = await read(meta, with_fence)
        lagging = await self._fence.wait(standbys, fence, self.policy.fence_wait)
        for label in lagging:
            self.metrics.feed_held_back.labels(meta.server, label).inc()
        if lagging:
            raise StandbysBehind(meta.realm, lagging)
        return result

    async def on_primary(self, meta: RealmInfo, work: Work[T]) -> T:
        """``work`` on the primary, with the head noted: reads of a realm's copies, which
        no required sequence of the realm's describes."""
        return await self._on_primary(TICKET.get() or ReadTicket(), meta, work, "copy")

    async def _on_primary(
        self, ticket: ReadTicket, meta: RealmInfo, work: Work[T], reason: str
    ) -> T:
        primary = await self.gates.of(meta.server)
        result, head = await primary.run(lambda conn: _with_head(conn, meta, work))
        self._served(ticket, meta.server, head, reason)
        return result

    def _order(self, server: str) -> list[str]:
        """The standbys to try in turn; the primary follows them (it answers the rest)."""
        standbys = list(self.gates.cluster.standbys(server))
        if not standbys:
            return []
        slots: list[str | None] = [None, *standbys] if self.policy.primary_reads else [*standbys]
        pick = slots[next(self._turns.setdefault(server, itertools.count())) % len(slots)]
        if pick is None:
            return []
        first = standbys.index(pick)
        return standbys[first:] + standbys[:first]

    async def _try(
        self, gate: DatabaseGate, node: str, meta: RealmInfo, need: int | None, work: Work[T]
    ) -> tuple[T, int] | _Behind:
        async def attempt(conn: AsyncConnection[Any]) -> tuple[T, int] | _Behind:
            if need is None:
                lag = await self._lag(conn, node)
                if lag is None or lag > self.policy.max_lag:
                    return _Behind("lagging")
                return await _with_head(conn, meta, work)
            head = await self._reach(conn, meta, need)
            if head < need:
                return _Behind("behind")
            return await work(conn), head

        try:
            return await gate.run(attempt)
        except _UNUSABLE:
            return _Behind("failed")

    async def _reach(self, conn: AsyncConnection[Any], meta: RealmInfo, need: int) -> int:
        """The realm's head on this standby once it reaches ``need``, or the last one seen
        when ``wait`` runs out first."""
        deadline = time.monotonic() + self.policy.wait
        while True:
            head = await realm_head(conn, meta.schema)
            left = deadline - time.monotonic()
            if head >= need or left <= 0:
                return head
            await asyncio.sleep(min(self.policy.poll, left))

    async def _lag(self, conn: AsyncConnection[Any], node: str) -> float | None:
        """The node's replay lag, measured again when older than ``lag_every``."""
        now = time.monotonic()
        seen = self._lags.get(node)
        if seen is not None and now - seen[0] < self.policy.lag_every:
            return seen[1]
        lag = await replay_lag(conn)
        self._lags[node] = (now, lag)
        server, _, standby = node.partition("/")
        self.metrics.standby_lag.labels(server, standby).set(float("inf") if lag is None else lag)
        return lag

    def _known_lagging(self, node: str) -> bool:
        """Measured lagging within ``lag_every``: passed over without taking a connection."""
        seen = self._lags.get(node)
        if seen is None or time.monotonic() - seen[0] >= self.policy.lag_every:
            return False
        return seen[1] is None or seen[1] > self.policy.max_lag

    def _passed(self, server: str, node: str, reason: str) -> None:
        self.metrics.standby_skips.labels(server, node, reason).inc()

    def _served(self, ticket: ReadTicket, node: str, head: int, reason: str) -> None:
        ticket.served_by = node
        ticket.head_seq = head
        self.metrics.realm_reads.labels(node, reason).inc()


class _GatedFence(StandbyFence):
    """The standby fence asked through each standby's outage gate and pool, which the
    service already holds: a standby whose gate is down has nothing, as far as it knows."""

    def __init__(self, gates: Gates, poll: float) -> None:
        super().__init__(poll)
        self.gates = gates

    async def has(self, standby: Standby, fence: Fence) -> bool:
        gate = await self.gates.standby(standby.server, standby.name)
        if not gate.up:
            return False
        try:
            return await gate.run(lambda conn: has_replayed(conn, fence))
        except _UNUSABLE:
            return False


async def _with_head(conn: AsyncConnection[Any], meta: RealmInfo, work: Work[T]) -> tuple[T, int]:
    """The realm's head, then ``work``: the answer reflects at least that head."""
    head = await realm_head(conn, meta.schema)
    return await work(conn), head
