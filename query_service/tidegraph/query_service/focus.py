"""The question's predicate focus: which relations of the named things it asks about.

"What did Charles Babbage design?" asks for Babbage's ``designed`` relations, with Babbage
as their subject; "Who mentored Ada Lovelace?" for ``mentored`` relations with Ada as the
object. Fusion alone cannot know this — every channel ranks by something else (hop and
recency, vector distance, full-text rank) — so a hub entity's other relations crowd the
ones asked about out of the first slots. This is a rule of the lexical keyword side
(paper §7.2), not a special case per predicate:

* **Predicate terms** are the question's theme words (the lexical high-level keywords:
  content words that are not names). A relation's predicate matches when its words and a
  term share an English stem, decided by PostgreSQL's ``english`` text-search
  configuration on both sides (``designed`` ~ ``design``, ``worked_with`` ~ ``worked``,
  ``married_to`` ~ ``marry``), so there is one stemmer and it is the database's.
* **Roles** follow word order. A name after a term is the object ("Who mentored X") unless
  an auxiliary inverts the clause between them ("Which companies did X acquire", "Who has
  X mentored") or a passive ``by`` precedes it ("designed by X"); a name before every term
  is the subject ("X founded what?"). When the question gives no term or the name is not
  written in it, the role is unknown and either role fits.

Retrieval runs the focus as its own candidate channel (every matching relation incident
to a named entity, so a hub's cap cannot cut them off) and then puts those candidates
first: matching predicate in the fitting role, then in the other role, then the rest in
fused order. The terms the named entities' own relations leave unexplained are what an
evidence chain one or two hops further must explain (:mod:`~tidegraph.query_service.paths`).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tidegraph.query_service.keywords import lexical_keywords, websearch_text

Role = Literal["subject", "object"]

_PASSIVE = re.compile(r"\bby\s*$")
_WORDS = re.compile(r"\w+")
_AUXILIARY = re.compile(r"\b(?:did|does|do|has|have|had|will|would|can|could|should)\b")


@dataclass(frozen=True)
class Focus:
    """What the question asks of the things it names."""

    terms: tuple[str, ...]
    """Theme words that may name the predicate asked about (lowercase)."""
    roles: dict[str, Role | None]
    """Name candidate (lowercase) → the role the question gives it, ``None`` when unknown."""

    @property
    def term_queries(self) -> list[str]:
        """Each term as a ``websearch_to_tsquery`` text; a relation's term mask has bit
        ``i`` set when its predicate matches the ``i``-th (from 0)."""
        return [websearch_text((t,)) for t in self.terms]


def question_focus(query: str, names: Sequence[str]) -> Focus:
    """The predicate terms of ``query`` and the role of each name candidate in it."""
    terms = lexical_keywords(query).high
    lower = query.lower()
    term_ends = [m[1] for t in terms for m in [find_word(lower, t)] if m is not None]
    roles: dict[str, Role | None] = {}
    for name in names:
        found = find_word(lower, name)
        if not term_ends or found is None:
            roles[name] = None
            continue
        before = lower[: found[0]]
        last_term = max((end for end in term_ends if end <= found[0]), default=None)
        if last_term is None or _PASSIVE.search(before):
            roles[name] = "subject"
        else:
            inverted = _AUXILIARY.search(before, last_term) is not None
            roles[name] = "subject" if inverted else "object"
    return Focus(terms, roles)


FAR = 1_000
"""The distance of a term from a name the question does not write (or of one it lacks)."""


def term_distances(query: str, terms: Sequence[str], names: Sequence[str]) -> tuple[int, ...]:
    """For each term, how many words lie between it and the nearest of ``names`` (lowercase,
    as written in the question) — 0 when adjacent, :data:`FAR` when either is not found.
    The predicate that links a named entity is written next to it ("the papers S wrote",
    "the university where S studied"), so among evidence chains that name the same terms
    the one whose first link's term is nearest the name reads the question the right way
    round."""
    lower = query.lower()
    starts = [m.start() for m in _WORDS.finditer(lower)]

    def index(at: int) -> int:
        return bisect_right(starts, at) - 1

    spans = [(index(f[0]), index(f[1] - 1)) for n in names if (f := find_word(lower, n))]
    out = []
    for term in terms:
        found = find_word(lower, term)
        if found is None or not spans:
            out.append(FAR)
            continue
        i = index(found[0])
        out.append(min(max(a - i, i - b, 1) - 1 for a, b in spans))
    return tuple(out)


def find_word(text: str, phrase: str) -> tuple[int, int] | None:
    """Start and end of the first occurrence of ``phrase`` in ``text`` as whole words (no
    word character, as ``\\w`` has it, just before or after).

    A scan rather than a regular expression built from the phrase: names differ with every
    question, so each pattern was compiled anew (the ``re`` cache churns), a few
    milliseconds of CPU per request."""
    if not phrase.strip():
        return None
    start = text.find(phrase)
    while start != -1:
        end = start + len(phrase)
        if (start == 0 or not _is_word(text[start - 1])) and (
            end == len(text) or not _is_word(text[end])
        ):
            return start, end
        start = text.find(phrase, start + 1)
    return None


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"
