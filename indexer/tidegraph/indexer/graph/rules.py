"""The write-path rules the writer applies inside its transaction.

A small surface over the pure rule modules (resolution, corroboration, supersession,
validity), shaped for what the writer holds: database ids and rows.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from datetime import date
from typing import NamedTuple

from tidegraph.indexer.graph.corroboration import Contribution, corroborate
from tidegraph.indexer.graph.resolution import EntityRecord, merge_records
from tidegraph.indexer.graph.supersession import (
    Assertion,
    Mechanism,
    Question,
    Residue,
    residue_questions,
    resolve_supersession,
)
from tidegraph.indexer.graph.symmetry import pair_of
from tidegraph.indexer.graph.validity import period_end, period_start
from tidegraph.schemas import FunctionalSide

__all__ = [
    "EntityRecord",
    "LiveRelation",
    "RelationAttrs",
    "RelationState",
    "desired_relation_states",
    "merge_entity",
    "relation_questions",
    "merge_relation_attrs",
    "period_bounds",
    "render_entity",
    "render_relation",
]


def merge_entity(a: EntityRecord, b: EntityRecord) -> EntityRecord:
    """Paper §4.6: longer surface form canonical, specific type kept, longer description."""
    return merge_records((a, b))


RelationAttrs = tuple[str, float, str | None, str | None]
"""(description, confidence, valid_from, valid_to) of an edge."""


def merge_relation_attrs(contributions: Iterable[tuple[str, RelationAttrs]]) -> RelationAttrs:
    """An edge's attributes from its live (chunk id, attributes) contributions."""
    merged = corroborate(
        Contribution(chunk, d, c, vf, vt) for chunk, (d, c, vf, vt) in contributions
    )
    if merged is None:
        raise ValueError("an edge with no contribution has no attributes")
    return merged.description, merged.confidence, merged.valid_from, merged.valid_to


def period_bounds(valid_from: str | None, valid_to: str | None) -> tuple[date | None, date | None]:
    """Padded dates so 1625 orders below 1625-06-01 (paper §5.1)."""
    return (
        period_start(valid_from) if valid_from else None,
        period_end(valid_to) if valid_to else None,
    )


class LiveRelation(NamedTuple):
    """A relation with a contributing chunk, as supersession needs it."""

    id: int
    pair: tuple[str, int, int]
    """(space, subject id, object id) as stored."""
    predicate: str
    negated: bool
    order_key: str | None
    """``order_key`` of the latest live document asserting it."""
    names: str
    """The ends' names (a tie-break every arrival order agrees on)."""
    text: str = ""
    """The relation rendered (read only when the realm asks the model about the residue)."""


RelationState = tuple[str, int | None, Mechanism | None]
"""Belief state, the relation superseding it and by which mechanism."""


def _assertions(live: Iterable[LiveRelation], symmetric: Container[str]) -> list[Assertion]:
    """Supersession's view: ends qualified by space, a symmetric pair in one order."""
    out = []
    for r in live:
        space, s, o = r.pair
        first, second = pair_of(s, r.predicate, o, symmetric)
        out.append(
            Assertion(
                str(r.id),
                f"{space}\x00{first}",
                f"{space}\x00{second}",
                r.predicate,
                r.negated,
                r.order_key or "",
                r.names,
                r.text,
            )
        )
    return out


def relation_questions(
    live: Iterable[LiveRelation],
    symmetric: Collection[str],
    functional: Mapping[str, FunctionalSide],
    decided: Collection[int],
) -> set[Question]:
    """What the model must have answered before the ``decided`` relations' states can be
    decided in a realm that asks it about the residue."""
    return residue_questions(
        _assertions(live, symmetric), functional, symmetric, {str(i) for i in decided}
    )


def desired_relation_states(
    live: Iterable[LiveRelation],
    groups: Sequence[frozenset[str]],
    symmetric: Collection[str],
    functional: Mapping[str, FunctionalSide] | None = None,
    answers: Mapping[Question, bool] | None = None,
    decided: Collection[int] | None = None,
) -> dict[int, RelationState]:
    """``current`` or ``superseded`` (by which relation, how) for every live relation, or
    each of ``decided``; a ``symmetric`` predicate's relations compete on their unordered
    pair (``symmetry``). ``answers`` are the model's about the residue, for a realm that
    asks it (:func:`relation_questions`).

    Spaces never interact: a relation's ends are qualified by its space.
    """
    residue = None if answers is None else Residue(answers, frozenset(symmetric))
    wanted = None if decided is None else {str(i) for i in decided}
    out: dict[int, RelationState] = {}
    for rid, by in resolve_supersession(
        _assertions(live, symmetric), groups, functional, residue, wanted
    ).items():
        out[int(rid)] = (
            ("current", None, None) if by is None else ("superseded", int(by.by), by.mechanism)
        )
    return out


def render_entity(name: str, description: str) -> str:
    """The text an entity is embedded from."""
    return f"{name}: {description}" if description else name


def render_relation(
    subject: str,
    predicate: str,
    obj: str,
    negated: bool,
    valid_from: str | None,
    valid_to: str | None,
) -> str:
    """The surface form a relation is embedded and full-text indexed from."""
    verb = predicate.replace("_", " ")
    text = f"{subject} {'NOT ' if negated else ''}{verb} {obj}"
    if valid_from and valid_to:
        text += f" [valid {valid_from} to {valid_to}]"
    elif valid_from:
        text += f" [from {valid_from}]"
    elif valid_to:
        text += f" [until {valid_to}]"
    return text
