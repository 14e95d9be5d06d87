"""Symmetric predicates stored once per unordered pair.

A realm's ``symmetric_predicates`` (``worked_with``, ``ally_of``, ``married_to`` …) hold
both ways: ``A p B`` and ``B p A`` are one fact. The writer therefore stores such a
relation in one canonical orientation — the entity with the smaller id as subject — so
both directions' statements meet on one edge (its weight counts the chunks of both), and
supersession, which works per ordered pair, sees ``ally_of(A, B)`` against
``enemy_of(B, A)`` and an assertion against a denial stated the other way round.

Entity ids derive from log offsets (``write.ids``), so the orientation is the same in the
live indexer and in a replay. An entity merge can change an end's id; the merge orients
the edges it repoints again (``write.entities``). An exclusive group should hold only
symmetric or only ordered predicates: a symmetric edge and an ordered one meet on one
pair only when the ordered one happens to point the canonical way.
"""

from __future__ import annotations

from collections.abc import Container

__all__ = ["orient"]


def orient(subject: int, predicate: str, obj: int, symmetric: Container[str]) -> tuple[int, int]:
    """The (subject, object) a relation is stored with: the smaller id first when
    ``predicate`` is symmetric, as stated otherwise."""
    if predicate in symmetric and obj < subject:
        return obj, subject
    return subject, obj
