"""The in-flight slots of a model endpoint serve waiting calls by the priority of the work
they serve (``models.slots``): the oldest document and its earliest chunk first, calls
made outside any document before all, equal priorities in arrival order. No service."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegraph.indexer.models.slots import Priority, Slots, call_priority


async def _served(slots: Slots, priorities: list[Priority]) -> list[int]:
    """The order in which waiters with ``priorities`` (queued in list order while every
    slot is held) are served."""
    served: list[int] = []
    gate = asyncio.Event()

    async def holder() -> None:
        async with slots.hold(()):
            await gate.wait()

    async def waiter(index: int, priority: Priority) -> None:
        async with slots.hold(priority):
            served.append(index)
            await asyncio.sleep(0)

    holders = [asyncio.create_task(holder()) for _ in range(slots.size)]
    await asyncio.sleep(0)
    waiters = [asyncio.create_task(waiter(i, p)) for i, p in enumerate(priorities)]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*holders, *waiters)
    return served


async def test_waiters_are_served_oldest_document_and_earliest_chunk_first() -> None:
    order = await _served(Slots(1), [(3, 0), (1, 2), (2,), (1, 0), ()])
    assert order == [4, 3, 1, 2, 0]


async def test_equal_priorities_are_served_in_arrival_order() -> None:
    assert await _served(Slots(2), [(1,)] * 6) == list(range(6))


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=4),
    priorities=st.lists(
        st.lists(st.integers(min_value=0, max_value=3), max_size=2).map(tuple), max_size=12
    ),
)
def test_service_order_is_the_sorted_order_of_priority_then_arrival(
    size: int, priorities: list[Priority]
) -> None:
    # The model: a stable sort of the waiters by priority.
    expected = sorted(range(len(priorities)), key=lambda i: priorities[i])
    assert asyncio.run(_served(Slots(size), priorities)) == expected


async def test_the_priority_comes_from_the_context_a_call_is_made_in() -> None:
    slots, served = Slots(1), []
    gate = asyncio.Event()

    async def holder() -> None:
        async with slots.hold():
            await gate.wait()

    async def call(name: str, priority: Priority) -> None:
        call_priority.set(priority)  # this task's context only
        async with slots.hold():
            served.append(name)

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    tasks = [
        asyncio.create_task(call("later document", (7, 0))),
        asyncio.create_task(call("earlier document", (2, 5))),
    ]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *tasks)
    assert served == ["earlier document", "later document"]
    assert call_priority.get() == ()


async def test_a_cancelled_waiter_never_holds_a_slot() -> None:
    slots = Slots(1)
    gate = asyncio.Event()
    served: list[str] = []

    async def holder() -> None:
        async with slots.hold(()):
            await gate.wait()

    async def waiter(name: str, priority: Priority) -> None:
        async with slots.hold(priority):
            served.append(name)

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    gone = asyncio.create_task(waiter("cancelled", (0,)))
    kept = asyncio.create_task(waiter("kept", (1,)))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(held, kept)
    assert served == ["kept"]
    assert slots.in_use == 0


async def test_a_waiter_cancelled_as_it_is_granted_gives_the_slot_back() -> None:
    slots = Slots(1)
    release = asyncio.Event()

    async def holder() -> None:
        async with slots.hold(()):
            await release.wait()

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    granted = asyncio.create_task(slots.hold((0,)).__aenter__())
    await asyncio.sleep(0)
    release.set()
    await held  # the slot passes to the waiter...
    granted.cancel()  # ...which is cancelled before it runs again
    await asyncio.gather(granted, return_exceptions=True)
    assert slots.in_use == 0
    async with slots.hold(()):
        assert slots.in_use == 1
