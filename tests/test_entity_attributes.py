"""The entity attribute derivation rule (graph/attributes.py): a pure function of the set of
live contributions, checked against an independent model."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.graph.attributes import Attributes, Contribution, derive_attributes

TYPES = st.one_of(
    st.none(), st.sampled_from(["Person", "Organization", "Place", "Concept", "concept"])
)
DESCRIPTIONS = st.one_of(st.just(""), st.text(alphabet="abcAB é", max_size=6))
CONTRIBUTIONS = st.lists(st.builds(Contribution, TYPES, DESCRIPTIONS), max_size=8)


def _model(items: list[Contribution]) -> Attributes:
    """Longest description, ties by code points; first specific type alphabetically — by
    brute force over every candidate rather than by ordering keys."""
    description = ""
    for c in items:
        d = c.description
        if len(d) > len(description) or (len(d) == len(description) and d < description):
            description = d
    specific = [c.type for c in items if c.type and c.type.lower() != "concept"]
    typ = "Concept"
    for t in specific:
        if typ == "Concept" or t < typ:
            typ = t
    return Attributes(typ, description)


def test_no_live_contribution_leaves_nothing() -> None:
    assert derive_attributes([]) == ("Concept", "")


def test_the_longest_description_and_a_specific_type_win() -> None:
    got = derive_attributes(
        [
            Contribution("Person", "A mathematician."),
            Contribution(None, "An English mathematician."),
            Contribution("Concept", ""),
        ]
    )
    assert got == ("Person", "An English mathematician.")


def test_ties_are_broken_by_code_points() -> None:
    assert derive_attributes([Contribution("Place", "bb"), Contribution("Person", "ab")]) == (
        "Person",
        "ab",
    )


@given(CONTRIBUTIONS)
def test_matches_the_model(items: list[Contribution]) -> None:
    assert derive_attributes(items) == _model(items)


@given(CONTRIBUTIONS, st.randoms())
def test_depends_on_the_set_of_contributions_only(
    items: list[Contribution], rnd: random.Random
) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert derive_attributes(shuffled) == derive_attributes(items)
    assert derive_attributes(items + items) == derive_attributes(items)


@given(CONTRIBUTIONS, CONTRIBUTIONS)
def test_a_withdrawn_description_never_lingers(
    kept: list[Contribution], withdrawn: list[Contribution]
) -> None:
    """Once ``withdrawn`` goes, the description is one the remaining contributions give
    (or empty), whatever the withdrawn ones said."""
    before = derive_attributes(kept + withdrawn)
    after = derive_attributes(kept)
    assert after.description in {k.description for k in kept} | {""}
    assert before.description in {c.description for c in kept + withdrawn} | {""}
