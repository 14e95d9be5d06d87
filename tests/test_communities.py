"""Community detection and reports as pure functions: no services.

Invariants checked: the same snapshot always gives the same partition (whatever order it
arrives in), children are contained in their parents, label propagation is deterministic
and used only when leidenalg cannot be imported, denials weigh less than assertions, and
reports never state a denial as holding.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import sys
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidegraph.indexer.communities.detect import (
    ClusterParams,
    CommunityConfigError,
    Entity,
    Hierarchy,
    Relation,
    ReportFailed,
    build_graph,
    detect,
    label_propagation,
    leiden_available,
    resolve_method,
)
from tidegraph.indexer.communities.reports import (
    ClusterView,
    RatingScale,
    Report,
    cluster_views,
    disambiguate_titles,
    make_reports,
    model_reporter,
    offline_report,
    offline_reporter,
    parse_model_report,
    rating_scales,
)
from tidegraph.indexer.models.client import LLMClient, LLMSettings
from tidegraph.indexer.models.errors import LLMUnavailable

from llm_server import Fault, ScriptedLLMServer

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def cliques(
    count: int, size: int, *, bridges: int = 1, start: int = 0
) -> tuple[list[int], list[Relation]]:
    """``count`` cliques of ``size`` entities, each joined to the next by ``bridges`` edges."""
    ids: list[int] = []
    rels: list[Relation] = []
    for c in range(count):
        members = list(range(start + c * size, start + (c + 1) * size))
        ids += members
        rels += [Relation(0, a, "worked_with", b, 1.0) for a in members for b in members if a < b]
    for c in range(count - 1):
        for t in range(bridges):
            a = start + c * size + t
            rels.append(Relation(0, a, "met", a + size, 1.0))
    return ids, [
        Relation(i + 1, r.subject, r.predicate, r.object, r.weight) for i, r in enumerate(rels)
    ]


def hub_and_spokes(groups: int = 6, size: int = 5) -> tuple[list[int], list[Relation]]:
    """Dense groups all tied to one hub entity (0): label propagation floods the graph
    from the hub, Leiden keeps the groups."""
    ids, rels = cliques(groups, size, bridges=0, start=1)
    rels += [Relation(len(rels) + 1 + m, 0, "knew", m, 1.0) for m in ids]
    return [0, *ids], rels


def nested(groups: int = 4, per_group: int = 3, size: int = 6) -> tuple[list[int], list[Relation]]:
    """Cliques grouped in families: many bridges inside a family, one between families."""
    ids: list[int] = []
    rels: list[Relation] = []
    for g in range(groups):
        gi, gr = cliques(per_group, size, bridges=2, start=g * per_group * size)
        ids += gi
        rels += gr
    for g in range(groups - 1):
        a = g * per_group * size
        rels.append(Relation(0, a + size - 1, "met", a + per_group * size + size - 1, 1.0))
    return ids, [
        Relation(i + 1, r.subject, r.predicate, r.object, r.weight) for i, r in enumerate(rels)
    ]


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[int], list[Relation]]:
    """Random graphs with planted groups, some denials and some dangling relations."""
    n = draw(st.integers(3, 40))
    group = draw(st.integers(2, 8))
    rels = []
    for i in range(draw(st.integers(0, 120))):
        a = draw(st.integers(0, n - 1))
        near = draw(st.booleans())
        b = (
            (a // group) * group + draw(st.integers(0, group - 1))
            if near
            else draw(
                st.integers(0, n + 2)  # n..n+2: an endpoint outside the snapshot (dormant)
            )
        )
        rels.append(Relation(i + 1, a, "p", b, float(draw(st.integers(1, 3))), draw(st.booleans())))
    return list(range(n)), rels


def shape(h: Hierarchy) -> list[list[tuple[tuple[int, ...], tuple[int, ...], int | None]]]:
    return [[(c.members, c.children, c.parent) for c in level] for level in h.levels]


# --------------------------------------------------------------------------- partition


@given(graphs(), st.randoms(use_true_random=False))
@SETTINGS
def test_same_snapshot_same_partition_in_any_order(
    graph: tuple[list[int], list[Relation]], rnd: random.Random
) -> None:
    ids, rels = graph
    params = ClusterParams(levels=3, min_size=2)
    first = detect(ids, rels, params)
    again = detect(ids, rels, params)
    shuffled_ids, shuffled_rels = ids[:], rels[:]
    rnd.shuffle(shuffled_ids)
    rnd.shuffle(shuffled_rels)
    assert first == again
    assert detect(shuffled_ids, shuffled_rels, params) == first


@given(graphs(), st.sampled_from(["leiden", "label_propagation"]), st.integers(1, 4))
@SETTINGS
def test_children_are_contained_in_their_parents(
    graph: tuple[list[int], list[Relation]], method: str, min_size: int
) -> None:
    ids, rels = graph
    h = detect(ids, rels, ClusterParams(levels=4, min_size=min_size, method=method))  # type: ignore[arg-type]
    for depth, level in enumerate(h.levels):
        seen: set[int] = set()
        for c in level:
            assert c.level == depth and len(c.members) >= min_size
            assert not seen & set(c.members), "clusters of a level overlap"
            seen |= set(c.members)
            if depth:
                kids = [h.levels[depth - 1][k] for k in c.children]
                assert len(kids) >= 2
                assert all(k.parent == c.index for k in kids)
                assert set(c.members) == {m for k in kids for m in k.members}
            if c.parent is not None:
                assert set(c.members) <= set(h.levels[depth + 1][c.parent].members)
        sizes = [len(c.members) for c in level]
        assert sizes == sorted(sizes, reverse=True), "a level is ordered largest first"


def test_nested_families_give_a_second_level_that_contains_the_first() -> None:
    ids, rels = nested()
    h = detect(ids, rels, ClusterParams(levels=3))
    assert [len(level) for level in h.levels] == [12, 4, 2]
    for parent in h.levels[1]:  # each family of three cliques
        assert len(parent.children) == 3
        assert max(parent.members) - min(parent.members) == 17
        for k in parent.children:
            assert set(h.levels[0][k].members) <= set(parent.members)


def test_small_clusters_are_dropped() -> None:
    ids, rels = cliques(3, 4, bridges=0)
    ids += [100, 101]  # a pair: below the minimum size
    rels.append(Relation(999, 100, "knew", 101, 5.0))
    h = detect(ids, rels, ClusterParams(min_size=3))
    assert [len(c.members) for c in h.levels[0]] == [4, 4, 4]
    assert h.entity_count == 14
    assert h.largest_share == pytest.approx(4 / 14)
    assert len(detect(ids, rels, ClusterParams(min_size=2)).levels[0]) == 4


def test_parameters_are_checked() -> None:
    for bad in (
        {"resolution": 0.0},
        {"min_size": 0},
        {"levels": 0},
        {"denial_factor": 1.0},
        {"denial_factor": -0.1},
        {"method": "louvain"},
    ):
        with pytest.raises(CommunityConfigError):
            ClusterParams(**bad)


def test_higher_resolution_gives_smaller_communities() -> None:
    ids, rels = nested()
    coarse = detect(ids, rels, ClusterParams(resolution=0.2, min_size=1))
    fine = detect(ids, rels, ClusterParams(resolution=2.0, min_size=1))
    assert coarse.largest_share > fine.largest_share


# --------------------------------------------------------------------------- denials


@given(graphs(), st.floats(0.0, 0.99))
@SETTINGS
def test_a_denial_weighs_its_corroboration_times_the_factor(
    graph: tuple[list[int], list[Relation]], factor: float
) -> None:
    ids, rels = graph
    g = build_graph(ids, rels, factor)
    known = set(ids)
    expected = sum(
        r.weight * (factor if r.negated else 1.0)
        for r in rels
        if r.subject in known and r.object in known and r.subject != r.object
    )
    assert sum(w for _, _, w in g.edges) == pytest.approx(expected)
    assert all(i < j for i, j, _ in g.edges)
    assert [(i, j) for i, j, _ in g.edges] == sorted({(i, j) for i, j, _ in g.edges})


def test_denials_pull_less_than_assertions() -> None:
    """X is asserted once each with two of A's members and denied (twice as strongly) with
    two of B's: with denials scaled down it joins A; counted in full it would join B."""
    ids, rels = cliques(2, 4, bridges=0)
    x = 50
    rels += [
        Relation(900, x, "worked_with", 0, 1.0),
        Relation(901, x, "worked_with", 1, 1.0),
        Relation(902, x, "married", 4, 2.0, negated=True),
        Relation(903, x, "married", 5, 2.0, negated=True),
    ]
    group_of_x = {
        factor: next(
            c.members
            for c in detect(
                [*ids, x], rels, ClusterParams(denial_factor=factor, min_size=1)
            ).levels[0]
            if x in c.members
        )
        for factor in (0.25, 0.99)
    }
    assert set(group_of_x[0.25]) == {0, 1, 2, 3, x}
    assert set(group_of_x[0.99]) == {4, 5, 6, 7, x}


# --------------------------------------------------------------------------- fallback


def test_label_propagation_floods_where_leiden_does_not() -> None:
    ids, rels = hub_and_spokes()
    leiden = detect(ids, rels, ClusterParams(method="leiden"))
    lpa = detect(ids, rels, ClusterParams(method="label_propagation"))
    assert (leiden.method, lpa.method) == ("leiden", "label_propagation")
    assert lpa.largest_share == 1.0
    assert leiden.largest_share < 0.25


def test_fallback_only_when_leidenalg_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert leiden_available() and resolve_method("auto") == "leiden"
    monkeypatch.setitem(sys.modules, "leidenalg", None)  # import now raises ImportError
    assert not leiden_available()
    ids, rels = nested()
    with caplog.at_level(logging.WARNING, logger="tidegraph.indexer.communities.detect"):
        first = detect(ids, rels, ClusterParams(levels=2))
    assert first.method == "label_propagation"
    assert "label propagation" in caplog.text
    rng = random.Random(7)
    for _ in range(5):
        rng.shuffle(ids)
        rng.shuffle(rels)
        assert detect(ids, rels, ClusterParams(levels=2)) == first
    with pytest.raises(CommunityConfigError, match="leidenalg"):
        detect(ids, rels, ClusterParams(method="leiden"))


@given(graphs(), st.integers(0, 2**31))
@SETTINGS
def test_label_propagation_is_deterministic_per_seed(
    graph: tuple[list[int], list[Relation]], seed: int
) -> None:
    ids, rels = graph
    g = build_graph(ids, rels)
    assert label_propagation(g, seed=seed) == label_propagation(g, seed=seed)
    labels = label_propagation(g, seed=seed)
    connected = {i for i, j, _ in g.edges} | {j for _, j, _ in g.edges}
    for v in range(len(g.nodes)):  # an isolated node keeps its own label
        if v not in connected:
            assert labels[v] == v


# --------------------------------------------------------------------------- reports


def people(ids: Sequence[int]) -> list[Entity]:
    return [Entity(i, f"Person {i}", "Person", f"Person number {i}. More.") for i in ids]


def views_of(ids: list[int], rels: list[Relation], **params: float) -> list[ClusterView]:
    h = detect(ids, rels, ClusterParams(**params))  # type: ignore[arg-type]
    return cluster_views(h, people(ids), rels)


def test_offline_report_names_central_members_and_renders_denials_as_denials() -> None:
    ids = [1, 2, 3, 4]
    rels = [
        Relation(10, 1, "worked_with", 2, 3.0, description="They built the engine together"),
        Relation(11, 1, "worked_with", 3, 1.0),
        Relation(12, 2, "married", 3, 2.0, negated=True),
        Relation(13, 1, "knew", 4, 1.0),
        Relation(14, 3, "knew", 4, 1.0),
    ]
    [view] = views_of(ids, rels, resolution=0.3)
    report = offline_report(view, rating_scales([view])[0])
    assert report.title == "Person 1 and Person 2"
    assert report.findings[0].summary == "Person 1 worked with Person 2."
    assert "Corroborated by 3 source chunks" in report.findings[0].explanation
    denial = next(f for f in report.findings if f.relation_id == 12)
    assert denial.negated and denial.summary == "It is denied that Person 2 married Person 3."
    assert "does not hold" in denial.explanation
    assert not any(f.summary == "Person 2 married Person 3." for f in report.findings)
    assert "5 current relations (1 denied)" in report.summary
    assert report.rating == 10.0
    assert denial.to_json() == {
        "summary": denial.summary,
        "explanation": denial.explanation,
        "negated": True,
        "relation_id": "12",
    }


def test_rating_varies_with_size_and_weight() -> None:
    a_ids, a_rels = cliques(1, 6, bridges=0)
    b_ids, b_rels = cliques(1, 3, bridges=0, start=10)
    b_rels = [Relation(100 + r.id, r.subject, r.predicate, r.object, 1.0) for r in b_rels]
    views = views_of(a_ids + b_ids, a_rels + b_rels)
    scales = rating_scales(views)
    ratings = [offline_report(v, scales[0]).rating for v in views]
    assert ratings[0] == 10.0 and 0 < ratings[1] < ratings[0]


def test_parent_report_is_made_from_its_children() -> None:
    ids, rels = nested()
    views = views_of(ids, rels, levels=2)
    scales = rating_scales(views)
    children = [offline_report(v, scales[0]) for v in views if v.cluster.level == 0][:3]
    parent_view = next(v for v in views if v.cluster.level == 1)
    parent = offline_report(parent_view, scales[1], children)
    assert [f.summary for f in parent.findings] == [c.title for c in children]
    assert all(c.title in parent.summary for c in children)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Alpha and Beta", "alpha and beta", "Gamma", "Delta"]),
            st.lists(
                st.sampled_from(["Alpha", "Beta", "Gamma", "Epsilon", "Zeta"]),
                max_size=4,
                unique=True,
            ),
        ),
        max_size=12,
    )
)
@SETTINGS
def test_titles_come_out_unique(titled: list[tuple[str, list[str]]]) -> None:
    out = disambiguate_titles(titled)
    assert len({t.lower() for t in out}) == len(out)
    seen: set[str] = set()
    for (title, _), final in zip(titled, out, strict=True):
        assert final.startswith(title)
        assert (final == title) == (title.lower() not in seen)
        seen.add(title.lower())


def test_duplicate_title_is_qualified_with_a_member_not_in_it() -> None:
    out = disambiguate_titles(
        [
            ("Babbage and Lovelace", ["Babbage", "Lovelace", "Menabrea"]),
            ("Babbage and Lovelace", ["Lovelace", "Babbage", "Somerville", "Menabrea"]),
            ("Babbage and Lovelace", ["Babbage", "Lovelace", "Menabrea"]),
            ("Babbage and Lovelace", ["Babbage", "Lovelace"]),
        ]
    )
    assert out == [
        "Babbage and Lovelace",
        "Babbage and Lovelace (Somerville)",
        "Babbage and Lovelace (Menabrea)",
        "Babbage and Lovelace (2)",
    ]


async def test_one_failed_report_is_skipped_and_logged_largest_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids, rels = cliques(4, 4, bridges=0)
    extra_ids, extra_rels = cliques(1, 6, bridges=0, start=100)
    views = views_of(ids + extra_ids, rels + extra_rels)
    order: list[int] = []
    inner = offline_reporter()

    async def flaky(view: ClusterView, scale: RatingScale, kids: Sequence[Report]) -> Report:
        order.append(len(view.cluster.members))
        if view.cluster.index == 2:
            raise ReportFailed(0, 2, "the model answered nonsense")
        return await inner(view, scale, kids)

    ticks: list[tuple[int, int]] = []
    with caplog.at_level(logging.WARNING, logger="tidegraph.indexer.communities.reports"):
        done = await make_reports(
            views, flaky, concurrency=1, progress=lambda n, total: ticks.append((n, total))
        )
    assert order == [6, 4, 4, 4, 4]
    assert ticks == [(n, 5) for n in range(1, 6)]
    assert sorted(done) == [(0, 0), (0, 1), (0, 3), (0, 4)]
    assert "community 0.2: report skipped" in caplog.text


async def test_an_unavailable_endpoint_aborts_instead_of_skipping() -> None:
    views = views_of(*cliques(2, 4, bridges=0))

    started: list[int] = []

    async def down(view: ClusterView, scale: RatingScale, kids: Sequence[Report]) -> Report:
        started.append(view.cluster.index)
        if view.cluster.index == 1:
            await asyncio.sleep(30)  # still in flight when the other fails: cancelled
        raise LLMUnavailable(
            "http://x/v1", "chat", "m", failures={"timeout": 3}, elapsed=1.0, last_error="timed out"
        )

    with pytest.raises(LLMUnavailable):
        await asyncio.wait_for(make_reports(views, down), 10)
    assert sorted(started) == [0, 1]


def test_model_answers_that_cannot_be_used_fail_the_report() -> None:
    [view] = views_of(*cliques(1, 3, bridges=0))
    for bad in (
        "not json",
        "[]",
        '{"summary": "s", "rating": 5}',
        '{"title": "T", "summary": "s", "rating": "high"}',
        '{"title": "T", "summary": "s", "rating": 5, "findings": "x"}',
    ):
        with pytest.raises(ReportFailed):
            parse_model_report(view, bad)
    ok = parse_model_report(
        view,
        '{"title": " A  title ", "summary": "S.", "rating": "12",'
        ' "findings": ["one", {"summary": "two", "explanation": "why"}, {"x": 1}]}',
    )
    assert (ok.title, ok.rating, [f.summary for f in ok.findings]) == (
        "A title",
        10.0,
        ["one", "two"],
    )


async def test_model_reports_go_through_the_client_with_denials_marked() -> None:
    ids = [1, 2, 3]
    rels = [
        Relation(10, 1, "worked_with", 2, 2.0),
        Relation(11, 2, "married", 3, 1.0, negated=True),
        Relation(12, 1, "knew", 3, 1.0),
    ]
    [view] = views_of(ids, rels)
    answer = {
        "title": "Engine builders",
        "summary": "They built it.",
        "rating": 7.5,
        "findings": [{"summary": "1 worked with 2", "explanation": "weight 2"}],
    }
    with ScriptedLLMServer() as server:
        server.enqueue(Fault.reply(json.dumps(answer)))
        client = LLMClient(
            LLMSettings(
                base_url=server.base_url, api_key="sk-scripted", model="scripted-chat", deadline=2.0
            )
        )
        try:
            done = await make_reports([view], model_reporter(client, "r1"))
        finally:
            await client.aclose()
        [(_, body)] = server.requests
    report = done[(0, 0)]
    assert (report.title, report.rating) == ("Engine builders", 7.5)
    system, user = (m["content"] for m in body["messages"])
    assert "never report a denied relation as holding" in system
    assert "DENIED (the sources say this does NOT hold): Person 2 married Person 3" in user
    assert "- Person 1 worked with Person 2 (weight 2)" in user
