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
  of one company);
- they are both asserted, share subject and predicate (neither functional nor symmetric)
  and differ in the object, and the model, asked whether the two statements can hold at
  once, said no (``model``, the paper's §7.4 residue: ``X lives_in Paris`` then
  ``X lives_in Berlin`` in a realm that did not declare ``lives_in`` functional). The
  question is the unordered pair of the two rendered relations (:func:`question`), so the
  answer, like every other rule here, does not depend on which arrived first; the answers
  come in as :class:`Residue`, and a pair without one raises :class:`Unanswered` rather
  than being guessed.

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

from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from tidegraph.indexer.graph.predicates import group_index
from tidegraph.schemas import FunctionalSide

__all__ = [
    "Assertion",
    "Mechanism",
    "Answer",
    "Judge",
    "Question",
    "Residue",
    "Supersession",
    "Unanswered",
    "competing_scope",
    "conflict",
    "question",
    "residue_questions",
    "resolve_supersession",
]

Mechanism = Literal["negation", "exclusive_group", "functional", "model"]
"""What made a relation superseded (CONTRACT additions: the relation's ``superseded_via``)."""

Question = tuple[str, str]
"""Two rendered relations, in code point order: whether they can both hold."""


class Answer(NamedTuple):
    """What the model said about one question, and which model said it."""

    contradicts: bool
    model: str


class Judge(Protocol):
    """Answers questions about the residue (the model, behind whatever cache)."""

    async def judge(self, questions: Sequence[Question]) -> dict[Question, Answer]: ...


def question(a: str, b: str) -> Question:
    """The question about two rendered relations, the same whichever comes first."""
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class Residue:
    """The model's answers about the residue, for a realm that asks it."""

    answers: Mapping[Question, bool] = field(default_factory=dict)
    """Question → the two relations contradict each other."""
    excluded: frozenset[str] = frozenset()
    """Predicates never asked about: symmetric ones have no subject side."""


class Unanswered(LookupError):
    """Supersession needs answers the model has not given yet."""

    def __init__(self, questions: Iterable[Question]) -> None:
        self.questions = tuple(sorted(set(questions)))
        super().__init__(f"{len(self.questions)} contradiction question(s) unanswered")


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
    text: str = ""
    """The relation rendered as the model is asked about it (only read for the residue)."""

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
    residue: Residue | None = None,
) -> Mechanism | None:
    """The rule by which ``a`` and ``b`` cannot both be current, or ``None``.

    Two rows with one identity (same pair, predicate and negation), which a store should
    never hold, conflict by ``negation`` so that exactly one of them is current.

    ``groups`` maps a predicate to the indexes of the exclusive groups containing it, as
    :func:`tidegraph.indexer.graph.predicates.group_index` builds it; ``functional`` maps a
    functional predicate to the end it is a function of; ``residue`` holds the model's
    answers when the realm asks it (:class:`Unanswered` when one is missing).
    """
    same_pair = (a.subject, a.object) == (b.subject, b.object)
    if a.predicate == b.predicate:
        if same_pair:
            return "negation" if a.negated != b.negated or a.id != b.id else None
        if a.negated or b.negated:
            return None
        side = (functional or {}).get(a.predicate)
        if side is not None:
            key_a, key_b = (a.subject, b.subject) if side == "subject" else (a.object, b.object)
            return "functional" if key_a == key_b else None
        if residue is None or a.predicate in residue.excluded or a.subject != b.subject:
            return None
        asked = question(a.text, b.text)
        if asked[0] == asked[1]:
            return None  # one statement twice cannot contradict itself
        answer = residue.answers.get(asked)
        if answer is None:
            raise Unanswered([asked])
        return "model" if answer else None
    if not same_pair or a.negated or b.negated:
        return None
    shared = groups.get(a.predicate, frozenset()) & groups.get(b.predicate, frozenset())
    return "exclusive_group" if shared else None


def competing_scope(
    assertion: Assertion,
    functional: Mapping[str, FunctionalSide],
    residue: Residue | None = None,
) -> tuple[str, str, str] | None:
    """(side, end, predicate): the relations on other pairs an assertion competes with —
    the values of a functional predicate, or the residue of a realm that asks the model
    (by subject); ``None`` for a denial, or when it competes only on its own pair."""
    if assertion.negated:
        return None
    side = functional.get(assertion.predicate)
    if side is None:
        if residue is None or assertion.predicate in residue.excluded:
            return None
        side = "subject"
    return (side, assertion.subject if side == "subject" else assertion.object, assertion.predicate)


def residue_questions(
    assertions: Iterable[Assertion],
    functional: Mapping[str, FunctionalSide],
    excluded: Container[str],
    decided: Container[str],
) -> set[Question]:
    """The questions :func:`resolve_supersession` needs answered to decide the
    ``decided`` assertions: every two asserted relations sharing subject and predicate
    (neither functional nor ``excluded``) with different objects, one of them decided."""
    groups: dict[tuple[str, str], list[Assertion]] = {}
    for a in assertions:
        if not a.negated and a.predicate not in functional and a.predicate not in excluded:
            groups.setdefault((a.subject, a.predicate), []).append(a)
    asked: set[Question] = set()
    for members in groups.values():
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                if a.object != b.object and (a.id in decided or b.id in decided):
                    q = question(a.text, b.text)
                    if q[0] != q[1]:
                        asked.add(q)
    return asked


def resolve_supersession(
    assertions: Iterable[Assertion],
    groups: Sequence[Collection[str]],
    functional: Mapping[str, FunctionalSide] | None = None,
    residue: Residue | None = None,
    decided: Container[str] | None = None,
) -> dict[str, Supersession | None]:
    """Every assertion's id (or each of ``decided``) → what supersedes it, or ``None`` if
    current.

    A relation's conflicts lie on its own ordered pair and in its competing scope
    (:func:`competing_scope`); pass a whole realm's live relations or any set holding those
    of the relations asked about, and the answer for each of them is the same.
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
        scope = competing_scope(assertion, functional, residue)
        if scope is not None:
            by_scope.setdefault(scope, []).append(assertion)

    result: dict[str, Supersession | None] = {}
    for earlier in items:
        if decided is not None and earlier.id not in decided:
            continue
        rank = earlier._rank()
        rivals = by_pair[(earlier.subject, earlier.object)]
        scope = competing_scope(earlier, functional, residue)
        if scope is not None:
            rivals = rivals + by_scope[scope]
        found: Supersession | None = None
        found_rank: tuple[str, str, bool, str, str] | None = None
        for later in rivals:
            later_rank = later._rank()
            if later_rank <= rank or (found_rank is not None and later_rank >= found_rank):
                continue
            mechanism = conflict(earlier, later, index, functional, residue)
            if mechanism is not None:
                found, found_rank = Supersession(later.id, mechanism), later_rank
        result[earlier.id] = found
    return result
