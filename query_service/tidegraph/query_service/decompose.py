"""Query decomposition for multi-event questions (paper §8.5), off by default.

"When did Ada Lovelace meet Charles Babbage, and when did Mary Somerville publish?" asks
about two events; one query vector lands between them and each channel's depth is shared.
Decomposed, each sub-question is retrieved on its own and the answers are merged by
reciprocal rank, so each event brings its own best evidence. The paper measured it costing
6.7 points on its benchmark (a single-event question split by accident loses its context),
which is why it is a request option, not the default.

Splitting is lexical: at a question mark or semicolon followed by more text, and at a
conjunction (``and``, ``but``, ``while``, ``or``) or a comma that opens a new question
(``when``, ``did`` …), or at ``before`` / ``after`` followed by a capitalised name (a second
event with its own subject). Parts of fewer than two words are not questions and stay
joined; at most :data:`MAX_PARTS` parts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from tidegraph.query_service.fusion import rrf
from tidegraph.query_service.hits import whole_chains
from tidegraph.schemas import QueryDataResponse

MAX_PARTS = 4

_OPENER = (
    r"(?:when|what|who|whom|whose|which|where|why|how|did|does|do|has|have|had|was|were|is|"
    r"are|can|could|will|would)\b"
)
_SPLIT = re.compile(
    rf"[?;]\s+(?=\S)|,?\s+(?:and|but|while|or)\s+(?={_OPENER})|,\s+(?={_OPENER})",
    re.IGNORECASE,
)
_EVENT = re.compile(r"\s+(?:before|after)\s+(?=[A-Z])")
_WORD = re.compile(r"\w+")

T = TypeVar("T")


def sub_questions(query: str) -> list[str]:
    """The sub-questions of ``query``; ``[query]`` when it asks one thing."""
    pieces = [query]
    for pattern in (_SPLIT, _EVENT):
        pieces = [p for piece in pieces for p in pattern.split(piece)]
    parts: list[str] = []
    for piece in pieces:
        text = piece.strip(" ,;?")
        if len(_WORD.findall(text)) < 2 and parts:
            parts[-1] = f"{parts[-1]} {text}".strip()
        elif text:
            parts.append(text)
    if len(parts) < 2:
        return [query]
    return [f"{p}?" for p in parts[:MAX_PARTS]]


def merge(
    results: Sequence[QueryDataResponse], top_k: int, relation_top_k: int
) -> QueryDataResponse:
    """One result from the sub-questions' results: each list merged by reciprocal rank
    (ids as keys, the first occurrence's hit kept), entities named in any sub-question
    ahead of vector matches, capped as the request caps one result; every relation's
    path still whole before it."""
    entities = _fused([r.entities for r in results], lambda h: h.id, None)
    entities = [e for e in entities if e.matched == "name"] + [
        e for e in entities if e.matched != "name"
    ]
    return QueryDataResponse(
        entities=entities[: max(top_k, sum(e.matched == "name" for e in entities))],
        relations=whole_chains(
            _fused([r.relations for r in results], lambda h: h.id, None), relation_top_k
        ),
        chunks=_fused([r.chunks for r in results], lambda h: h.id, top_k),
        communities=_fused([r.communities for r in results], lambda h: h.id, top_k),
        stats={"parts": [r.stats for r in results]},
    )


def _fused(lists: Sequence[Sequence[T]], key: Callable[[T], str], limit: int | None) -> list[T]:
    first: dict[str, T] = {}
    for hits in lists:
        for h in hits:
            first.setdefault(key(h), h)
    order = rrf([[key(h) for h in hits] for hits in lists], limit=limit)
    return [first[f.key] for f in order]
