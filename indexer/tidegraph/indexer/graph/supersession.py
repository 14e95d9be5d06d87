"""Which live relations are current, from document order (paper §5.2).

Given every *live* relation that could conflict — each with the ``order_key`` of the latest
live document asserting it — this module decides which are current and which superseded,
by which relation and by what mechanism. It is a function of that set alone, so the
current graph does not depend on the order documents arrived in (DESIGN invariant 5).

Two relations **conflict** when

- they join the same ordered (subject, object) pair with the same predicate and opposite
  negation (mechanism ``negation``): a later denial of ``worked_with`` supersedes an
  earlier assertion of it, and a later assertion supersedes an earlier denial. This is the
  one contradiction that needs no declaration;
- they join the same ordered pair, are both asserted (not negated), and their predicates
  differ and share one of the realm's exclusive groups (``exclusive_group``: ``ally_of``
  then ``enemy_of``);
- they are both asserted, have the same predicate, which the realm declares functional in
  one end, share that end and differ in the other (``functional``: ``X lives_in Paris``
  then ``X lives_in Rome``; for ``ceo_of``, functional in its object, two chief executives
  of one company).

A denial never conflicts with another predicate or another pair: "never an enemy of" says
nothing against "an ally of", and "does not live in Rome" says nothing about Paris. A
relation is superseded when a conflicting relation is later, and the supersession names
the earliest such one, so a chain reads as history (ally → enemy → friend; Paris → Rome →
Oslo) and a late-arriving older document changes one pointer, not all of them. Retracting
the latest relation of a chain leaves the one before it with no later conflict: restored.

"Later" is the order ``(order_key, predicate, negated, names, id)``: document order first;
on a tie (one document asserting both) the alphabetically later predicate, then the
denial, then the later names of the ends (a functional predicate's two values stated in
one document), then the larger id win — arbitrary but independent of arrival. A predicate
re-asserted in a later document has that document's order_key, so it is current again and
supersedes whatever came between; the two are never both superseded.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from tidegraph.indexer.graph.predicates import group_index
from tidegraph.schemas.realm_config import FunctionalSide

__all__ = [
    "Assertion",
    "Mechanism",
    "Supersession",
    "conflict",
    "functional_scope",
    "resolve_supersession",
]

Mechanism = Literal["negation", "exclusive_group", "functional"]
"""What made a relation superseded (CONTRACT additions: the relation's ``superseded_via``)."""


@dataclass(frozen=True)
class Assertion:
    """One live relation as supersession sees it."""

    id: str
    """The relation's id; unique among the assertions resolved together."""
    subject: str
    """Subject entity id (or canonical name): together with ``object``, the ordered pair."""
    object: str
    """Object entity id (or canonical name)."""
    predicate: str
    """Canonical predicate (normalised and snapped)."""
    negated: bool
    """The text denies the relation."""
    order_key: str
    """``order_key`` of the latest live document asserting the relation; compared as a string."""
    names: str = ""
    """The ends' names: breaks a tie in document order between two values of a functional
    predicate by something every arrival order agrees on (ids are drawn in log order)."""

    def _rank(self) -> tuple[str, str, bool, str, str]:
        return (self.order_key, self.predicate, self.negated, self.names, self.id)


class Supersession(NamedTuple):
    """Why a relation is not current."""

    by: str
    """Id of the earliest later relation conflicting with it."""
    mechanism: Mechanism
    """Which rule makes the two conflict."""


def conflict(
    a: Assertion,
    b: Assertion,
    groups: Mapping[str, frozenset[int]],
    functional: Mapping[str, FunctionalSide] | None = None,
) -> Mechanism | None:
    """The rule by which ``a`` and ``b`` cannot both be current, or ``None``.

    Two rows with one identity (same pair, predicate and negation), which a store should
    never hold, conflict by ``negation`` so that exactly one of them is current.

    ``groups`` maps a predicate to the indexes of the exclusive groups containing it, as
    :func:`tidegraph.indexer.graph.predicates.group_index` builds it; ``functional`` maps a
    functional predicate to the end it is a function of.
    """
    same_pair = (a.subject, a.object) == (b.subject, b.object)
    if a.predicate == b.predicate:
        if same_pair:
            return "negation" if a.negated != b.negated or a.id != b.id else None
        side = (functional or {}).get(a.predicate)
        if side is None or a.negated or b.negated:
            return None
        key_a, key_b = (a.subject, b.subject) if side == "subject" else (a.object, b.object)
        return "functional" if key_a == key_b else None
    if not same_pair or a.negated or b.negated:
        return None
    shared = groups.get(a.predicate, frozenset()) & groups.get(b.predicate, frozenset())
    return "exclusive_group" if shared else None


def functional_scope(
    assertion: Assertion, functional: Mapping[str, FunctionalSide]
) -> tuple[str, str, str] | None:
    """(side, end, predicate): the relations one value of a functional predicate competes
    with; ``None`` for a denial or a predicate not declared functional."""
    side = functional.get(assertion.predicate)
    if side is None or assertion.negated:
        return None
    return (side, assertion.subject if side == "subject" else assertion.object, assertion.predicate)


def resolve_supersession(
    assertions: Iterable[Assertion],
    groups: Sequence[Collection[str]],
    functional: Mapping[str, FunctionalSide] | None = None,
) -> dict[str, Supersession | None]:
    """Every assertion's id → what supersedes it, or ``None`` if current.

    A relation's conflicts lie on its own ordered pair and, for a functional predicate, in
    its functional scope; pass a whole realm's live relations or any set holding those of
    the relations asked about, and the answer for each of them is the same.
    """
    index = group_index(groups)
    functional = functional or {}
    by_pair: dict[tuple[str, str], list[Assertion]] = {}
    by_scope: dict[tuple[str, str, str], list[Assertion]] = {}
    seen: set[str] = set()
    items: list[Assertion] = []
    for assertion in assertions:
        if assertion.id in seen:
            raise ValueError(f"relation id {assertion.id!r} appears twice")
        seen.add(assertion.id)
        items.append(assertion)
        by_pair.setdefault((assertion.subject, assertion.object), []).append(assertion)
        scope = functional_scope(assertion, functional)
        if scope is not None:
            by_scope.setdefault(scope, []).append(assertion)

    result: dict[str, Supersession | None] = {}
    for earlier in items:
        rank = earlier._rank()
        rivals = by_pair[(earlier.subject, earlier.object)]
        scope = functional_scope(earlier, functional)
        if scope is not None:
            rivals = rivals + by_scope[scope]
        found: Supersession | None = None
        found_rank: tuple[str, str, bool, str, str] | None = None
        for later in rivals:
            later_rank = later._rank()
            if later_rank <= rank or (found_rank is not None and later_rank >= found_rank):
                continue
            mechanism = conflict(earlier, later, index, functional)
            if mechanism is not None:
                found, found_rank = Supersession(later.id, mechanism), later_rank
        result[earlier.id] = found
    return result
