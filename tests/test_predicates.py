"""Predicate normalisation, vocabulary snapping and exclusive groups (paper §4.5)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.graph.predicates import (
    Vocabulary,
    exclusive_group_of,
    exclusive_groups_of,
    group_index,
    normalize_predicate,
    split_negation,
    stem_key,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("was_appointed_knight_of", "appointed_knight_of"),
        ("Was Appointed Knight Of", "appointed_knight_of"),
        ("appointed_knight_of", "appointed_knight_of"),
        ("worksAt", "works_at"),
        ("WORKS-AT", "works_at"),
        ("  worked   with!! ", "worked_with"),
        ("has_been_appointed_to", "appointed_to"),
        ("had_worked_with", "worked_with"),
        ("will_acquire", "acquire"),
        ("is_an_ally_of", "ally_of"),
        ("was_a_member_of", "member_of"),
        ("were_born_in", "born_in"),
        ("has_child", "has_child"),  # "has" is the relation here, not an auxiliary
        ("has_subsidiary", "has_subsidiary"),
        ("is_a", "is_a"),  # nothing but function words: left alone
        ("did_not_work_with", "not_work_with"),  # the negation is kept, never dropped
        ("never_worked_with", "never_worked_with"),
        ("didn't work with", "not_work_with"),
        ("épousé_par", "épousé_par"),
        ("!!!", ""),
    ],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize_predicate(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("never_worked_with", ("worked_with", True)),
        ("did_not_work_with", ("work_with", True)),
        ("has_never_worked_with", ("worked_with", True)),
        ("is_not_an_ally_of", ("ally_of", True)),
        ("wasn't married to", ("married_to", True)),
        ("worked_with", ("worked_with", False)),
        ("was_appointed_to", ("appointed_to", False)),
    ],
)
def test_split_negation(raw: str, expected: tuple[str, bool]) -> None:
    assert split_negation(raw) == expected


_TOKENS = st.sampled_from(
    ["was", "is", "has", "had", "been", "will", "not", "never", "a", "the", "worked", "with",
     "child", "designed", "of", "ally", "x", "Works", "AT", "-", " ", "__"]
)  # fmt: skip


@given(st.lists(_TOKENS, max_size=8).map("_".join))
def test_normalize_is_idempotent_and_well_formed(raw: str) -> None:
    once = normalize_predicate(raw)
    assert normalize_predicate(once) == once
    assert once == "" or re.fullmatch(r"[^\W_]+(?:_[^\W_]+)*", once)
    predicate, _ = split_negation(raw)
    assert split_negation(predicate) == (predicate, False) or predicate == ""


BIO = Vocabulary(
    terms=("designed", "works_at", "worked_with", "taught", "employs", "acquires", "married_to"),
    aliases={"collaborated_with": "worked_with", "Spouse Of": "married_to"},
)


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("designed", "designed"),  # exact term
        ("design", "designed"),  # stem match
        ("designs", "designed"),
        ("designing", "designed"),
        ("worked_at", "works_at"),
        ("works_with", "worked_with"),
        ("acquired", "acquires"),
        ("collaborated_with", "worked_with"),  # exact alias
        ("collaborates_with", "worked_with"),  # alias by stem
        ("spouse_of", "married_to"),  # alias keys are normalised too
        ("funded", "funded"),  # the long tail survives
        ("employed_by", "employed_by"),  # an inverse is never snapped onto its converse
        ("educated_by", "educated_by"),
        ("taught_by", "taught_by"),
        ("works", "works"),  # token counts must agree
    ],
)
def test_snap(predicate: str, expected: str) -> None:
    assert BIO.snap(predicate) == expected


def test_canonical_runs_the_whole_path() -> None:
    assert BIO.canonical("Has Never Collaborated With") == ("worked_with", True)
    assert BIO.canonical("was designing") == ("designed", False)


def test_vocabulary_normalises_its_configuration() -> None:
    vocab = Vocabulary(terms=("Worked With", "worked_with", ""), aliases={"a": "a"})
    assert vocab.terms == ("worked_with",)
    assert vocab.aliases == {}


def test_shared_stem_prefers_the_first_term_in_code_point_order() -> None:
    assert Vocabulary(terms=("designs", "designed")).snap("design") == "designed"


@given(st.lists(_TOKENS, min_size=1, max_size=5).map("_".join))
def test_snapping_keeps_token_count_unless_aliased(raw: str) -> None:
    predicate = normalize_predicate(raw)
    snapped = Vocabulary(terms=("designed", "worked_with", "ally_of")).snap(predicate)
    assert snapped == predicate or len(stem_key(snapped)) == len(stem_key(predicate))


def test_stem_key() -> None:
    assert stem_key("married_to") == stem_key("marries_to") == ("marry", "to")
    assert stem_key("stopped") == stem_key("stops") == ("stop",)
    assert stem_key("led") != stem_key("leads")  # short words must match exactly


GROUPS = [
    {"friend_of", "enemy_of", "rival_of", "ally_of", "opponent_of"},
    {"works_at", "left"},
    {"friend_of", "rival_of"},
]


def test_exclusive_group_of() -> None:
    assert exclusive_group_of("enemy_of", GROUPS) == 0
    assert exclusive_group_of("left", GROUPS) == 1
    assert exclusive_group_of("Is Rival Of", GROUPS) == 0  # compared normalised
    assert exclusive_group_of("designed", GROUPS) is None
    assert exclusive_groups_of("rival_of", GROUPS) == frozenset({0, 2})
    assert group_index(GROUPS)["friend_of"] == frozenset({0, 2})
