"""One edge per (subject, predicate, object, negated), weighted by distinct chunks (paper §4.7).

The same triple extracted from several chunks — routine, given overlap — is one edge, and
its weight counts the distinct chunks that contributed it, not the times it was written.
Counting writes made re-indexing look like independent corroboration; counting chunk ids
makes re-observing idempotent.

Merged values follow the same idea. Every rule below picks an extreme of a total order, so
:meth:`Corroboration.join` is commutative, associative and idempotent: any order, grouping
or repetition of the same contributions gives the same edge.

- weight: the number of distinct contributing chunk ids.
- description: the longest; equal lengths, the lexicographically smallest.
- confidence: the highest.
- validity: each end on its own — the earliest stated start and the latest stated end
  (equal days: the more precise form). A contribution without a period never erases one
  recorded earlier (paper §5.1). If the merged start falls after the merged end the stated
  dates contradict each other, and :attr:`Corroboration.valid_from`/``valid_to`` report no
  period; the stated ends are kept so that later contributions still merge exactly.

A document that changes or disappears withdraws its chunks' contributions; the store keeps
contributions per chunk as provenance and recomputes with :func:`corroborate`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from tidegraph.indexer.graph.validity import period_end, period_start

__all__ = ["Contribution", "Corroboration", "EdgeKey", "corroborate", "edge_key"]


class EdgeKey(NamedTuple):
    """The identity of an edge: two observations with equal keys are one relation."""

    subject: str
    """Subject entity id, or canonical name lowercased."""
    predicate: str
    """Canonical predicate."""
    object: str
    """Object entity id, or canonical name lowercased."""
    negated: bool
    """A denial is a different edge from the assertion it denies."""


def edge_key(subject: str, predicate: str, object: str, negated: bool) -> EdgeKey:
    """Key for canonical names: entity identity is case-insensitive, so names are lowered."""
    return EdgeKey(subject.lower(), predicate, object.lower(), negated)


@dataclass(frozen=True)
class Contribution:
    """What one chunk said about one edge."""

    chunk_id: str
    """The contributing chunk; stable across re-indexing of unchanged content."""
    description: str = ""
    """The extractor's description of the relation in this chunk."""
    confidence: float = 1.0
    """The extractor's confidence."""
    valid_from: str | None = None
    """Normalised start of a stated period (``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``)."""
    valid_to: str | None = None
    """Normalised end of a stated period."""


def _earlier_start(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a if b is None else b
    return min(a, b, key=lambda v: (period_start(v), -len(v)))


def _later_end(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a if b is None else b
    return max(a, b, key=lambda v: (period_end(v), len(v)))


def _longer(a: str, b: str) -> str:
    return min(a, b, key=lambda d: (-len(d), d))


@dataclass(frozen=True)
class Corroboration:
    """An edge's merged state: its contributing chunks and the values they agree on."""

    chunks: frozenset[str]
    """Distinct contributing chunk ids."""
    description: str
    """Longest description contributed."""
    confidence: float
    """Highest confidence contributed."""
    stated_from: str | None = None
    """Earliest start any contribution stated."""
    stated_to: str | None = None
    """Latest end any contribution stated."""

    @classmethod
    def of(cls, contribution: Contribution) -> Corroboration:
        """The state one contribution alone gives."""
        return cls(
            frozenset({contribution.chunk_id}),
            contribution.description,
            contribution.confidence,
            contribution.valid_from,
            contribution.valid_to,
        )

    @property
    def weight(self) -> int:
        """Distinct contributing chunks: the corroboration signal used to rank relations."""
        return len(self.chunks)

    @property
    def valid_from(self) -> str | None:
        """Start of the validity period, ``None`` if unstated or contradictory."""
        return self.stated_from if self._consistent() else None

    @property
    def valid_to(self) -> str | None:
        """End of the validity period, ``None`` if unstated or contradictory."""
        return self.stated_to if self._consistent() else None

    def _consistent(self) -> bool:
        if self.stated_from is None or self.stated_to is None:
            return True
        return period_start(self.stated_from) <= period_end(self.stated_to)

    def join(self, other: Corroboration) -> Corroboration:
        """Both states merged; commutative, associative and idempotent."""
        return Corroboration(
            self.chunks | other.chunks,
            _longer(self.description, other.description),
            max(self.confidence, other.confidence),
            _earlier_start(self.stated_from, other.stated_from),
            _later_end(self.stated_to, other.stated_to),
        )

    def add(self, contribution: Contribution) -> Corroboration:
        """This state with one more contribution; re-adding a chunk's changes nothing."""
        return self.join(Corroboration.of(contribution))


def corroborate(contributions: Iterable[Contribution]) -> Corroboration | None:
    """The merged state of an edge's contributions, ``None`` when there are none (retracted)."""
    state: Corroboration | None = None
    for contribution in contributions:
        state = Corroboration.of(contribution) if state is None else state.add(contribution)
    return state
