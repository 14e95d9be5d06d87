"""Each retrieval mode reads what paper Table 3 gives it, and nothing else.

The expected reads are written out here from the table (which channels feed entities,
chunks, relations and communities), not derived from the plans under test.
"""

from __future__ import annotations

from typing import Any

import pytest

from tidegraph.query_service import rounds
from tidegraph.query_service.channels import Scope
from tidegraph.query_service.plans import MODES, PLANS, Mode

AT = rounds.Where("realm_x", Scope("default", None, None, False, None), (100, 400, 64))

ENTITY_READS = {"by_name", "by_vector"}
WALK_RELATIONS = {"similarity", "fulltext"}
THEMED = {"ranked_similarity"}
COMMUNITIES = {"communities", "last_write"}

FIRST_ROUND: dict[Mode, set[str]] = {
    "mix": ENTITY_READS | WALK_RELATIONS | {"chunks", "predicate"},
    "local": ENTITY_READS | WALK_RELATIONS | {"predicate"},
    "global": THEMED | {"ranked_fulltext", "predicate"} | COMMUNITIES,
    "hybrid": ENTITY_READS | WALK_RELATIONS | THEMED | {"chunks", "predicate"} | COMMUNITIES,
    "naive": {"chunks"},
    "bypass": set(),
}
SECOND_ROUND: dict[Mode, set[str]] = {
    "mix": {"traversal", "mentions"},
    "local": {"traversal", "mentions"},
    "global": set(),
    "hybrid": {"traversal", "mentions"},
    "naive": set(),
    "bypass": set(),
}


def _params(named: bool) -> dict[str, Any]:
    return {"fts": "ada" if named else "", "fterms": "born" if named else "", "fnames": ["ada"]}


@pytest.mark.parametrize("mode", MODES)
def test_a_question_naming_things_reads_the_modes_channels(mode: Mode) -> None:
    reads = rounds.first(PLANS[mode], AT, _params(named=True))
    assert {r.name for r in reads} == FIRST_ROUND[mode]
    assert {r.name for r in rounds.second(PLANS[mode], AT, hops=2)} == SECOND_ROUND[mode]
    assert PLANS[mode].reads is (mode != "bypass")


@pytest.mark.parametrize("mode", MODES)
def test_a_question_naming_nothing_skips_the_named_thing_searches(mode: Mode) -> None:
    names = {r.name for r in rounds.first(PLANS[mode], AT, _params(named=False))}
    assert names == FIRST_ROUND[mode] - {"fulltext", "ranked_fulltext", "predicate"}


def test_no_walk_without_hops_but_mentions_still_expand() -> None:
    assert {r.name for r in rounds.second(PLANS["mix"], AT, hops=0)} == {"mentions"}


def test_a_vector_read_sets_its_search_width_and_the_others_do_not() -> None:
    reads = {r.name: r.ef_search for r in rounds.first(PLANS["hybrid"], AT, _params(True))}
    assert reads["by_vector"] == reads["communities"] == 100
    assert reads["similarity"] == reads["ranked_similarity"] == 400
    assert reads["chunks"] == 64
    assert reads["by_name"] is reads["fulltext"] is reads["predicate"] is None
