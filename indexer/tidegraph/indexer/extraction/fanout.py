"""A document's chunks extracted side by side, each against a context fixed by the document.

Paper §4.1 threads the document's context through its chunks: each is extracted knowing
the canonical names found before it, so a later "Babbage" is written as the "Charles
Babbage" an earlier chunk named. Strictly threaded, chunk k waits for chunk k − 1, and a
document is one model call at a time however many the endpoint allows: a long report or a
book ran at one call at a time, and a backlog of a few large documents left most call
slots idle. So chunk k's context holds the names of the chunks before
:func:`threaded_before` (k):

- chunk 0, the lead, is extracted first, with the title and source only (as before);
- chunks 1 to ``lookahead`` + 1 see the lead's names. A document's opening usually names
  its subjects, and the context keeps the first names seen (its cap), so for a long
  document these are most of what it would have held anyway;
- each later chunk k sees the names of the chunks before k − ``lookahead``.

After its lead a document has up to ``lookahead`` + 1 chunks in flight
(:func:`in_context_order`), and ``lookahead = 0`` is the strict threading. Every chunk's
context is a function of the document alone — the texts, and the answers for the chunks
it sees — never of timing or of the endpoint's bound, so a replay computes the same
contexts, hence the same extraction cache keys, and calls no model.

What a chunk no longer sees are the names of the chunks just before it, and what those
lend a later chunk is mostly the full name behind a short form. The document pass
(:func:`resolve_short_forms`) gives that back from the names of the whole document, once
every chunk is extracted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tidegraph.indexer.extraction.interfaces import Chunk
from tidegraph.indexer.extraction.prepared import EntityFact, RelationFact
from tidegraph.indexer.graph import CONCEPT, short_forms

__all__ = [
    "LOOKAHEAD",
    "ChunkFacts",
    "in_context_order",
    "resolve_short_forms",
    "threaded_before",
]

LOOKAHEAD = 24
"""Chunks extracted ahead of the last one whose names a chunk's context holds. A document
then keeps up to 25 calls busy: enough for an endpoint allowing 16 at once, with room for
each chunk's time between its calls (the cache, checking the answer)."""

ChunkFacts = tuple[Chunk, tuple[EntityFact, ...], tuple[RelationFact, ...], str | None]
"""A chunk, the structure accepted for it, and why it has none when it has none."""

T = TypeVar("T")


def threaded_before(ordinal: int, lookahead: int) -> int:
    """How many of the document's first chunks lend their names to chunk ``ordinal``'s
    context: none for the lead, the lead's for the next ``lookahead`` + 1, then all but
    the ``lookahead`` chunks just before it."""
    if ordinal == 0:
        return 0
    return max(1, ordinal - lookahead)


async def in_context_order(
    chunks: Sequence[Chunk],
    lookahead: int,
    extract: Callable[[Chunk, Sequence[T]], Coroutine[Any, Any, T]],
) -> list[T]:
    """``extract(chunk, before)`` for every chunk, in order of position, each started as
    soon as the results of the chunks its context holds (``before``, the first
    :func:`threaded_before` of them) are in; the results in the chunks' order.

    The first exception (a model outage) cancels the extractions still running and
    propagates: a document is never handed on half-extracted.
    """
    results: dict[int, T] = {}
    done = 0
    """Chunks 0 … done − 1 have their results."""
    started = 0
    running: dict[asyncio.Task[T], int] = {}
    try:
        while started < len(chunks) or running:
            while started < len(chunks) and threaded_before(started, lookahead) <= done:
                before = threaded_before(started, lookahead)
                prefix = [results[k] for k in range(before)]
                task = asyncio.create_task(extract(chunks[started], prefix))
                running[task] = started
                started += 1
            finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                if task.exception() is None:
                    results[running.pop(task)] = task.result()
            for task in finished:
                failure = task.exception() if task in running else None
                if failure is not None:
                    raise failure  # the others are collected below
            while done in results:
                done += 1
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    return [results[k] for k in range(len(chunks))]


def resolve_short_forms(facts: Sequence[ChunkFacts]) -> list[ChunkFacts]:
    """The document pass: a one-word entity that is the short form of exactly one longer
    name the document gives (:func:`~tidegraph.indexer.graph.resolution.short_forms`) is
    written as that name, the short form kept as its alias, in every chunk — what the
    threaded context made the extractor do for the names it knew, now also for a full
    name given later than the short one. Two kinds that differ stay apart (a ship
    "Kestrel" is not "Mara Kestrel" the person); ``Concept`` says nothing about kind."""
    index = short_forms(e.name for _, entities, _, _ in facts for e in entities)
    if not index:
        return list(facts)
    kinds: dict[str, set[str]] = {}
    for _, entities, _, _ in facts:
        for e in entities:
            kinds.setdefault(_key(e.name), set()).add(e.type)
    out: list[ChunkFacts] = []
    for chunk, entities, relations, note in facts:
        renamed = {
            _key(e.name): full
            for e in entities
            if (full := index.get(_key(e.name))) is not None
            and _key(full) != _key(e.name)
            and _same_kind(e.type, kinds.get(_key(full), set()))
        }
        if renamed:
            entities = tuple(_renamed_entity(e, renamed) for e in entities)
            relations = tuple(
                replace(
                    r,
                    subject=renamed.get(_key(r.subject), r.subject),
                    object=renamed.get(_key(r.object), r.object),
                )
                for r in relations
            )
        out.append((chunk, entities, relations, note))
    return out


def _key(name: str) -> str:
    return " ".join(name.split()).lower()


def _same_kind(kind: str, kinds: Iterable[str]) -> bool:
    specific = {k for k in kinds if k and k != CONCEPT}
    return not kind or kind == CONCEPT or not specific or kind in specific


def _renamed_entity(entity: EntityFact, renamed: dict[str, str]) -> EntityFact:
    full = renamed.get(_key(entity.name))
    if full is None:
        return entity
    aliases = tuple(dict.fromkeys((*entity.aliases, entity.name)))
    return EntityFact(full, entity.type, entity.description, aliases)
