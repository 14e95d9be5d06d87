"""The importance score retention ranks by, and the choice it makes from it: pure."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.retention.score import Usage, Weights, importance, to_archive

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
DAYS = st.floats(min_value=0, max_value=3650, allow_nan=False)


@st.composite
def usages(draw: st.DrawFn, entity_id: int = 1) -> Usage:
    retrieved = draw(st.one_of(st.none(), DAYS))
    return Usage(
        entity_id,
        draw(st.integers(0, 10_000)),
        None if retrieved is None else NOW - timedelta(days=retrieved),
        draw(st.integers(0, 10_000)),
        NOW - timedelta(days=draw(DAYS)),
    )


def test_terms_one_by_one() -> None:
    old = NOW - timedelta(days=3650)
    base = Usage(1, 0, None, 0, old)
    assert importance(base, NOW) == pytest.approx(0.0, abs=1e-9)
    assert importance(replace(base, believed_since=NOW), NOW) == pytest.approx(1.0)
    assert importance(replace(base, last_retrieved=NOW), NOW) == pytest.approx(1.0)
    month = replace(base, last_retrieved=NOW - timedelta(days=30))
    assert importance(month, NOW) == pytest.approx(0.5, abs=1e-3)  # one half-life
    assert importance(replace(base, retrievals=1), NOW) == pytest.approx(0.6931, abs=1e-4)
    assert importance(replace(base, degree=3), NOW, Weights(degree=2)) == pytest.approx(
        2 * 1.3863, abs=1e-4
    )
    with pytest.raises(ValueError):
        Weights(recency=-1)
    with pytest.raises(ValueError):
        Weights(half_life_days=0)


@given(usages(), st.integers(1, 100), st.integers(1, 100), DAYS, DAYS)
def test_more_use_more_links_or_newer_never_scores_lower(
    u: Usage, more_retrievals: int, more_degree: int, sooner: float, younger: float
) -> None:
    s = importance(u, NOW)
    assert s >= 0 and s < float("inf")
    assert importance(replace(u, retrievals=u.retrievals + more_retrievals), NOW) > s
    assert importance(replace(u, degree=u.degree + more_degree), NOW) > s
    last = u.last_retrieved or NOW - timedelta(days=3650)
    fresher = min(NOW, last + timedelta(days=sooner))
    assert importance(replace(u, last_retrieved=fresher), NOW) >= s
    newer = min(NOW, u.believed_since + timedelta(days=younger))
    assert importance(replace(u, believed_since=newer), NOW) >= s


@given(st.lists(usages(), max_size=40), st.floats(0, 1))
def test_the_kept_share_outscores_what_is_archived(drawn: list[Usage], keep: float) -> None:
    population = [replace(u, entity_id=i) for i, u in enumerate(drawn)]
    chosen = to_archive(population, keep, NOW)
    assert len(set(chosen)) == len(chosen)
    kept = [u for u in population if u.entity_id not in set(chosen)]
    assert len(kept) >= keep * len(population) - 1e-9
    assert len(kept) < keep * len(population) + 1
    scores = {u.entity_id: importance(u, NOW) for u in population}
    if chosen and kept:
        assert max(scores[i] for i in chosen) <= min(scores[u.entity_id] for u in kept)
    assert [scores[i] for i in chosen] == sorted(scores[i] for i in chosen)


def test_keep_bounds_and_stable_ties() -> None:
    same = [Usage(i, 0, None, 0, NOW) for i in (5, 3, 9, 1)]
    assert to_archive(same, 0.5, NOW) == [1, 3]
    assert to_archive(same, 1.0, NOW) == []
    assert to_archive(same, 0.0, NOW) == [1, 3, 5, 9]
    assert to_archive([], 0.5, NOW) == []
    with pytest.raises(ValueError):
        to_archive(same, 1.5, NOW)
