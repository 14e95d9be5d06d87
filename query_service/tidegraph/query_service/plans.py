"""What each retrieval mode reads: the six modes of paper Table 3 as plans.

=======  ========  ======  ===========================================  ===========
mode     entities  chunks  relations                                    communities
=======  ========  ======  ===========================================  ===========
mix      yes       yes     traversal + similarity + full-text (RRF)     no
local    yes       yes     same, entity-centred (see below)             no
global   no        no      ranked: similarity + full-text on themes     yes
hybrid   yes       yes     traversal + similarity + full-text + ranked  yes
naive    no        yes     no                                           no
bypass   no        no      no                                           no
=======  ========  ======  ===========================================  ===========

``local`` differs from ``mix`` in where its passages come from: only mention expansion,
so every passage is about a matched entity; ``mix`` also ranks chunks by query similarity.
A plan names the reads; :mod:`~tidegraph.query_service.rounds` issues them, so a new mode
is a new row here, never a new branch there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["mix", "local", "global", "hybrid", "naive", "bypass"]
MODES: tuple[Mode, ...] = ("mix", "local", "global", "hybrid", "naive", "bypass")

TRAVERSAL, SIMILARITY, FULLTEXT, RANKED = "traversal", "similarity", "fulltext", "ranked"
"""Relation channels, as an answer's ``channels`` and ``stats.channels`` name them."""
FOCUS = "predicate"
"""Relations of a named entity whose predicate the question names
(:mod:`~tidegraph.query_service.focus`)."""


@dataclass(frozen=True)
class Plan:
    """The reads of one mode."""

    seeds: bool = False
    """Entities matched by name and vector, the walk from them, and the similarity and
    named-thing relation channels around them."""
    ranked: bool = False
    """Relations ranked by similarity to the question steered by its themes."""
    chunks_by_similarity: bool = False
    chunks_by_mention: bool = False
    """Passages that mention a matched entity (so only with ``seeds``)."""
    communities: bool = False

    @property
    def relations(self) -> bool:
        return self.seeds or self.ranked

    @property
    def reads(self) -> bool:
        """Whether the mode reads the graph at all (``bypass`` does not)."""
        return self.relations or self.chunks_by_similarity or self.communities


PLANS: dict[Mode, Plan] = {
    "mix": Plan(seeds=True, chunks_by_similarity=True, chunks_by_mention=True),
    "local": Plan(seeds=True, chunks_by_mention=True),
    "global": Plan(ranked=True, communities=True),
    "hybrid": Plan(
        seeds=True,
        ranked=True,
        chunks_by_similarity=True,
        chunks_by_mention=True,
        communities=True,
    ),
    "naive": Plan(chunks_by_similarity=True),
    "bypass": Plan(),
}
