"""Symmetric predicates stored once per unordered pair.

A realm's ``symmetric_predicates`` (``worked_with``, ``ally_of``, ``married_to`` …) hold
both ways: ``A p B`` and ``B p A`` are one fact, so the writer keeps one edge per
unordered pair (and predicate and negation). A statement finds the pair's edge in either
orientation and adds its provenance there (its weight counts the chunks of both
directions); a pair without one gets an edge oriented by :func:`orient` — the end whose
name sorts first as subject — which depends on names only, so whatever order documents
arrive in, the stored graph is the same (DESIGN invariant 5). An edge keeps the
orientation it was created with: a later rename or merge never turns it round, so the
change feed, which has no change kind for that, stays exact (an entity merge re-points
an edge's ends, as a feed consumer does with ``merged_into``, and coalesces it into the
survivor's edge on the same unordered pair).

Supersession compares a symmetric predicate's edges per unordered pair
(:func:`pair_of`): ``ally_of(A, B)`` then ``enemy_of(B, A)`` supersedes, and so does a
denial stated the other way round. Keep an exclusive group all symmetric or all ordered:
a symmetric edge and an ordered one meet only by accident of their ids.
"""

from __future__ import annotations

from collections.abc import Container, Mapping

from tidegraph.schemas import name_key

__all__ = ["orient", "pair_of"]


def orient(
    subject: int, predicate: str, obj: int, symmetric: Container[str], names: Mapping[int, str]
) -> tuple[int, int]:
    """The (subject, object) a new edge is stored with: for a symmetric predicate the end
    whose name (``names``: id → name) sorts first, by name key, then id; as stated
    otherwise."""
    if predicate in symmetric and (name_key(names[obj]), obj) < (
        name_key(names[subject]),
        subject,
    ):
        return obj, subject
    return subject, obj


def pair_of(subject: int, predicate: str, obj: int, symmetric: Container[str]) -> tuple[int, int]:
    """The pair supersession compares an edge on: unordered (smaller id first) for a
    symmetric predicate, as stored otherwise."""
    if predicate in symmetric and obj < subject:
        return obj, subject
    return subject, obj
