"""The in-flight slots of one model endpoint, handed out in the order of the work they serve.

A plain semaphore serves waiting calls in arrival order, so every document being prepared
advances at the same pace and they all finish late and together: the writer, which takes
documents in log order, waits on the oldest while later ones sit prepared, and a document's
chunks finish out of the order the next chunks' contexts need. Here a call carries a
priority from the context it is made in (:data:`call_priority`; the extraction pipeline
sets it per document and chunk) and the smallest waiting priority is served next, equal
ones in arrival order. So the oldest document in preparation, and within it the earliest
chunk, is always served first, and documents finish in about the order they are written.

A call made outside any document — a contradiction question asked from inside a write
transaction, an embedding of a query — has the empty priority, smaller than any other, and
goes first: a transaction holding a realm's lock waits for it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar

__all__ = ["Priority", "Slots", "call_priority"]

Priority = tuple[int, ...]
"""Compared as tuples: smaller is served first, ``()`` before everything."""

call_priority: ContextVar[Priority] = ContextVar("call_priority", default=())
"""The priority of model calls made in this context (an asyncio task inherits it)."""


class Slots:
    """At most ``size`` holders at once; waiters served by :data:`call_priority` order."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"slots must be at least 1, got {size}")
        self.size = size
        self._free = size
        self._waiting: list[tuple[Priority, int, asyncio.Future[None]]] = []
        self._arrival = itertools.count()

    @property
    def in_use(self) -> int:
        """Slots held now."""
        return self.size - self._free

    @asynccontextmanager
    async def hold(self, priority: Priority | None = None) -> AsyncIterator[None]:
        """Hold a slot for the block; ``priority`` defaults to :data:`call_priority`."""
        await self._acquire(call_priority.get() if priority is None else priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: Priority) -> None:
        if self._free and not self._waiting:
            self._free -= 1
            return
        granted = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._arrival), granted))
        try:
            await granted
        except asyncio.CancelledError:
            # Granted just before the cancellation arrived: the slot is ours to give back.
            # Otherwise the future is cancelled and :meth:`_release` passes over it.
            if granted.done() and not granted.cancelled():
                self._release()
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():
                granted.set_result(None)  # the slot passes straight to the next waiter
                return
        self._free += 1
