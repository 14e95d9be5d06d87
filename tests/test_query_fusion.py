"""Rank fusion, keyword extraction and prompt assembly: pure functions, property-tested."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegraph.query_service.context import MIN_CLIP_CHARS
from tidegraph.query_service.fusion import quota_interleave, rrf
from tidegraph.query_service.keywords import (
    Keywords,
    extract_keywords,
    lexical_keywords,
    parse_model_keywords,
    websearch_text,
)
from tidegraph.query_service.synthesis import build_prompt, render_relation
from tidegraph.schemas.api import ChunkOut, QueryDataResponse, RelationOut

ranked = st.lists(st.integers(0, 30), max_size=25)
lists_of = st.lists(ranked, max_size=4)


@given(lists_of, st.integers(1, 100))
def test_rrf_scores_are_the_reciprocal_rank_sums(lists: list[list[int]], k: int) -> None:
    fused = rrf(lists, k=k)
    distinct = [list(dict.fromkeys(lst)) for lst in lists]
    assert {f.key for f in fused} == {x for lst in lists for x in lst}
    for f in fused:
        expected = sum(1.0 / (k + lst.index(f.key) + 1) for lst in distinct if f.key in lst)
        assert f.score == pytest.approx(expected)
        assert list(f.channels) == [c for c, lst in enumerate(distinct) if f.key in lst]
    assert [f.score for f in fused] == sorted((f.score for f in fused), reverse=True)


@given(lists_of)
def test_rrf_is_deterministic_and_a_single_list_keeps_its_order(lists: list[list[int]]) -> None:
    assert rrf(lists) == rrf([list(x) for x in lists])
    if lists:
        only = [f.key for f in rrf(lists[:1])]
        assert only == list(dict.fromkeys(lists[0]))


@given(lists_of, st.integers(0, 30), st.integers(0, 3))
def test_rrf_promoting_an_item_never_demotes_it(
    lists: list[list[int]], item: int, channel: int
) -> None:
    if channel >= len(lists) or item not in lists[channel]:
        return
    before = [f.key for f in rrf(lists)].index(item)
    promoted = [list(x) for x in lists]
    promoted[channel] = [item] + [x for x in promoted[channel] if x != item]
    assert [f.key for f in rrf(promoted)].index(item) <= before


@given(ranked, ranked, st.floats(0, 1), st.integers(0, 40), st.lists(ranked, max_size=2))
@settings(max_examples=300)
def test_quota_interleave_properties(
    primary: list[int], secondary: list[int], share: float, limit: int, extra: list[list[int]]
) -> None:
    out = quota_interleave(primary, secondary, share=share, limit=limit, extra=extra)
    keys = [f.key for f in out]
    pool = set(primary) | set(secondary) | {x for e in extra for x in e}
    assert len(keys) == len(set(keys)) == min(limit, len(pool))
    assert set(keys) <= pool
    for source, other in ((primary, secondary), (secondary, primary)):
        # items only this list has keep this list's order
        others = set(other) | {x for e in extra for x in e}
        positions = [keys.index(x) for x in dict.fromkeys(source) if x in keys and x not in others]
        assert positions == sorted(positions)
    p_only, s_only = set(primary) - set(secondary), set(secondary) - set(primary)
    if len(p_only) >= limit and len(s_only) >= limit and not set(primary) & set(secondary):
        n_secondary = sum(1 for k in keys if k in s_only)
        assert abs(n_secondary - share * limit) <= 1


def test_quota_appends_extra_lists_behind() -> None:
    out = quota_interleave([1, 2], [3, 4], share=0.5, limit=10, extra=[[5, 1]])
    assert [f.key for f in out] == [3, 1, 4, 2, 5]
    assert out[-1].channels == (2,)
    assert out[1].channels == (0, 2) and out[1].ranks == (1, 2)


def test_lexical_keywords_split_names_from_themes() -> None:
    k = lexical_keywords("How did Charles Babbage come to design the Analytical Engine in 1834?")
    assert k.low == ("Charles Babbage", "Analytical Engine", "1834")
    assert "design" in k.high and "the" not in k.high and "how" not in k.high
    quoted = lexical_keywords('what is "part B737-MAX" about?')
    assert quoted.low[0] == "part B737-MAX"
    assert websearch_text(("a b", "c-d", "e")) == '"a b" or "c d" or e'
    assert websearch_text(("()",)) == ""


async def test_keyword_model_is_used_and_falls_back_to_lexical() -> None:
    async def good(q: str) -> Keywords:
        return Keywords(("Ada",), ("Computing",), "model")

    async def broken(q: str) -> Keywords:
        raise RuntimeError("endpoint down")

    assert (await extract_keywords("who?", good)) == Keywords(("Ada",), ("computing",), "model")
    fallback = await extract_keywords("Who was Ada Lovelace?", broken)
    assert fallback.source == "lexical" and fallback.low == ("Ada Lovelace",)


def _rel(**kw: object) -> RelationOut:
    base: dict[str, object] = dict(
        id="1",
        space="default",
        subject="A",
        predicate="p",
        object="B",
        negated=False,
        valid_from=None,
        valid_to=None,
        t_created=datetime(2026, 1, 1, tzinfo=UTC),
        t_expired=None,
        superseded_by=None,
        status="current",
        weight=1,
        hop=1,
        channels=["traversal"],
        doc_keys=["d"],
        score=1.0,
    )
    base.update(kw)
    return RelationOut.model_validate(base)


def test_relation_rendering() -> None:
    assert render_relation(_rel()) == "(A) --[p]--> (B)"
    assert render_relation(_rel(negated=True)) == "(A) --[NOT p]--> (B)"
    assert render_relation(_rel(valid_from="2023-05-10")) == "(A) --[p]--> (B) [from 2023-05-10]"
    assert render_relation(_rel(valid_from="2022-01-01", valid_to="2022-03-31")) == (
        "(A) --[p]--> (B) [valid 2022-01-01 to 2022-03-31]"
    )
    assert render_relation(_rel(valid_to="1999")) == "(A) --[p]--> (B) [until 1999]"
    assert render_relation(_rel(status="superseded")).endswith("[superseded]")


@given(
    st.lists(st.text(min_size=0, max_size=400), min_size=1, max_size=8),
    st.one_of(st.none(), st.integers(0, 3000)),
)
def test_budget_clips_and_never_drops(texts: list[str], budget: int | None) -> None:
    chunks = [
        ChunkOut(
            id=str(i),
            space="default",
            doc_key=f"doc{i}",
            ordinal=0,
            text=t,
            citation=f"doc{i}#0",
            channels=[],
            score=1.0,
        )  # fmt: skip
        for i, t in enumerate(texts)
    ]
    data = QueryDataResponse(
        entities=[], relations=[_rel()], chunks=chunks, communities=[], stats={}
    )
    prompt = build_prompt("q?", data, budget)
    assert [r.n for r in prompt.references] == list(range(1, len(texts) + 1))
    for r in prompt.references:
        assert f"[{r.n}] ({r.citation})" in prompt.text
    assert "(A) --[p]--> (B)" in prompt.text
    assert prompt.retrieved_chars == sum(map(len, texts)) + len("(A) --[p]--> (B)")
    if budget is None or prompt.retrieved_chars <= budget:
        assert prompt.prompt_chars == prompt.retrieved_chars and prompt.clipped == 0
    else:
        assert prompt.prompt_chars <= prompt.retrieved_chars
        for t in texts:  # every passage keeps its start, at least MIN_CLIP_CHARS of it
            assert t[: min(len(t), MIN_CLIP_CHARS) - 1].rstrip() in prompt.text


def test_model_keyword_answers_are_parsed_or_refused() -> None:
    got = parse_model_keywords(
        'Sure: {"low_level": ["Ada Lovelace", 1843, ""], "high_level": ["computing"]} done'
    )
    assert got == Keywords(("Ada Lovelace", "1843"), ("computing",), "model")
    for bad in ("no json", "{not json}", '["a"]', '{"low_level": "Ada"}'):
        with pytest.raises(ValueError):
            parse_model_keywords(bad)
