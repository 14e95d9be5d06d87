"""What each retrieval mode reads: the six modes of paper Table 3 as plans.

=======  ========  ======  ===========================================  ======  ===========
mode     entities  chunks  relations                                    chains  communities
=======  ========  ======  ===========================================  ======  ===========
mix      yes       yes     traversal + similarity + full-text (RRF)     yes     no
local    yes       yes     same, entity-centred (see below)             yes     no
global   no        no      ranked: similarity + full-text on themes     no      yes
hybrid   yes       yes     traversal + similarity + full-text + ranked  yes     yes
naive    no        yes     no                                           no      no
bypass   no        no      no                                           no      no
=======  ========  ======  ===========================================  ======  ===========

Every mode that returns relations runs the predicate focus; the modes that walk from the
matched entities also follow the question along paths from the named ones (evidence
chains, :mod:`~tidegraph.query_service.paths`).

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
PATH = "path"
"""Relations on an evidence chain from a named entity (:mod:`~tidegraph.query_service.paths`)."""


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
    chains: bool = False
    """Evidence chains: paths from the named entities whose links the question names."""
    communities: bool = False

    @property
    def relations(self) -> bool:
        return self.seeds or self.ranked

    @property
    def reads(self) -> bool:
        """Whether the mode reads the graph at all (``bypass`` does not)."""
        return self.relations or self.chunks_by_similarity or self.communities


PLANS: dict[Mode, Plan] = {
    "mix": Plan(seeds=True, chunks_by_similarity=True, chunks_by_mention=True, chains=True),
    "local": Plan(seeds=True, chunks_by_mention=True, chains=True),
    "global": Plan(ranked=True, communities=True),
    "hybrid": Plan(
        seeds=True,
        ranked=True,
        chunks_by_similarity=True,
        chunks_by_mention=True,
        chains=True,
        communities=True,
    ),
    "naive": Plan(chunks_by_similarity=True),
    "bypass": Plan(),
}
