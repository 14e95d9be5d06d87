"""Reranking the fused relation candidates (paper §7.4); both off by default.

* :func:`by_distance` — node-distance reranking. The traversal channel carries true hop
  counts, but the similarity and full-text channels never walked to what they found, so
  a fact three hops from anything the question names could outrank one sitting on it.
  Candidates are ordered by their graph distance from the matched entities (resolved by a
  bounded walk under the request's filters), the fused order breaking ties; unreachable
  ones go last.
* :func:`mmr` — maximal marginal relevance (Carbonell and Goldstein, 1998). Channels
  correlate: traversal and relation similarity return the same fact worded differently,
  and a restatement costs a slot outright. Each pick maximises
  ``λ·relevance − (1 − λ)·max similarity to the picks so far``; relevance falls linearly
  with the position in the order given, similarity is the cosine of the relations'
  embeddings. λ = 0.7 by default: above about 0.8 the penalty rarely changes the order,
  below about 0.4 it promotes unrelated relations over the ones that answer.

Both are pure functions over keys; the caller applies them within each group that must
stay ahead of the next (the evidence chains and the predicate focus lead whatever the
reranking).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from tidegraph.query_service.fusion import Fused

K = TypeVar("K", bound=Hashable)

DEFAULT_LAMBDA = 0.7


def by_distance(keys: Sequence[K], distance: Mapping[K, int]) -> list[K]:
    """``keys`` nearest first (a stable sort: equal distances keep their order); keys
    without a distance (not reached within the bound) last."""
    far = max(distance.values(), default=0) + 1
    return sorted(keys, key=lambda k: distance.get(k, far))


def mmr(
    keys: Sequence[K],
    similarity: Mapping[tuple[K, K], float],
    *,
    lam: float = DEFAULT_LAMBDA,
    limit: int | None = None,
) -> list[K]:
    """Greedy MMR selection of ``keys`` (ranked best first), up to ``limit``.

    ``similarity`` holds the pairs that have one (either order); a missing pair counts as
    unrelated. Ties go to the better-ranked key, so ``lam = 1`` returns ``keys`` unchanged.
    """
    if not 0.0 <= lam <= 1.0:
        raise ValueError("the MMR trade-off λ must lie in [0, 1]")
    n = len(keys)
    want = n if limit is None else min(limit, n)
    relevance = {k: 1.0 - i / n for i, k in enumerate(keys)}
    closest = dict.fromkeys(keys, 0.0)  # max similarity to the picks so far
    remaining = list(keys)
    picked: list[K] = []
    while remaining and len(picked) < want:
        best = max(
            range(len(remaining)),
            key=lambda i: (
                lam * relevance[remaining[i]] - (1.0 - lam) * closest[remaining[i]],
                -i,
            ),
        )
        choice = remaining.pop(best)
        picked.append(choice)
        for k in remaining:
            s = similarity.get((k, choice), similarity.get((choice, k), 0.0))
            if s > closest[k]:
                closest[k] = s
    return picked


def rerank_groups(
    groups: Sequence[Sequence[Fused[int]]],
    fixed: Sequence[bool],
    distance: dict[int, int] | None,
    similarity: dict[tuple[int, int], float],
    lam: float | None,
) -> list[Fused[int]]:
    """:func:`by_distance`, then :func:`mmr`, each within each of ``groups`` (the order
    ``hits.lead`` placed them in), so the relations the question asks about still lead; a
    ``fixed`` group (an evidence chain, whose order is its path) is kept as it is.
    ``distance`` ``None``: no distance reranking; ``lam`` ``None``: no MMR."""
    out: list[Fused[int]] = []
    for group, keep in zip(groups, fixed, strict=True):
        by_key = {f.key: f for f in group}
        keys = list(by_key)
        if not keep and distance is not None:
            keys = by_distance(keys, distance)
        if not keep and lam is not None:
            keys = mmr(keys, similarity, lam=lam)
        out.extend(by_key[k] for k in keys)
    return out
