"""A document's chunks extracted side by side (``extraction.fanout``), with no service.

Which earlier chunks lend their names to each chunk's context is fixed by the document
alone, whatever order the extractions finish in (so a replay computes the same contexts,
hence the same cache keys); a document has up to ``lookahead + 1`` chunks in flight once its
lead is in; a failure stops the document; and the document pass gives a one-word short
form the one full name the document gives it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegraph.indexer.extraction.fanout import (
    ChunkFacts,
    in_context_order,
    resolve_short_forms,
    threaded_before,
)
from tidegraph.indexer.extraction.interfaces import Chunk
from tidegraph.indexer.extraction.prepared import EntityFact, RelationFact
from tidegraph.indexer.graph.resolution import short_forms


def _chunks(n: int) -> list[Chunk]:
    return [Chunk(k, f"chunk {k}") for k in range(n)]


def test_the_lead_first_then_its_names_then_all_but_the_last_lookahead() -> None:
    # Written out from the rule, for a lookahead of 2.
    assert [threaded_before(k, 2) for k in range(8)] == [0, 1, 1, 1, 2, 3, 4, 5]
    # A lookahead of 0 is the strict threading: every chunk sees all before it.
    assert [threaded_before(k, 0) for k in range(5)] == [0, 1, 2, 3, 4]


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=30),
    lookahead=st.integers(min_value=0, max_value=6),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_each_chunk_sees_exactly_the_chunks_its_rule_names_whatever_finishes_first(
    count: int, lookahead: int, seed: int
) -> None:
    rng = random.Random(seed)
    delays = [rng.choice([0, 0, 1, 2, 3]) for _ in range(count)]
    seen: dict[int, list[int]] = {}
    in_flight, most = 0, 0

    async def extract(chunk: Chunk, before: Sequence[int]) -> int:
        nonlocal in_flight, most
        seen[chunk.ordinal] = list(before)
        in_flight += 1
        most = max(most, in_flight)
        for _ in range(delays[chunk.ordinal]):
            await asyncio.sleep(0)
        in_flight -= 1
        return chunk.ordinal

    results = asyncio.run(in_context_order(_chunks(count), lookahead, extract))
    assert results == list(range(count))
    for k in range(count):
        # The model: the lead sees nothing; a chunk within lookahead + 1 of it sees the
        # lead; a later one sees every chunk but the lookahead just before it.
        want = 0 if k == 0 else (1 if k <= lookahead + 1 else k - lookahead)
        assert seen[k] == list(range(want))
    assert most <= lookahead + 1


async def test_a_long_document_keeps_lookahead_plus_one_chunks_in_flight() -> None:
    in_flight, most = 0, 0

    async def extract(chunk: Chunk, before: Sequence[int]) -> int:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.001)
        in_flight -= 1
        return chunk.ordinal

    await in_context_order(_chunks(300), 24, extract)
    assert most == 25


async def test_a_failure_cancels_the_document_and_propagates() -> None:
    cancelled: list[int] = []

    async def extract(chunk: Chunk, before: Sequence[int]) -> int:
        if chunk.ordinal == 3:
            await asyncio.sleep(0.01)
            raise TimeoutError("the endpoint went away")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(chunk.ordinal)
            raise
        return chunk.ordinal

    with pytest.raises(TimeoutError, match="went away"):
        await in_context_order(_chunks(8), 24, extract)
    assert sorted(cancelled) == [1, 2, 4, 5, 6, 7]


def _facts(*chunks: tuple[list[tuple[str, str]], list[tuple[str, str]]]) -> list[ChunkFacts]:
    out: list[ChunkFacts] = []
    for k, (entities, relations) in enumerate(chunks):
        out.append(
            (
                Chunk(k, f"chunk {k}"),
                tuple(EntityFact(n, t, "", ()) for n, t in entities),
                tuple(
                    RelationFact(s, "worked_with", o, False, "", 1.0, None, None)
                    for s, o in relations
                ),
                None,
            )
        )
    return out


def test_a_short_form_takes_the_full_name_the_document_gives_before_or_after_it() -> None:
    facts = _facts(
        ([("Babbage", "Person"), ("Ada Lovelace", "Person")], [("Babbage", "Ada Lovelace")]),
        ([("Charles Babbage", "Person")], []),
        ([("babbage", "Concept"), ("Lovelace", "Person")], [("Lovelace", "babbage")]),
    )
    out = resolve_short_forms(facts)
    names = [[(e.name, e.aliases) for e in es] for _, es, _, _ in out]
    assert names == [
        [("Charles Babbage", ("Babbage",)), ("Ada Lovelace", ())],
        [("Charles Babbage", ())],
        [("Charles Babbage", ("babbage",)), ("Ada Lovelace", ("Lovelace",))],
    ]
    ends = [[(r.subject, r.object) for r in rs] for _, _, rs, _ in out]
    assert ends == [
        [("Charles Babbage", "Ada Lovelace")],
        [],
        [("Ada Lovelace", "Charles Babbage")],
    ]


def test_an_ambiguous_or_other_kind_short_form_stays_as_it_is() -> None:
    facts = _facts(
        ([("Mara Ellison", "Person"), ("Lena Ellison", "Person"), ("Ellison", "Person")], []),
        ([("Tobias Rook", "Person"), ("Rook", "Artifact")], []),
    )
    assert resolve_short_forms(facts) == facts


@given(st.lists(st.sampled_from(["Ada", "Ada Byron", "Lady Ada", "Byron", "Lord Byron"])))
def test_a_word_stands_for_a_name_when_exactly_one_name_ends_with_it(names: list[str]) -> None:
    # The model: for each word, the distinct multi-word names ending with it.
    ending: dict[str, set[str]] = {}
    for name in names:
        if " " in name:
            ending.setdefault(name.split()[-1].lower(), set()).add(name)
    assert short_forms(names) == {w: next(iter(n)) for w, n in ending.items() if len(n) == 1}
