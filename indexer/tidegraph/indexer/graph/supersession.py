"""Which relations on an ordered pair are current, from document order (paper §5.2).

A realm declares exclusive groups: predicates that cannot hold together between the same
ordered (subject, object) pair. Given every *live* relation on a pair — each with the
``order_key`` of the latest live document asserting it — this module decides which are
current and which superseded, and by what. It is a function of that set alone, so the
current graph does not depend on the order documents arrived in (DESIGN invariant 5).

Two relations on a pair **conflict** when

- both are asserted (not negated), their predicates differ and share an exclusive group
  (``ally_of`` then ``enemy_of``); or
- they have the same predicate and opposite negation: a later denial of ``worked_with``
  supersedes an earlier assertion of it, and a later assertion supersedes an earlier
  denial. This holds whether or not the predicate is in a group — it is the one
  contradiction that needs no declaration.

A denial never conflicts with a different predicate: "never an enemy of" says nothing
against "an ally of". A relation is superseded when a conflicting relation is later, and
``superseded_by`` names the earliest such one, so a chain reads as history (ally → enemy
→ friend) and a late-arriving older document changes one pointer, not all of them.

"Later" is the order ``(order_key, predicate, negated, id)``: document order first; on a
tie (one document asserting both) the alphabetically later predicate, then the denial,
then the larger id win — arbitrary but independent of arrival. A predicate re-asserted in
a later document has that document's order_key, so it is current again and supersedes
whatever came between; the two are never both superseded.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tidegraph.indexer.graph.predicates import group_index

__all__ = ["Assertion", "conflicts", "resolve_supersession"]


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

    def _rank(self) -> tuple[str, str, bool, str]:
        return (self.order_key, self.predicate, self.negated, self.id)


def conflicts(a: Assertion, b: Assertion, groups: Mapping[str, frozenset[int]]) -> bool:
    """Whether ``a`` and ``b`` cannot both be current (same pair assumed).

    Two rows with one identity (same predicate and negation), which a store should never
    hold, are treated as conflicting so that exactly one of them is current.

    ``groups`` maps a predicate to the indexes of the exclusive groups containing it, as
    :func:`tidegraph.indexer.graph.predicates.group_index` builds it.
    """
    if a.predicate == b.predicate:
        return a.negated != b.negated or a.id != b.id
    if a.negated or b.negated:
        return False
    return bool(groups.get(a.predicate, frozenset()) & groups.get(b.predicate, frozenset()))


def resolve_supersession(
    assertions: Iterable[Assertion], groups: Sequence[Collection[str]]
) -> dict[str, str | None]:
    """Every assertion's id → the id of the relation superseding it, or ``None`` if current.

    Assertions on different ordered pairs never interact; pass a whole realm's live
    relations or one pair's, the answer for each relation is the same.
    """
    index = group_index(groups)
    by_pair: dict[tuple[str, str], list[Assertion]] = {}
    seen: set[str] = set()
    for assertion in assertions:
        if assertion.id in seen:
            raise ValueError(f"relation id {assertion.id!r} appears twice")
        seen.add(assertion.id)
        by_pair.setdefault((assertion.subject, assertion.object), []).append(assertion)

    result: dict[str, str | None] = {}
    for pair in by_pair.values():
        pair.sort(key=Assertion._rank)
        for i, earlier in enumerate(pair):
            result[earlier.id] = next(
                (later.id for later in pair[i + 1 :] if conflicts(earlier, later, index)), None
            )
    return result
