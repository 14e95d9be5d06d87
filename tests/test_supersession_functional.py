"""Functional predicates: one current value per subject (or per object), latest by
``order_key`` — compared with brute-force models, for every arrival order."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tidegraph.indexer.graph.predicates import group_index
from tidegraph.indexer.graph.supersession import (
    Assertion,
    Supersession,
    conflict,
    resolve_supersession,
)
from tidegraph.schemas.realm_config import FunctionalSide

GROUPS = [{"lives_in", "moved_from"}, {"ally_of", "enemy_of"}]
FUNCTIONAL: dict[str, FunctionalSide] = {"lives_in": "subject", "ceo_of": "object"}


def _a(
    id: str, s: str, p: str, o: str, order_key: str, *, negated: bool = False, names: str = ""
) -> Assertion:
    return Assertion(id, s, o, p, negated, order_key, names)


def test_the_latest_value_is_current_and_the_chain_reads_as_history() -> None:
    result = resolve_supersession(
        [
            _a("paris", "X", "lives_in", "P", "2019"),
            _a("oslo", "X", "lives_in", "O", "2023"),
            _a("rome", "X", "lives_in", "R", "2021"),
            _a("other", "Y", "lives_in", "P", "2018"),  # another subject: its own value
        ],
        GROUPS,
        FUNCTIONAL,
    )
    assert result == {
        "paris": Supersession("rome", "functional"),
        "rome": Supersession("oslo", "functional"),
        "oslo": None,
        "other": None,
    }


def test_object_side_one_subject_per_object() -> None:
    result = resolve_supersession(
        [
            _a("old", "Ann", "ceo_of", "Acme", "2019"),
            _a("new", "Bob", "ceo_of", "Acme", "2022"),
            _a("two", "Bob", "ceo_of", "Beta", "2020"),  # one person may lead two companies
        ],
        GROUPS,
        FUNCTIONAL,
    )
    assert result == {"old": Supersession("new", "functional"), "new": None, "two": None}


def test_undeclared_predicates_keep_every_value() -> None:
    result = resolve_supersession(
        [_a("p", "X", "lives_in", "P", "2019"), _a("r", "X", "lives_in", "R", "2021")], GROUPS
    )
    assert result == {"p": None, "r": None}


def test_a_denial_supersedes_only_the_value_it_denies() -> None:
    result = resolve_supersession(
        [
            _a("paris", "X", "lives_in", "P", "2019"),
            _a("not-rome", "X", "lives_in", "R", "2021", negated=True),
        ],
        GROUPS,
        FUNCTIONAL,
    )
    assert result == {"paris": None, "not-rome": None}
    result = resolve_supersession(
        [
            _a("paris", "X", "lives_in", "P", "2019"),
            _a("rome", "X", "lives_in", "R", "2020"),
            _a("not-rome", "X", "lives_in", "R", "2021", negated=True),
        ],
        GROUPS,
        FUNCTIONAL,
    )
    # Rome is denied; Paris stays superseded by the move (a denial restores nothing)
    assert result == {
        "paris": Supersession("rome", "functional"),
        "rome": Supersession("not-rome", "negation"),
        "not-rome": None,
    }


def test_mechanisms_are_named() -> None:
    result = resolve_supersession(
        [
            _a("ally", "X", "ally_of", "Y", "1"),
            _a("enemy", "X", "enemy_of", "Y", "2"),
            _a("no-enemy", "X", "enemy_of", "Y", "3", negated=True),
        ],
        GROUPS,
        FUNCTIONAL,
    )
    assert result == {
        "ally": Supersession("enemy", "exclusive_group"),
        "enemy": Supersession("no-enemy", "negation"),
        "no-enemy": None,
    }


def test_a_tie_in_document_order_breaks_on_names_not_ids() -> None:
    one = [
        _a("1", "X", "lives_in", "P", "2020", names="X\x00Paris"),
        _a("2", "X", "lives_in", "R", "2020", names="X\x00Rome"),
    ]
    other = [
        _a("2", "X", "lives_in", "P", "2020", names="X\x00Paris"),
        _a("1", "X", "lives_in", "R", "2020", names="X\x00Rome"),
    ]
    assert resolve_supersession(one, GROUPS, FUNCTIONAL) == {
        "1": Supersession("2", "functional"),
        "2": None,
    }
    assert resolve_supersession(other, GROUPS, FUNCTIONAL) == {
        "2": Supersession("1", "functional"),
        "1": None,
    }


# --- brute force: distinct orders, asserted values only ------------------------------

_ORDERS = st.lists(st.integers(1000, 9999), min_size=1, max_size=8, unique=True)


def _values(orders: list[int], rng: random.Random, predicate: str) -> list[Assertion]:
    """One live relation per order, each a distinct (subject, object) of the scope."""
    out = []
    for i, order in enumerate(orders):
        end, other = "K", f"v{i}"
        s, o = (end, other) if FUNCTIONAL[predicate] == "subject" else (other, end)
        out.append(_a(f"r{i}", s, predicate, o, str(order)))
    rng.shuffle(out)
    return out


@settings(max_examples=200)
@given(_ORDERS, st.sampled_from(sorted(FUNCTIONAL)), st.randoms(use_true_random=False))
def test_the_maximum_by_order_is_current_for_any_arrival(
    orders: list[int], predicate: str, rng: random.Random
) -> None:
    live = _values(orders, rng, predicate)
    result = resolve_supersession(live, GROUPS, FUNCTIONAL)
    by_order = sorted(live, key=lambda a: int(a.order_key))
    assert [a.id for a in live if result[a.id] is None] == [by_order[-1].id]
    for earlier, later in zip(by_order, by_order[1:], strict=False):
        assert result[earlier.id] == Supersession(later.id, "functional")


@settings(max_examples=200)
@given(_ORDERS, st.sampled_from(sorted(FUNCTIONAL)), st.randoms(use_true_random=False))
def test_retracting_the_newest_restores_the_one_before(
    orders: list[int], predicate: str, rng: random.Random
) -> None:
    live = _values(orders, rng, predicate)
    newest = max(live, key=lambda a: int(a.order_key))
    rest = [a for a in live if a is not newest]
    result = resolve_supersession(rest, GROUPS, FUNCTIONAL)
    current = [a.id for a in rest if result[a.id] is None]
    assert current == ([max(rest, key=lambda a: int(a.order_key)).id] if rest else [])


# --- mixed: pairs, groups, denials, both sides ----------------------------------------

_PREDICATES = ["lives_in", "moved_from", "ceo_of", "ally_of", "enemy_of", "worked_with"]


def _mixed(seed: int) -> list[Assertion]:
    """Up to 14 live relations over three entities, one per identity as the store keeps
    them; orders may tie."""
    rng = random.Random(seed)
    rows: dict[tuple[str, str, str, bool], str] = {}
    for _ in range(rng.randint(0, 14)):
        s, o = rng.sample(["A", "B", "C"], 2)
        rows[(s, rng.choice(_PREDICATES), o, rng.random() < 0.25)] = rng.choice(
            ["2019", "2020", "2021"]
        )
    return [
        _a(f"r{i}", s, p, o, key, negated=n, names=f"{s}\x00{o}")
        for i, ((s, p, o, n), key) in enumerate(rows.items())
    ]


@settings(max_examples=300)
@given(st.integers(0, 2**32).map(_mixed), st.randoms(use_true_random=False))
def test_mixed_sets_at_most_one_current_value_and_order_independence(
    live: list[Assertion], rng: random.Random
) -> None:
    expected = resolve_supersession(live, GROUPS, FUNCTIONAL)
    for _ in range(3):
        shuffled = list(live)
        rng.shuffle(shuffled)
        assert resolve_supersession(shuffled, GROUPS, FUNCTIONAL) == expected

    # The requirement itself: per functional end, at most one asserted current value,
    # and every asserted value but the latest by order is superseded.
    scopes: dict[tuple[str, str], list[Assertion]] = {}
    for a in live:
        side = FUNCTIONAL.get(a.predicate)
        if side is not None and not a.negated:
            scopes.setdefault((a.predicate, a.subject if side == "subject" else a.object), [])
            scopes[(a.predicate, a.subject if side == "subject" else a.object)].append(a)
    for values in scopes.values():
        assert sum(expected[a.id] is None for a in values) <= 1
        top = max(int(a.order_key) for a in values)
        for a in values:
            if int(a.order_key) < top:
                assert expected[a.id] is not None

    # Brute force over all pairs: nothing current conflicts with anything current, and a
    # superseded relation points at the earliest later relation conflicting with it.
    index = group_index(GROUPS)
    by_id = {a.id: a for a in live}
    current = [a for a in live if expected[a.id] is None]
    for a in current:
        for b in current:
            if a is not b:
                assert conflict(a, b, index, FUNCTIONAL) is None
    for a in live:
        got = expected[a.id]
        later = [b for b in live if _later(b, a) and conflict(a, b, index, FUNCTIONAL) is not None]
        if got is None:
            assert later == []
        else:
            first = min(later, key=_order)
            assert got == Supersession(first.id, conflict(a, first, index, FUNCTIONAL))
            assert by_id[got.by] is first


def _order(a: Assertion) -> tuple[str, str, bool, str, str]:
    return (a.order_key, a.predicate, a.negated, a.names, a.id)


def _later(b: Assertion, a: Assertion) -> bool:
    return _order(b) > _order(a)
