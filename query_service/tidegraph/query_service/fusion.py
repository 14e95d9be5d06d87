"""Merging ranked candidate lists whose scores cannot be compared (paper §7.3).

Traversal ranks by hop and recency, similarity by cosine distance, full-text by ``ts_rank``:
pooling by score would hand every slot to whichever channel is sorted on the pooled
quantity. So merging is by rank only.

* :func:`rrf` — reciprocal rank fusion, the default: each candidate scores
  ``Σ_c 1 / (k + r_c)`` over the channels ``c`` that returned it at 1-based rank ``r_c``.
  A third channel contributes without re-tuning the first two.
* :func:`quota_interleave` — the older fixed-share merge: a secondary list (similarity) gets
  share ``q`` of the slots against a primary list (traversal), further lists appended behind.

Both are pure functions over hashable keys, deterministic in their tie-breaks.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_K = 60


@dataclass(frozen=True)
class Fused(Generic[K]):
    """One merged candidate."""

    key: K
    """The candidate."""
    score: float
    """Its fused score (RRF sum; for the quota merge, ``1 / position``)."""
    channels: tuple[int, ...]
    """Indexes of the input lists that returned it, ascending."""
    ranks: tuple[int, ...]
    """Its 1-based rank in each of those lists, aligned with ``channels``."""


def rrf(
    lists: Sequence[Sequence[K]], *, k: int = DEFAULT_K, limit: int | None = None
) -> list[Fused[K]]:
    """Reciprocal rank fusion of ranked lists (duplicates inside one list count once).

    Ties in score go to the candidate with the better best rank, then to the earlier
    channel, then to the earlier position in it — so the result never depends on hash order.
    """
    if k < 1:
        raise ValueError("the RRF constant k must be at least 1")
    seen: dict[K, tuple[list[int], list[int]]] = {}
    first: dict[K, tuple[int, int]] = {}
    for c, items in enumerate(lists):
        for item, rank in _ranks(items).items():
            chans, ranks = seen.setdefault(item, ([], []))
            chans.append(c)
            ranks.append(rank)
            first.setdefault(item, (c, rank))
    fused = [
        Fused(key, sum(1.0 / (k + r) for r in ranks), tuple(chans), tuple(ranks))
        for key, (chans, ranks) in seen.items()
    ]
    fused.sort(key=lambda f: (-f.score, min(f.ranks), first[f.key]))
    return fused if limit is None else fused[: max(limit, 0)]


def quota_interleave(
    primary: Sequence[K],
    secondary: Sequence[K],
    *,
    share: float,
    limit: int,
    extra: Sequence[Sequence[K]] = (),
) -> list[Fused[K]]:
    """Interleave so ``secondary`` holds about ``share`` of the first ``limit`` slots.

    Slot ``i`` (0-based) goes to ``secondary`` while its picks are below
    ``share * (i + 1)``, otherwise to ``primary``; when one list runs dry the other fills
    in, then ``extra`` lists are appended in order. Candidates already placed are skipped,
    and each list's own order is preserved.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError("the similarity share must lie in [0, 1]")
    lists: list[Sequence[K]] = [primary, secondary, *extra]
    pos = [0] * len(lists)
    taken: dict[K, int] = {}
    out: list[K] = []
    n_secondary = 0

    def next_from(c: int) -> K | None:
        items = lists[c]
        while pos[c] < len(items):
            item = items[pos[c]]
            pos[c] += 1
            if item not in taken:
                return item
        return None

    while len(out) < limit:
        want_secondary = n_secondary < share * (len(out) + 1)
        order = (1, 0) if want_secondary else (0, 1)
        picked: K | None = None
        for c in order:
            picked = next_from(c)
            if picked is not None:
                if c == 1:
                    n_secondary += 1
                taken[picked] = c
                break
        if picked is None:
            for c in range(2, len(lists)):
                picked = next_from(c)
                if picked is not None:
                    taken[picked] = c
                    break
        if picked is None:
            break
        out.append(picked)
    rank_maps = [_ranks(items) for items in lists]
    placed: list[Fused[K]] = []
    for i, item in enumerate(out):
        hits = [(c, m[item]) for c, m in enumerate(rank_maps) if item in m]
        placed.append(
            Fused(item, 1.0 / (i + 1), tuple(c for c, _ in hits), tuple(r for _, r in hits))
        )
    return placed


def _ranks(items: Sequence[K]) -> dict[K, int]:
    """1-based rank of each distinct item (first occurrence)."""
    out: dict[K, int] = {}
    for item in items:
        if item not in out:
            out[item] = len(out) + 1
    return out
