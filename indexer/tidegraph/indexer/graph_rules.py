"""The write-path rules the writer applies inside its transaction, as plain functions.

Thin layer over the rule modules so the writer depends on one small surface: entity merge,
relation attribute merge, supersession per ordered pair, and the texts that get embedded.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from datetime import date
from typing import NamedTuple


class EntityRecord(NamedTuple):
    """An entity's mergeable attributes."""

    name: str
    type: str
    description: str
    aliases: frozenset[str]


def merge_entity(a: EntityRecord, b: EntityRecord) -> EntityRecord:
    """Paper §4.6: longer surface form canonical, specific type kept, longer description."""
    name = max(a.name, b.name, key=lambda n: (len(n), n))
    typ = _pick_type(a.type, b.type)
    description = max(a.description, b.description, key=lambda d: (len(d), d))
    surfaces = {a.name, b.name} | a.aliases | b.aliases
    aliases = frozenset(s for s in surfaces if s.lower() != name.lower())
    return EntityRecord(name, typ, description, aliases)


def _pick_type(a: str, b: str) -> str:
    if a == "Concept":
        return b
    if b == "Concept":
        return a
    return min(a, b)


RelationAttrs = tuple[str, float, str | None, str | None]


def merge_relation_attrs(observations: Sequence[RelationAttrs]) -> RelationAttrs:
    """Longest description, highest confidence; a stated period is never erased."""
    description = max((o[0] for o in observations), key=lambda d: (len(d), d))
    confidence = max(o[1] for o in observations)
    froms = sorted(o[2] for o in observations if o[2])
    tos = sorted(o[3] for o in observations if o[3])
    return description, confidence, froms[0] if froms else None, tos[-1] if tos else None


def period_bounds(valid_from: str | None, valid_to: str | None) -> tuple[date | None, date | None]:
    """Padded dates so 1625 orders below 1625-06-01 (paper §5.1)."""
    return (_pad(valid_from, start=True), _pad(valid_to, start=False))


def _pad(value: str | None, *, start: bool) -> date | None:
    if not value:
        return None
    parts = [int(p) for p in value.split("-")]
    if len(parts) == 1:
        return date(parts[0], 1, 1) if start else date(parts[0], 12, 31)
    if len(parts) == 2:
        if start:
            return date(parts[0], parts[1], 1)
        nxt = date(parts[0] + (parts[1] == 12), parts[1] % 12 + 1, 1)
        return date.fromordinal(nxt.toordinal() - 1)
    return date(parts[0], parts[1], parts[2])


LiveRelation = tuple[int, Hashable, str, bool, str | None]
"""(relation id, ordered pair key, predicate, negated, order key of its latest live source)."""


def desired_relation_states(
    live: Iterable[LiveRelation], groups: Sequence[frozenset[str]]
) -> dict[int, tuple[str, int | None]]:
    """Current or superseded (and by which) for every live relation (paper §5.2).

    Within one ordered pair, relations whose predicates share an exclusive group resolve by
    order key: the latest wins, ties by predicate. Denials do not take part.
    """
    out: dict[int, tuple[str, int | None]] = {}
    by_pair: dict[Hashable, list[LiveRelation]] = {}
    for rel in live:
        by_pair.setdefault(rel[1], []).append(rel)
        out[rel[0]] = ("current", None)
    for rels in by_pair.values():
        for group in groups:
            members = [r for r in rels if r[2] in group and not r[3]]
            if len(members) < 2:
                continue
            winner = max(members, key=lambda r: (r[4] or "", r[2]))
            for r in members:
                if r[0] != winner[0] and out[r[0]][0] == "current":
                    out[r[0]] = ("superseded", winner[0])
    return out


def render_entity(name: str, description: str) -> str:
    """The text an entity is embedded from."""
    return f"{name}: {description}" if description else name


def render_relation(
    subject: str, predicate: str, obj: str, negated: bool,
    valid_from: str | None, valid_to: str | None,
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
