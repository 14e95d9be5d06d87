"""Preparing the records to apply ahead of the writer, for the live indexer and the replay.

The writer works through records in log order while the next documents are chunked,
extracted and embedded. ``window`` bounds how far preparation runs ahead of what the
writer took (memory stays flat however large a fetch), ``running`` how many documents are
prepared at once (shared by everything a process prepares). A failure is kept as the
outcome and raised when the record is written, in order, so a model outage stops the
writer exactly at the record it concerns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from tidegraph.indexer.decide import Action, Decision
from tidegraph.indexer.extraction.prepared import PreparedDocument

DOCUMENTS_AT_ONCE = 8
"""Documents prepared at once when nothing asks for more."""


def documents_at_once(requested: int | None, model_calls: int | None) -> int:
    """How many documents a process prepares at once: ``requested`` when given, else
    enough to keep a model endpoint that allows ``model_calls`` calls at once busy.

    A document of one chunk has one call in flight at a time (its first pass, then its
    gleaning), and a longer one a single call until its lead chunk is extracted
    (:mod:`~tidegraph.indexer.extraction.fanout`). With only as many documents as the
    endpoint allows calls, a call slot idles whenever its document is between calls
    (checking an answer, embedding, waiting for the writer), and tidegraph rather than the
    model bounds the rate; half as many documents again keep the slots filled.
    """
    if requested is not None:
        return requested
    return max(DOCUMENTS_AT_ONCE, (model_calls or 0) * 3 // 2)


Outcome = PreparedDocument | BaseException
"""A prepared document, or what preparing it raised."""
Prepare = Callable[[Decision], Awaitable[PreparedDocument]]


class PrepareAhead:
    """Prepares the applying records among ``decisions`` at most ``window`` ahead."""

    def __init__(
        self,
        prepare: Prepare,
        decisions: Sequence[Decision],
        *,
        window: int,
        running: asyncio.Semaphore,
    ) -> None:
        self._prepare = prepare
        self._running = running
        self._queue = [d for d in decisions if d.action is Action.APPLY]
        self._index = {d.offset: i for i, d in enumerate(self._queue)}
        self._window = max(1, window)
        self._next = 0
        """Index of the next record to start preparing."""
        self._taken = 0
        """Index of the next record the writer may take."""
        self._tasks: dict[int, asyncio.Task[Outcome]] = {}
        self._fill()

    def _fill(self) -> None:
        while self._next < len(self._queue) and len(self._tasks) < self._window:
            decision = self._queue[self._next]
            self._tasks[decision.offset] = asyncio.create_task(self._one(decision))
            self._next += 1

    async def _one(self, decision: Decision) -> Outcome:
        async with self._running:
            try:
                return await self._prepare(decision)
            except Exception as exc:  # noqa: BLE001 - raised when written, in order
                return exc

    async def take(self, decision: Decision) -> Outcome | None:
        """The outcome of ``decision`` (``None`` unless it applies). Records passed over
        (a held realm's) stop being prepared."""
        idx = self._index.get(decision.offset)
        if idx is None or idx < self._taken:
            return None
        for passed in self._queue[self._taken : idx]:
            task = self._tasks.pop(passed.offset, None)
            if task is not None:
                task.cancel()
        self._taken = idx + 1
        self._next = max(self._next, idx + 1)
        task = self._tasks.pop(decision.offset, None)
        if task is None:
            task = asyncio.create_task(self._one(decision))
        self._fill()
        return await task

    async def all(self) -> dict[int, Outcome]:
        """Every outcome by offset."""
        out: dict[int, Outcome] = {}
        for decision in list(self._queue):
            outcome = await self.take(decision)
            if outcome is not None:
                out[decision.offset] = outcome
        return out

    async def cancel(self) -> None:
        """Stop what is still being prepared, and wait until it stopped."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        self._next = len(self._queue)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
