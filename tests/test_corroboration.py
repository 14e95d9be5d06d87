"""One edge per identity, weighted by distinct contributing chunks (paper §4.7, §5.1)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.graph.corroboration import (
    Contribution,
    Corroboration,
    EdgeKey,
    corroborate,
    edge_key,
)


def test_edge_identity_includes_negation_and_ignores_name_case() -> None:
    assert edge_key("Ada Lovelace", "worked_with", "Charles Babbage", False) == EdgeKey(
        "ada lovelace", "worked_with", "charles babbage", False
    )
    assert edge_key("A", "worked_with", "B", True) != edge_key("A", "worked_with", "B", False)


def test_weight_counts_distinct_chunks_not_writes() -> None:
    seen = [Contribution("doc1#0"), Contribution("doc1#1"), Contribution("doc1#0")]
    edge = corroborate(seen)
    assert edge is not None
    assert edge.weight == 2
    reindexed = corroborate([*seen, *seen])  # the same document indexed again
    assert reindexed == edge
    assert edge.add(Contribution("doc2#0")).weight == 3
    assert corroborate([]) is None  # nothing contributes: the store retracts the edge


def test_merged_values() -> None:
    edge = corroborate(
        [
            Contribution("c1", "Short.", 0.5, "1833", None),
            Contribution("c2", "A longer description.", 0.9, None, None),
            Contribution("c3", "", 0.7, "1833-06", "1852"),
        ]
    )
    assert edge == Corroboration(
        frozenset({"c1", "c2", "c3"}), "A longer description.", 0.9, "1833", "1852"
    )
    assert (edge.valid_from, edge.valid_to) == ("1833", "1852")


def test_reobserving_without_a_period_never_erases_one() -> None:
    dated = Corroboration.of(Contribution("c1", valid_from="2019", valid_to="2021"))
    assert dated.add(Contribution("c2")).stated_from == "2019"
    assert dated.add(Contribution("c2")).valid_to == "2021"


def test_equal_days_prefer_the_more_precise_form() -> None:
    edge = corroborate(
        [
            Contribution("a", valid_from="2019", valid_to="2021"),
            Contribution("b", valid_from="2019-01-01", valid_to="2021-12"),
        ]
    )
    assert edge is not None
    assert (edge.valid_from, edge.valid_to) == ("2019-01-01", "2021-12")
    longer = corroborate(
        [Contribution("a", valid_to="2021-12"), Contribution("b", valid_to="2021-12-31")]
    )
    assert longer is not None and longer.valid_to == "2021-12-31"


def test_contradictory_stated_ends_report_no_period_but_keep_merging() -> None:
    edge = corroborate([Contribution("a", valid_from="2020"), Contribution("b", valid_to="2018")])
    assert edge is not None
    assert (edge.valid_from, edge.valid_to) == (None, None)
    healed = edge.add(Contribution("c", valid_from="2016"))
    assert (healed.valid_from, healed.valid_to) == ("2016", "2018")


def _contributions(seed: int) -> list[Contribution]:
    rng = random.Random(seed)
    return [
        Contribution(
            rng.choice(["d1#0", "d1#1", "d2#0", "d3#4"]),
            rng.choice(["", "ab", "ba", "longer text"]),
            rng.choice([0.3, 0.6, 0.9]),
            rng.choice([None, "2019", "2019-05", "2020-01-01"]),
            rng.choice([None, "2018", "2021", "2021-12-31"]),
        )
        for _ in range(rng.randint(1, 8))
    ]


@given(st.integers(0, 2**32).map(_contributions), st.randoms(use_true_random=False))
def test_join_is_order_grouping_and_repetition_free(
    contributions: list[Contribution], rng: random.Random
) -> None:
    expected = corroborate(contributions)
    assert expected is not None
    assert expected.weight == len({c.chunk_id for c in contributions})
    replayed = contributions + rng.sample(contributions, k=rng.randint(0, len(contributions)))
    rng.shuffle(replayed)
    assert corroborate(replayed) == expected  # re-indexing never inflates the weight
    cut = rng.randint(1, len(replayed))
    left, right = corroborate(replayed[:cut]), corroborate(replayed[cut:])
    assert left is not None
    joined = left if right is None else left.join(right)
    assert joined == expected
    assert right is None or right.join(left) == expected
    assert expected.join(expected) == expected
