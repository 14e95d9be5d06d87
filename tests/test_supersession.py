"""Supersession from document order over exclusive predicate groups (paper §5.2);
functional predicates in test_supersession_functional.py."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegraph.indexer.graph.predicates import group_index
from tidegraph.indexer.graph.supersession import (
    Assertion,
    conflict,
    resolve_supersession,
)

NARRATIVE = [{"friend_of", "enemy_of", "rival_of", "ally_of", "opponent_of"}, {"works_at", "left"}]


def resolve_by(assertions: list[Assertion], groups: list[set[str]]) -> dict[str, str | None]:
    """Each relation's superseding relation, without the mechanism."""
    return {
        rid: s.by if s is not None else None
        for rid, s in resolve_supersession(assertions, groups).items()
    }


def _a(
    id: str, predicate: str, order_key: str, *, negated: bool = False, pair: str = "AM"
) -> Assertion:
    return Assertion(id, pair[0], pair[1], predicate, negated, order_key)


def test_later_document_wins_and_the_chain_reads_as_history() -> None:
    result = resolve_by(
        [_a("ally", "ally_of", "1"), _a("enemy", "enemy_of", "2"), _a("friend", "friend_of", "3")],
        NARRATIVE,
    )
    assert result == {"ally": "enemy", "enemy": "friend", "friend": None}


def test_reasserting_an_earlier_predicate_makes_it_current_again() -> None:
    # ally (doc 1) → enemy (doc 2) → ally again (doc 3): the ally edge's order is now doc 3
    result = resolve_by([_a("ally", "ally_of", "3"), _a("enemy", "enemy_of", "2")], NARRATIVE)
    assert result == {"ally": None, "enemy": "ally"}


def test_late_arriving_older_document_lands_superseded() -> None:
    current = [_a("friend", "friend_of", "2019"), _a("enemy", "enemy_of", "2021")]
    before = resolve_by(current, NARRATIVE)
    after = resolve_by([*current, _a("ally", "ally_of", "2020")], NARRATIVE)
    assert before == {"friend": "enemy", "enemy": None}
    assert after == {"friend": "ally", "ally": "enemy", "enemy": None}


def test_predicates_outside_groups_and_other_pairs_never_interact() -> None:
    result = resolve_by(
        [
            _a("w1", "worked_with", "1"),
            _a("d1", "designed", "2"),
            _a("e1", "enemy_of", "1"),
            _a("e2", "ally_of", "2", pair="MA"),  # the reverse pair is another pair
            _a("e3", "ally_of", "3", pair="AX"),
        ],
        NARRATIVE,
    )
    assert set(result.values()) == {None}


def test_a_denial_supersedes_the_assertion_it_denies_and_vice_versa() -> None:
    assert resolve_by(
        [_a("yes", "worked_with", "1"), _a("no", "worked_with", "2", negated=True)], []
    ) == {"yes": "no", "no": None}
    assert resolve_by(
        [_a("yes", "worked_with", "3"), _a("no", "worked_with", "2", negated=True)], []
    ) == {"yes": None, "no": "yes"}


def test_a_denial_says_nothing_about_other_group_members() -> None:
    result = resolve_by(
        [
            _a("ally", "ally_of", "1"),
            _a("not-enemy", "enemy_of", "2", negated=True),
            _a("not-friend", "friend_of", "3", negated=True),
        ],
        NARRATIVE,
    )
    assert set(result.values()) == {None}
    result = resolve_by(
        [
            _a("ally", "ally_of", "1"),
            _a("not-ally", "ally_of", "2", negated=True),
            _a("enemy", "enemy_of", "3"),
        ],
        NARRATIVE,
    )
    assert result == {"ally": "not-ally", "not-ally": None, "enemy": None}


def test_ties_break_by_predicate_then_negation_then_id() -> None:
    assert resolve_by([_a("a", "ally_of", "5"), _a("e", "enemy_of", "5")], NARRATIVE) == {
        "a": "e",
        "e": None,
    }
    assert resolve_by(
        [_a("yes", "ally_of", "5"), _a("no", "ally_of", "5", negated=True)], NARRATIVE
    ) == {"yes": "no", "no": None}
    assert resolve_by([_a("r2", "rival_of", "5"), _a("r1", "rival_of", "5")], NARRATIVE) == {
        "r1": "r2",
        "r2": None,
    }


def test_overlapping_groups() -> None:
    groups = [{"a", "b"}, {"b", "c"}]
    result = resolve_by([_a("A", "a", "1"), _a("C", "c", "2"), _a("B", "b", "3")], groups)
    assert result == {"A": "B", "C": "B", "B": None}
    result = resolve_by([_a("B", "b", "1"), _a("A", "a", "2"), _a("C", "c", "3")], groups)
    assert result == {"B": "A", "A": None, "C": None}  # a and c may co-hold


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        resolve_by([_a("x", "ally_of", "1"), _a("x", "enemy_of", "2")], NARRATIVE)


_PREDICATES = ["friend_of", "enemy_of", "ally_of", "works_at", "left", "worked_with"]


def _assertions(seed: int) -> list[Assertion]:
    """Up to 12 live relations, one per identity as the store keeps them, from one seed."""
    rng = random.Random(seed)
    rows: dict[tuple[str, bool, str], str] = {}
    for _ in range(rng.randint(0, 12)):
        identity = (rng.choice(_PREDICATES), rng.random() < 0.3, rng.choice(["AB", "BA", "AC"]))
        rows[identity] = rng.choice(["2019", "2020", "2021", "2021-06"])
    return [
        Assertion(f"r{i}", pair[0], pair[1], predicate, negated, key)
        for i, ((predicate, negated, pair), key) in enumerate(rows.items())
    ]


_ASSERTIONS = st.integers(0, 2**32).map(_assertions)


@settings(max_examples=200)
@given(_ASSERTIONS, st.randoms(use_true_random=False))
def test_result_depends_only_on_the_set(assertions: list[Assertion], rng: random.Random) -> None:
    expected = resolve_by(assertions, NARRATIVE)
    for _ in range(3):
        shuffled = list(assertions)
        rng.shuffle(shuffled)
        assert resolve_by(shuffled, NARRATIVE) == expected

    index = group_index(NARRATIVE)
    by_id = {a.id: a for a in assertions}
    current = [a for a in assertions if expected[a.id] is None]
    for a in current:  # nothing current contradicts anything current
        for b in current:
            if a is not b and (a.subject, a.object) == (b.subject, b.object):
                assert conflict(a, b, index) is None
    for a in assertions:  # a superseded relation points at a later conflicting one
        successor = expected[a.id]
        if successor is not None:
            b = by_id[successor]
            assert (a.subject, a.object) == (b.subject, b.object)
            assert conflict(a, b, index) is not None
            assert (a.order_key, a.predicate, a.negated, a.id) < (
                b.order_key,
                b.predicate,
                b.negated,
                b.id,
            )


@given(_ASSERTIONS, st.data())
def test_reassertion_in_the_latest_document_is_current(
    assertions: list[Assertion], data: st.DataObject
) -> None:
    if not assertions:
        return
    chosen = data.draw(st.sampled_from(assertions))
    latest = [
        Assertion(a.id, a.subject, a.object, a.predicate, a.negated, "9999") if a is chosen else a
        for a in assertions
    ]
    assert resolve_by(latest, NARRATIVE)[chosen.id] is None
