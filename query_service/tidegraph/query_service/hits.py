"""From rows and fused candidate lists to the answer's records (``schemas.api``).

Pure functions: the rounds (:mod:`~tidegraph.query_service.rounds`) read, these decide
what an answer carries and in which order — named entities first, the evidence chains and
the predicate focus ahead of the other relations, one line per fact, every chain whole,
community reports by a blend of similarity, rating and size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tidegraph.query_service.fusion import Fused
from tidegraph.query_service.plans import FOCUS, PATH
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


def lead(
    fused: list[Fused[int]],
    names: list[str],
    fit: dict[int, bool],
    first: list[int],
    after: list[int],
) -> list[list[Fused[int]]]:
    """The groups an answer's relations come in: the links of the chains that lead
    (``first``, in placing order: :mod:`~tidegraph.query_service.paths`), the predicate
    focus (:mod:`~tidegraph.query_service.focus`) in the fitting role, then in the other
    role, the links of the other chains (``after``), then every other candidate. Focus
    hits and the rest keep their fused order; each candidate is in the first group that
    claims it, and one the fusion left out (the quota merge truncates) is still placed.
    Chain links carry the ``path`` channel (their rank: the placing order)."""
    by_key = {f.key: f for f in fused}
    if fit:
        focus = names.index(FOCUS)
        for rank, key in enumerate(fit, start=1):
            by_key.setdefault(key, Fused(key, 0.0, (focus,), (rank,)))
    chained = [*first, *after]
    if chained:
        path = names.index(PATH)
        for rank, key in enumerate(chained, start=1):
            f = by_key.get(key, Fused(key, 0.0, (), ()))
            pairs = sorted([*zip(f.channels, f.ranks, strict=True), (path, rank)])
            by_key[key] = Fused(
                key, f.score, tuple(c for c, _ in pairs), tuple(r for _, r in pairs)
            )
    claimed: set[int] = set()
    groups: list[list[Fused[int]]] = []
    for keys in (
        first,
        [k for k in by_key if fit.get(k) is True],
        [k for k in by_key if fit.get(k) is False],
        after,
        list(by_key),
    ):
        groups.append([by_key[k] for k in keys if k not in claimed])
        claimed.update(keys)
    return groups


def relations(
    fused: list[Fused[int]],
    rows: list[Any],
    names: list[str],
    hops: dict[int, int],
    limit: int,
    symmetric: frozenset[str] = frozenset(),
    paths: Mapping[int, Sequence[int]] | None = None,
) -> list[RelationOut]:
    """Hits in fused order, de-duplicated on (subject, predicate, object, negated) ignoring
    case — the same fact in two spaces is one line of evidence with both provenances. For a
    ``symmetric`` predicate the pair is unordered: ``B p A`` merges into ``A p B``. A hit
    with a path of two or more relations (``paths``) reports it (:func:`whole_chains`)."""
    by_id = {int(r[0]): r for r in rows}
    out: list[RelationOut] = []
    index: dict[tuple[str, str, str, bool], int] = {}
    line_of: dict[str, str] = {}
    for f in fused:
        row = by_id.get(f.key)
        if row is None:
            continue
        (rid, sp, subj, pred, obj, neg, vf, vt, tc, te, state, by, weight, docs, order, via) = row
        chans = [names[c] for c in f.channels]
        key = fact_key(subj, pred, obj, bool(neg), symmetric)
        if key in index:
            prev = out[index[key]]
            line_of[str(rid)] = prev.id
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
        path = (paths or {}).get(int(rid), ())
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
                path=[str(x) for x in path] if len(path) > 1 else None,
            )
        )
    lines = [
        line.model_copy(update={"path": [line_of.get(x, x) for x in line.path]})
        if line.path and any(x in line_of for x in line.path)
        else line
        for line in out
    ]
    return whole_chains(lines, limit)


def whole_chains(lines: Sequence[RelationOut], limit: int) -> list[RelationOut]:
    """At most ``limit`` of ``lines``, in their order, each after every relation on its
    path: a line whose path names relations not placed yet brings them in just before
    itself when the answer has room for all of them (otherwise it is left out, and later
    lines may still fit). A line whose path names a relation absent from ``lines``, or
    whose paths loop, reports no path."""
    by_id = {line.id: line for line in lines}
    out: list[RelationOut] = []
    placed: set[str] = set()

    def chain_to(line: RelationOut, trail: frozenset[str]) -> list[RelationOut] | None:
        group: list[RelationOut] = []
        for pid in (line.path or [])[:-1]:
            if pid in placed or any(g.id == pid for g in group):
                continue
            before = by_id.get(pid)
            if before is None or pid in trail:
                return None
            sub = chain_to(before, trail | {line.id})
            if sub is None:
                return None
            group += [g for g in sub if all(g.id != x.id for x in group)]
        return [*group, line]

    for line in lines:
        if line.id in placed:
            continue
        group = chain_to(line, frozenset())
        if group is None:
            group = [line.model_copy(update={"path": None})]
        if len(out) + len(group) > limit:
            continue
        out.extend(group)
        placed.update(g.id for g in group)
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
