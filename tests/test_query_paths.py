"""Evidence chains, the pure part: how a chain scores, the order chains and the predicate
focus lead in, whole chains in an answer, and a chain in the synthesis prompt."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.query_service.focus import FAR, term_distances
from tidegraph.query_service.fusion import Fused
from tidegraph.query_service.hits import lead, whole_chains
from tidegraph.query_service.paths import Chain, leading, links_in_order, paths, rank
from tidegraph.query_service.plans import FOCUS, PATH, SIMILARITY, TRAVERSAL
from tidegraph.query_service.synthesis import build_prompt, render_chain
from tidegraph.schemas.api import QueryDataResponse, RelationOut

T = datetime(2026, 1, 1, tzinfo=UTC)

# ------------------------------------------------------------------------ scoring

STUDIED, LOCATED, COUNTRY, UNIVERSITY = 1, 2, 4, 8


def test_a_link_is_named_only_by_a_term_no_earlier_link_names() -> None:
    assert Chain((1, 2), (STUDIED, LOCATED)).named == 2
    assert Chain((1, 2), (STUDIED, STUDIED)).named == 1
    assert Chain((1, 2), (STUDIED | LOCATED, LOCATED)).named == 1
    assert Chain((1, 2), (0, LOCATED)).named == 1
    assert Chain((1, 2, 3), (STUDIED, 0, LOCATED)).named == 2


def test_the_far_end_counts_when_its_type_names_a_term_of_its_own() -> None:
    # "Which country is the university S studied at in?": studied_at, then located_in
    # (not named) to an entity of type Country
    chain = Chain((1, 2), (STUDIED, 0), ends=COUNTRY)
    assert chain.end_names and chain.score == 2
    assert not Chain((1, 2), (STUDIED, COUNTRY), ends=COUNTRY).end_names
    assert Chain((1, 2), (STUDIED, LOCATED), ends=COUNTRY).score == 3


def test_chains_rank_by_score_named_links_a_named_end_and_length() -> None:
    best = Chain((1, 2), (STUDIED, LOCATED), ends=COUNTRY)
    two = Chain((3, 4), (STUDIED, LOCATED))
    to_named = Chain((9, 10), (STUDIED, LOCATED), end_named=True)
    by_end = Chain((5, 6), (STUDIED, 0), ends=COUNTRY)
    loose = Chain((11, 12, 13), (0, STUDIED, LOCATED))
    weak = Chain((7, 8), (0, LOCATED))
    got = rank([weak, loose, by_end, two, to_named, best], {})
    assert got == [best, to_named, two, loose, by_end, weak]
    assert leading(got) == ([best, to_named, two, loose, by_end], [weak])


def test_equal_chains_follow_the_fused_rank_of_their_last_link() -> None:
    a, b, c = (
        Chain((1, 2), (STUDIED, LOCATED)),
        Chain((1, 3), (STUDIED, LOCATED)),
        Chain((1, 4), (STUDIED, LOCATED)),
    )
    assert rank([a, b, c], {4: 0, 2: 5}) == [c, a, b]  # 3 is not ranked: last


def test_of_two_chains_naming_the_same_terms_the_one_read_from_the_name_leads() -> None:
    # "Who edited the journals that published the papers S wrote?" (terms 0–4: edited,
    # journals, published, papers, wrote): S's wrote → published_in → edited_by, against
    # the mirror through a journal S edits
    q = "Who edited the journals that published the papers Odo Brenn wrote?"
    terms = ("edited", "journals", "published", "papers", "wrote")
    distance = term_distances(q, terms, ["odo brenn"])
    assert distance == (6, 4, 2, 0, 0)
    right = Chain((1, 2, 3), (16, 4, 1))
    mirror = Chain((4, 5, 6), (1, 4, 16))
    assert rank([mirror, right], {}, distance) == [right, mirror]
    assert rank([mirror, right], {}) == [mirror, right]  # no distances: the order given


@pytest.mark.parametrize(
    ("query", "terms", "names", "expected"),
    [
        (
            "In which country is the university where Ilse Marr studied located?",
            ("country", "university", "studied", "located"),
            ["ilse marr"],
            (4, 1, 0, 1),
        ),
        ("Which country is X in?", ("country",), ["y"], (FAR,)),  # the name is not written
        ("Where is Ada's lab?", ("labs",), ["ada"], (FAR,)),  # nor the term
    ],
)
def test_term_distances_count_the_words_between(
    query: str, terms: tuple[str, ...], names: list[str], expected: tuple[int, ...]
) -> None:
    assert term_distances(query, terms, names) == expected


chains_st = st.lists(
    st.builds(
        Chain,
        st.lists(st.integers(0, 30), min_size=2, max_size=3, unique=True).map(tuple),
        st.lists(st.integers(0, 15), min_size=3, max_size=3).map(tuple),
        st.integers(0, 15),
        st.booleans(),
    ).map(lambda c: Chain(c.links, c.masks[: len(c.links)], c.ends, c.end_named)),
    max_size=12,
)


@given(chains_st, st.dictionaries(st.integers(0, 30), st.integers(0, 50)))
def test_ranking_is_a_permutation_best_score_first(
    chains: list[Chain], position: dict[int, int]
) -> None:
    got = rank(chains, position)
    assert sorted(map(id, got)) == sorted(map(id, chains))
    for a, b in pairwise(got):
        assert (a.score, a.named) >= (b.score, b.named)
    first, after = leading(got)
    assert first + after == got
    assert all(c.score >= 2 for c in first) and all(c.score < 2 for c in after)


@given(chains_st)
def test_each_link_is_placed_once_by_the_first_chain_through_it(chains: list[Chain]) -> None:
    order = links_in_order(chains)
    assert sorted(order) == sorted({x for c in chains for x in c.links})
    by = paths(chains)
    for link, path in by.items():
        owner = next(c for c in chains if link in c.links)
        assert path == owner.links[: owner.links.index(link) + 1]


# ------------------------------------------------------------------------ placing

NAMES = [TRAVERSAL, SIMILARITY, FOCUS, PATH]


@given(
    st.lists(st.integers(0, 40), unique=True, max_size=20),
    st.dictionaries(st.integers(0, 40), st.booleans(), max_size=8),
    st.lists(st.integers(0, 40), unique=True, max_size=6),
    st.lists(st.integers(0, 40), unique=True, max_size=6),
)
def test_chains_then_the_focus_then_the_rest_each_candidate_once(
    keys: list[int], fit: dict[int, bool], first: list[int], after: list[int]
) -> None:
    fused = [Fused(k, 1.0 / (i + 1), (0,), (i + 1,)) for i, k in enumerate(keys)]
    groups = lead(fused, NAMES, fit, first, after)
    out = [f.key for g in groups for f in g]
    assert sorted(out) == sorted({*keys, *fit, *first, *after})
    expected = list(
        dict.fromkeys(
            first
            + [k for k in [*keys, *fit] if fit.get(k) is True and k not in first]
            + [k for k in [*keys, *fit] if fit.get(k) is False and k not in first]
            + [k for k in after if k not in first and k not in fit]
        )
    )
    assert out[: len(expected)] == expected
    assert out[len(expected) :] == [k for k in keys if k not in set(expected)]
    chained = {*first, *after}
    for f in (f for g in groups for f in g):
        assert (NAMES.index(PATH) in f.channels) is (f.key in chained)
        assert list(f.channels) == sorted(f.channels) and len(f.channels) == len(f.ranks)


# ------------------------------------------------------------------- whole chains


def _line(i: int, path: list[int] | None = None, **kw: Any) -> RelationOut:
    base: dict[str, Any] = {
        "id": str(i), "space": "default", "subject": f"S{i}", "predicate": "p",
        "object": f"O{i}", "negated": False, "valid_from": None, "valid_to": None,
        "t_created": T, "t_expired": None, "superseded_by": None, "status": "current",
        "weight": 1, "hop": None, "channels": [], "doc_keys": [f"d{i}.md"], "score": 1.0,
        "path": None if path is None else [str(x) for x in path],
    }  # fmt: skip
    base.update(kw)
    return RelationOut.model_validate(base)


lines_st = st.lists(
    st.tuples(
        st.integers(0, 20),
        st.one_of(st.none(), st.lists(st.integers(0, 24), min_size=1, max_size=3)),
    ),
    max_size=15,
    unique_by=lambda t: t[0],
).map(lambda ts: [_line(i, None if p is None else [*p, i]) for i, p in ts])


@given(lines_st, st.integers(0, 16))
def test_every_path_is_whole_before_its_relation(lines: list[RelationOut], limit: int) -> None:
    out = whole_chains(lines, limit)
    ids = [x.id for x in out]
    assert len(ids) <= limit and len(set(ids)) == len(ids)
    given_lines = {x.id: x for x in lines}
    for i, x in enumerate(out):
        assert x.model_copy(update={"path": given_lines[x.id].path}) == given_lines[x.id]
        assert x.path in (None, given_lines[x.id].path)  # a path is reported whole or not
        for pid in (x.path or [])[:-1]:
            assert pid in ids[:i], (pid, ids)


@given(lines_st, st.integers(0, 16))
def test_without_paths_the_answer_is_the_first_lines(lines: list[RelationOut], limit: int) -> None:
    plain = [x.model_copy(update={"path": None}) for x in lines]
    assert whole_chains(plain, limit) == plain[:limit]


def test_a_missing_link_drops_the_path_and_a_late_one_is_pulled_in() -> None:
    a, b, c = _line(1), _line(2, [1, 2]), _line(3, [9, 3])
    assert [x.id for x in whole_chains([b, a], 5)] == ["1", "2"]
    assert whole_chains([c], 5)[0].path is None
    assert whole_chains([b, a], 1) == [a]  # b's chain does not fit; a still does


# ------------------------------------------------------------------------ prompt


def test_a_chain_is_rendered_end_to_end_with_every_links_sources() -> None:
    works = _line(1, subject="Pera Lund", predicate="works_for", object="Vantor Labs")
    hq = _line(
        2,
        [1, 2],
        subject="Vantor Labs",
        predicate="headquartered_in",
        object="Osk",
        valid_from="2019",
        doc_keys=["orgs/vantor.md", "news/osk.md"],
    )
    led = _line(3, [1, 3], subject="Ilka Stern", predicate="leads", object="Vantor Labs")
    by_id = {x.id: x for x in (works, hq, led)}
    assert render_chain(hq, by_id) == (
        "chain: (Pera Lund) --[works_for]--> (Vantor Labs) --[headquartered_in]--> (Osk)\n"
        "  1. (Pera Lund) --[works_for]--> (Vantor Labs) (source: d1.md)\n"
        "  2. (Vantor Labs) --[headquartered_in]--> (Osk) [from 2019]"
        " (source: orgs/vantor.md, news/osk.md)"
    )
    assert render_chain(led, by_id).splitlines()[0] == (  # type: ignore[union-attr]
        "chain: (Pera Lund) --[works_for]--> (Vantor Labs) <--[leads]-- (Ilka Stern)"
    )
    assert render_chain(works, by_id) is None
    assert render_chain(hq, {"2": hq}) is None  # a link the answer lacks: one line
    data = QueryDataResponse(
        entities=[], relations=[works, hq], chunks=[], communities=[], stats={}
    )
    prompt = build_prompt("In which city is Pera Lund's employer?", data)
    assert "- (Pera Lund) --[works_for]--> (Vantor Labs)\n- chain: (Pera Lund)" in prompt.text
    assert prompt.blocks["relations"].retrieved_items == 2
