"""From rows and fused candidate lists to the answer's records (``schemas.api``).

Pure functions: the rounds (:mod:`~tidegraph.query_service.rounds`) read, these decide
what an answer carries and in which order — named entities first, the predicate focus
ahead of the other relations, one line per fact, community reports by a blend of
similarity, rating and size.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from tidegraph.query_service.fusion import Fused
from tidegraph.query_service.plans import FOCUS
from tidegraph.schemas import ChunkOut, CommunityOut, EntityOut, RelationOut

NO_BUILD = (
    "no community reports: no build covers this space (build them with"
    " `tidegraph communities`; an answer as believed at an instant reads the build current"
    " then, never a later one)"
)
"""Why a mode that reads community reports found none: the same words now and at any
earlier instant, so a past answer never changes."""

STALE_REPORTS = (
    "community reports predate the latest graph write; rebuild with "
    "`tidegraph communities` for reports that describe the current graph"
)


def entities(by_name: list[Any], by_vec: list[Any], top_k: int, floor: float) -> list[EntityOut]:
    """Named entities first (they are what the question is about), then nearest by vector
    down to the similarity ``floor``."""
    out: dict[int, EntityOut] = {}
    for i, sp, name, typ, desc, aliases in sorted(by_name, key=lambda r: int(r[0])):
        out.setdefault(int(i), _entity(i, sp, name, typ, desc, aliases, "name", 1.0))
    for i, sp, name, typ, desc, aliases, d in by_vec:
        if len(out) >= max(top_k, len(by_name)):
            break
        if sim(d) < floor:
            break  # rows come nearest first
        out.setdefault(int(i), _entity(i, sp, name, typ, desc, aliases, "vector", sim(d)))
    return list(out.values())


def _entity(
    i: Any, sp: str, name: str, typ: str, desc: str, aliases: Any, matched: str, score: float
) -> EntityOut:
    return EntityOut(
        id=str(i),
        space=sp,
        name=name,
        type=typ,
        description=desc,
        aliases=list(aliases),
        matched=matched,
        score=score,
    )


def focus_first(
    fused: list[Fused[int]], names: list[str], fit: dict[int, bool]
) -> list[Fused[int]]:
    """The predicate focus leads (:mod:`~tidegraph.query_service.focus`): its hits in the
    fitting role, then in the other role, then every other candidate — each group in fused
    order. A focus hit the fusion left out (the quota merge truncates) is still placed."""
    if not fit:
        return fused
    placed = {f.key for f in fused}
    channel = names.index(FOCUS)
    missing = [
        Fused(key, 0.0, (channel,), (rank,))
        for rank, key in enumerate(fit, start=1)
        if key not in placed
    ]
    ordered = [*fused, *missing]
    return (
        [f for f in ordered if fit.get(f.key) is True]
        + [f for f in ordered if fit.get(f.key) is False]
        + [f for f in ordered if f.key not in fit]
    )


def relations(
    fused: list[Fused[int]],
    rows: list[Any],
    names: list[str],
    hops: dict[int, int],
    limit: int,
    symmetric: frozenset[str] = frozenset(),
) -> list[RelationOut]:
    """Hits in fused order, de-duplicated on (subject, predicate, object, negated) ignoring
    case — the same fact in two spaces is one line of evidence with both provenances. For a
    ``symmetric`` predicate the pair is unordered: ``B p A`` merges into ``A p B``."""
    by_id = {int(r[0]): r for r in rows}
    out: list[RelationOut] = []
    index: dict[tuple[str, str, str, bool], int] = {}
    for f in fused:
        row = by_id.get(f.key)
        if row is None:
            continue
        (rid, sp, subj, pred, obj, neg, vf, vt, tc, te, state, by, weight, docs, order, via) = row
        chans = [names[c] for c in f.channels]
        key = fact_key(subj, pred, obj, bool(neg), symmetric)
        if key in index:
            prev = out[index[key]]
            out[index[key]] = prev.model_copy(
                update={
                    "channels": _union(prev.channels, chans),
                    "doc_keys": sorted({*prev.doc_keys, *docs}),
                    "hop": _min_hop(prev.hop, hops.get(int(rid))),
                    "order_key": max(
                        (o for o in (prev.order_key, order) if o is not None), default=None
                    ),
                }
            )
            continue
        if len(out) >= limit:
            continue
        index[key] = len(out)
        out.append(
            RelationOut(
                id=str(rid),
                space=sp,
                subject=subj,
                predicate=pred,
                object=obj,
                negated=bool(neg),
                valid_from=vf,
                valid_to=vt,
                t_created=tc,
                t_expired=te,
                status=str(state or "retracted"),
                superseded_by=str(by) if by is not None else None,
                superseded_via=via,
                weight=int(weight),
                doc_keys=list(docs),
                hop=hops.get(int(rid)),
                channels=chans,
                score=round(f.score, 6),
                order_key=order,
            )
        )
    return out


def fact_key(
    subject: str, predicate: str, obj: str, negated: bool, symmetric: frozenset[str]
) -> tuple[str, str, str, bool]:
    """What makes two relation rows one fact (names ignoring case; a symmetric predicate's
    pair unordered)."""
    a, b = subject.lower(), obj.lower()
    if predicate in symmetric and b < a:
        a, b = b, a
    return (a, predicate.lower(), b, negated)


def chunks(fused: list[Fused[int]], rows: list[Any], names: list[str]) -> list[ChunkOut]:
    """Passages in fused order, each cited as ``doc_key#ordinal``."""
    by_id = {int(r[0]): r for r in rows}
    out: list[ChunkOut] = []
    for f in fused:
        row = by_id.get(f.key)
        if row is None:
            continue
        cid, sp, doc_key, ordinal, text, order = row
        out.append(
            ChunkOut(
                id=str(cid),
                space=sp,
                doc_key=doc_key,
                ordinal=int(ordinal),
                text=text,
                citation=f"{doc_key}#{int(ordinal)}",
                channels=[names[c] for c in f.channels],
                score=round(f.score, 6),
                order_key=order,
            )
        )
    return out


def communities(
    rows: list[Any],
    last_write: datetime | None,
    top_k: int,
    weights: tuple[float, float, float],
) -> tuple[list[CommunityOut], list[str]]:
    """Blend similarity, rating and size (paper §6): a narrow, tightly worded report must
    not outrank a broad one merely by sitting closer to a short query. Warns when the
    reports predate the latest graph write."""
    if not rows:
        return [], []
    w_sim, w_rating, w_size = weights
    max_rating = max(10.0, max(float(r[6]) for r in rows))
    max_size = max(int(r[7]) for r in rows)
    hits = []
    for cid, sp, title, summary, findings, level, rating, size, built_at, d in rows:
        size_term = math.log1p(int(size)) / math.log1p(max_size) if max_size > 0 else 0.0
        score = w_sim * sim(d) + w_rating * float(rating) / max_rating + w_size * size_term
        hits.append(
            CommunityOut(
                id=str(cid),
                space=sp,
                level=int(level),
                title=title,
                summary=summary,
                rating=float(rating),
                size=int(size),
                built_at=built_at,
                findings=_finding_texts(findings),
                score=round(score, 6),
            )
        )
    hits.sort(key=lambda h: (-h.score, int(h.id)))
    oldest = min(h.built_at for h in hits)
    stale = last_write is not None and oldest < last_write
    return hits[:top_k], [STALE_REPORTS] if stale else []


def _finding_texts(findings: Any) -> list[str]:
    out = []
    for f in findings or []:
        text = f.get("summary") if isinstance(f, dict) else f
        if isinstance(text, str) and text.strip():
            out.append(text.strip())
    return out


def sim(distance: Any) -> float:
    """Cosine similarity from pgvector's cosine distance (none: 0)."""
    return round(1.0 - float(distance), 6) if distance is not None else 0.0


def _union(a: list[str], b: list[str]) -> list[str]:
    return a + [x for x in b if x not in a]


def _min_hop(a: int | None, b: int | None) -> int | None:
    present = [h for h in (a, b) if h is not None]
    return min(present) if present else None
