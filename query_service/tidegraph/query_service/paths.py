"""Evidence chains: which paths from the named entities an answer follows, and in what order.

"In which country is the university where Ilse Marr studied located?" names Ilse Marr, but
half of its evidence lies one hop further: her ``studied_at`` leads to the university,
whose ``located_in`` names the country. The predicate focus
(:mod:`~tidegraph.query_service.focus`) finds the first hop. Nothing finds the second:
the walk reaches it at hop 2 but ranks newest first, and the vector and full-text channels
rank by the words a relation shares with the question, so her other relations and people
with similar names take the first places.

A chain (read by ``channels.relation_chains``) is a path of 2 to ``hops`` relations from
an entity the question names. A link is *named* when its predicate names a question term
(shares an English stem, as the focus decides) that no earlier link on the path names; a
chain has at most one link that is not named, and ends with a named one — or with one
whose far end's type names a term no link names ("Which *country* is the university S
studied at in?"). The read keeps; this module ranks and places:

* **kept** (by the read, given the focus read's terms): a chain is kept when it names a
  term that no relation of the named entities names, nor the type of that relation's
  other end (the focus hits'): it explains a part of the question their own relations
  leave open. "Which companies did H acquire?"
  follows no path to another acquirer, since H's own ``acquired`` relations already
  explain "acquire" (and their ends, "companies").
* **ranked**: by score — named links, plus one when the far end's type names a term of
  its own — then named links, then how near the named entity the question writes the
  term of the first named link ("the papers S *wrote*": of "Who edited the journals that
  published the papers S wrote?" and its mirror through a journal S edited, the chain
  that starts with S's ``wrote``), a far end named in the question, fewer links not
  named, shorter, then the fused rank of the last link.
* **placed**: chains scoring two or more lead the answer, ahead of the focus hits (their
  first link is usually one); chains scoring one (the question did not name the first
  link: "the lab where S works") follow the focus hits. Each chain's links come in path
  order, a relation once, and a relation placed by a chain reports that chain as its path.

This is the seed paper's bounded k-hop walk with the question scoring each path one link
at a time, as the focus scores one relation. HippoRAG's personalized PageRank from the
named entities ranks by where random walks settle — the named entity's neighbourhood,
whatever the question asks — and even steered by the question's words (the flow PathRAG
prunes by) it cannot say which of a hub's relations the question asks for; measured on
the same questions in ``docs/chains.md`` (``bench/ppr.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidegraph.query_service.focus import FAR


@dataclass(frozen=True)
class Chain:
    """One path from a named entity, as the chain read returns it."""

    links: tuple[int, ...]
    """Relation ids from the named entity outwards."""
    masks: tuple[int, ...]
    """The question terms each link's predicate names (bit ``i``: the ``i``-th term)."""
    ends: int = 0
    """The terms the far end's type names."""
    end_named: bool = False
    """The far end is itself named in the question."""

    @property
    def named(self) -> int:
        """Links that name a term no earlier link names."""
        seen = count = 0
        for mask in self.masks:
            count += bool(mask & ~seen)
            seen |= mask
        return count

    @property
    def end_names(self) -> bool:
        """The far end's type names a term no link names ("in which *country* …")."""
        return bool(self.ends & ~self.link_terms)

    @property
    def link_terms(self) -> int:
        out = 0
        for mask in self.masks:
            out |= mask
        return out

    @property
    def first_terms(self) -> int:
        """The terms the first named link is the first to name (0: no link is named)."""
        seen = 0
        for mask in self.masks:
            if mask & ~seen:
                return mask & ~seen
            seen |= mask
        return 0

    @property
    def score(self) -> int:
        """How much of the question the chain explains: its named links, and its end when
        that names a term of its own."""
        return self.named + self.end_names


def rank(
    chains: Sequence[Chain], position: Mapping[int, int], distance: Sequence[int] = ()
) -> list[Chain]:
    """The chains an answer follows, best first: by :attr:`Chain.score`, then named links,
    then how near the named entity the question writes the term of the first named link
    (``distance``, words per term: the chain that reads the question the right way round,
    ``focus.term_distances``), a far end named in the question, fewer links not named,
    length, ``position`` of the last link (its fused rank; absent: after every ranked
    one), then the order given."""

    def near(c: Chain) -> int:
        bits = c.first_terms
        return min((d for i, d in enumerate(distance) if bits >> i & 1), default=FAR)

    order = list(enumerate(chains))
    order.sort(
        key=lambda ic: (
            -ic[1].score,
            -ic[1].named,
            near(ic[1]),
            not ic[1].end_named,
            len(ic[1].links) - ic[1].named,
            len(ic[1].links),
            position.get(ic[1].links[-1], math.inf),
            ic[0],
        )
    )
    return [c for _, c in order]


LEADING = 2
"""The score from which a chain leads the answer, ahead of the predicate focus."""


def leading(chains: Sequence[Chain]) -> tuple[list[Chain], list[Chain]]:
    """Ranked chains split into those that lead the answer and those that follow the
    predicate focus (:data:`LEADING`), each in the order given."""
    return [c for c in chains if c.score >= LEADING], [c for c in chains if c.score < LEADING]


def links_in_order(chains: Sequence[Chain]) -> list[int]:
    """The relations of ``chains`` in placing order: chain by chain, each in path order,
    a relation once."""
    return list(dict.fromkeys(link for c in chains for link in c.links))


def paths(chains: Sequence[Chain]) -> dict[int, tuple[int, ...]]:
    """For each relation of ``chains``, the path that places it: the chain's links up to
    and including it (one link when it is on the named entity). The first chain to place
    a relation decides."""
    out: dict[int, tuple[int, ...]] = {}
    for c in chains:
        for i, link in enumerate(c.links):
            out.setdefault(link, c.links[: i + 1])
    return out
