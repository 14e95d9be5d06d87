"""Reranking the fused relations (paper §7.4): the pure MMR and node-distance orderings,
then both through ``query_data`` on real PostgreSQL — true graph distances under the
request's space and valid-time filters, restatements demoted by MMR, and the per-entity
cap on what a matched entity contributes to the walk (paper §7.2)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.query_service.fusion import Fused
from tidegraph.query_service.rerank import by_distance, mmr, rerank_groups
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, query_data, write_doc

# ------------------------------------------------------------------ pure orderings

keys_st = st.lists(st.integers(0, 40), unique=True, max_size=25)


@given(keys_st, st.dictionaries(st.integers(0, 40), st.integers(1, 5)))
def test_by_distance_is_a_stable_sort_with_unreached_last(
    keys: list[int], distance: dict[int, int]
) -> None:
    out = by_distance(keys, distance)
    assert sorted(out) == sorted(keys)
    far = 10**9
    rank = [distance.get(k, far) for k in out]
    assert rank == sorted(rank)
    for d in set(rank):  # equal distances keep the order given
        same = [k for k in keys if distance.get(k, far) == d]
        assert [k for k in out if distance.get(k, far) == d] == same


pairs_st = st.dictionaries(
    st.tuples(st.integers(0, 40), st.integers(0, 40)), st.floats(0.0, 1.0), max_size=60
)


@given(keys_st, pairs_st, st.floats(0.0, 1.0))
def test_mmr_is_a_permutation_led_by_the_best(
    keys: list[int], similarity: dict[tuple[int, int], float], lam: float
) -> None:
    out = mmr(keys, similarity, lam=lam)
    assert sorted(out) == sorted(keys)
    assert out[:1] == keys[:1]
    assert mmr(keys, similarity, lam=lam, limit=3) == out[:3]


@given(keys_st, pairs_st)
def test_mmr_keeps_the_order_without_a_penalty(
    keys: list[int], similarity: dict[tuple[int, int], float]
) -> None:
    assert mmr(keys, similarity, lam=1.0) == keys
    assert mmr(keys, {}, lam=0.7) == keys


def test_mmr_demotes_a_restatement_and_reads_pairs_either_way() -> None:
    keys = ["fact", "restated", "b", "c"]
    for pair in (("fact", "restated"), ("restated", "fact")):
        assert mmr(keys, {pair: 1.0}) == ["fact", "b", "restated", "c"]
    assert mmr(keys, {("fact", "restated"): 1.0}, lam=0.4) == ["fact", "b", "c", "restated"]
    with pytest.raises(ValueError, match="λ"):
        mmr(keys, {}, lam=1.5)


@given(
    keys_st,
    st.dictionaries(st.integers(0, 40), st.integers(0, 4)),
    st.one_of(st.none(), st.dictionaries(st.integers(0, 40), st.integers(1, 4))),
    pairs_st,
    st.one_of(st.none(), st.floats(0.0, 1.0)),
)
def test_reranking_never_crosses_the_groups_and_keeps_the_chains(
    keys: list[int],
    group_of: dict[int, int],
    distance: dict[int, int] | None,
    similarity: dict[tuple[int, int], float],
    lam: float | None,
) -> None:
    # five groups as hits.lead places them; the first and fourth are evidence chains
    fixed = (True, False, False, True, False)
    fused = [Fused(k, 1.0 / (i + 1), (0,), (i + 1,)) for i, k in enumerate(keys)]
    groups = [[f for f in fused if group_of.get(f.key, 4) == g] for g in range(5)]
    out = [f.key for f in rerank_groups(groups, fixed, distance, similarity, lam)]
    assert sorted(out) == sorted(keys)
    placed = [group_of.get(k, 4) for k in out]
    assert placed == sorted(placed)
    for g in (0, 3):  # a chain's order is its path: never reranked
        assert [k for k in out if group_of.get(k, 4) == g] == [f.key for f in groups[g]]
    if distance is None and lam is None:  # nothing to rerank by: the groups in fused order
        assert out == [f.key for g in groups for f in g]


# ------------------------------------------------------------ through query_data


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture(scope="module")
async def client(pool: AsyncConnectionPool[Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(pool, embedder=HashingEmbedder(384)) as c:
        yield c


OTHER = [
    ("wrote", "Sketch Notes"),
    ("studied", "Mathematics"),
    ("married_to", "William King"),
    ("corresponded_with", "Mary Somerville"),
    ("translated", "Menabrea Memoir"),
    ("inherited", "Byron Estate"),
    ("visited", "Turin Academy"),
    ("admired", "Jacquard Loom"),
]


@pytest.fixture(scope="module")
async def realm(pg_dsn: str) -> str:
    """Ada — knows → Bran — knows → Cato — knows → Dora (a chain of distances 1, 2, 3);
    a shortcut Ada — knows → Cato valid 1800–1810 only; an engine relation nobody named
    reaches; a copy of the chain's start in another space; Ada's restated collaboration
    with Babbage (both directions) among twelve other relations of hers."""
    name = "r" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, RealmConfig(embedder="hashing:384"))
        g.embedder = HashingEmbedder(384)
        names = ["Ada Lovelace", "Bran Oake", "Cato Pell", "Dora Quist"]
        chain = [rel(a, "knows", b) for a, b in zip(names, names[1:], strict=False)] + [
            rel("Bran Oake", "built", "Engine Parts")
        ]
        await write_doc(g, "chain.md", [("chain", [ent(n) for n in names], chain)])
        await write_doc(
            g,
            "shortcut.md",
            [
                (
                    "shortcut",
                    [ent("Ada Lovelace"), ent("Cato Pell")],
                    [rel("Ada Lovelace", "knows", "Cato Pell", vf="1800", vt="1810")],
                )
            ],
        )
        await write_doc(
            g,
            "far.md",
            [
                (
                    "engine",
                    [ent("Engine Works", "Org"), ent("Steam Engine", "Machine")],
                    [rel("Engine Works", "built", "Steam Engine")],
                )
            ],
        )
        await write_doc(
            g,
            "other.md",
            [
                (
                    "other",
                    [ent("Ada Lovelace"), ent("Zeno Ray")],
                    [rel("Ada Lovelace", "knows", "Zeno Ray")],
                )
            ],
            space="other",
        )
        hub = [rel("Ada Lovelace", "worked_with", "Charles Babbage")]
        hub += [rel("Charles Babbage", "worked_with", "Ada Lovelace")]
        hub += [rel("Ada Lovelace", p, o) for p, o in OTHER]
        objects = [ent(o, "Thing") for _, o in OTHER]
        await write_doc(
            g, "hub.md", [("hub", [ent("Ada Lovelace"), ent("Charles Babbage"), *objects], hub)]
        )
    return name


def _lines(out: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["subject"], r["predicate"], r["object"]) for r in out["relations"]]


def _hops(out: dict[str, Any]) -> dict[tuple[str, str, str], int | None]:
    return {(r["subject"], r["predicate"], r["object"]): r["hop"] for r in out["relations"]}


FAR = ("Engine Works", "built", "Steam Engine")


@pytest.mark.postgres
async def test_node_distance_puts_the_unconnected_match_behind_the_near_ones(
    client: httpx.AsyncClient, realm: str
) -> None:
    # quota fusion gives similarity half the slots, so its unconnected match places early
    q = {"query": "Ada Lovelace engines built", "top_k": 1, "hops": 3, "fusion": "quota"}
    plain = await query_data(client, realm, **q, relation_top_k=12)
    lines = _lines(plain)
    assert FAR in lines and lines.index(FAR) < len(lines) - 1, lines
    ranked = await query_data(client, realm, **q, relation_top_k=40, node_distance=True)
    # the evidence chain Ada → Bran built … leads ("built" is no relation of Ada's), as
    # it is; node distance orders what follows
    chain = [r for r in ranked["relations"] if "path" in r["channels"]]
    assert _lines({"relations": chain}) == [
        ("Ada Lovelace", "knows", "Bran Oake"),
        ("Bran Oake", "built", "Engine Parts"),
    ]
    assert ranked["relations"][:2] == chain
    hops = [r["hop"] for r in ranked["relations"][2:]]
    reached = [h for h in hops if h is not None]
    assert reached == sorted(reached) and hops[: len(reached)] == reached, hops
    got = _hops(ranked)
    assert got[FAR] is None and _lines(ranked)[-1] == FAR
    assert got[("Ada Lovelace", "knows", "Bran Oake")] == 1
    assert got[("Bran Oake", "built", "Engine Parts")] == 2
    assert got[("Cato Pell", "knows", "Dora Quist")] == 2  # through the shortcut
    assert ranked["stats"]["rerank"]["node_distance"] is True
    # the other space's copy of Ada is neither a seed nor a hit
    assert ("Ada Lovelace", "knows", "Zeno Ray") not in got


@pytest.mark.postgres
async def test_node_distance_is_the_graphs_not_the_walks(
    client: httpx.AsyncClient, realm: str
) -> None:
    q = {"query": "Ada Lovelace engines built", "top_k": 1, "relation_top_k": 12}
    capped = await query_data(client, realm, **q, max_relation_edges=1)
    assert sum(h is not None for h in _hops(capped).values()) == 1  # the walk took one edge
    resolved = await query_data(client, realm, **q, max_relation_edges=1, node_distance=True)
    assert set(_hops(resolved).values()) == {1}  # each is on Ada: distance 1 all the same


@pytest.mark.postgres
async def test_node_distance_walks_only_edges_valid_at_as_of(
    client: httpx.AsyncClient, realm: str
) -> None:
    q = {"query": "Ada Lovelace engine", "hops": 3, "relation_top_k": 40, "as_of": "1900-01-01"}
    got = _hops(await query_data(client, realm, **q, node_distance=True))
    assert ("Ada Lovelace", "knows", "Cato Pell") not in got
    assert got[("Cato Pell", "knows", "Dora Quist")] == 3  # the long way round
    bounded = _hops(await query_data(client, realm, **{**q, "hops": 2}, node_distance=True))
    assert ("Cato Pell", "knows", "Dora Quist") not in bounded or (
        bounded[("Cato Pell", "knows", "Dora Quist")] is None
    )


@pytest.mark.postgres
async def test_node_distance_reads_one_space_or_all(client: httpx.AsyncClient, realm: str) -> None:
    q = {"query": "Ada Lovelace", "hops": 2, "relation_top_k": 40, "node_distance": True}
    other = _hops(await query_data(client, realm, **q, space="other"))
    assert other == {("Ada Lovelace", "knows", "Zeno Ray"): 1}
    every = _hops(await query_data(client, realm, **q, space="*"))
    assert every[("Ada Lovelace", "knows", "Zeno Ray")] == 1
    assert every[("Ada Lovelace", "knows", "Bran Oake")] == 1


@pytest.mark.postgres
async def test_mmr_gives_a_restatement_slot_to_a_new_fact(
    client: httpx.AsyncClient, realm: str
) -> None:
    q = {"query": "Ada Lovelace", "mode": "mix", "relation_top_k": 6}
    plain = await query_data(client, realm, **q)
    worked = [x for x in _lines(plain) if x[1] == "worked_with"]
    assert len(worked) == 2, _lines(plain)  # the same collaboration, stored both ways
    diverse = await query_data(client, realm, **q, mmr=True)
    assert [x for x in _lines(diverse) if x[1] == "worked_with"] == worked[:1]
    assert len(diverse["relations"]) == 6
    assert _lines(diverse)[0] == _lines(plain)[0]
    assert diverse["stats"]["rerank"]["mmr_lambda"] == 0.7
    same = await query_data(client, realm, **q, mmr=True, mmr_lambda=1.0)
    assert _lines(same) == _lines(plain)


@pytest.mark.postgres
async def test_mmr_keeps_the_asked_relations_first(client: httpx.AsyncClient, realm: str) -> None:
    # at λ = 0 diversity alone decides, yet the focus group (both restatements) still leads
    q = {"query": "Ada Lovelace worked with Charles Babbage", "relation_top_k": 6, "mmr": True}
    lines = _lines(await query_data(client, realm, **q, mmr_lambda=0.0))
    assert [x[1] for x in lines[:2]] == ["worked_with", "worked_with"], lines
    assert all(x[1] != "worked_with" for x in lines[2:]), lines


@pytest.mark.postgres
async def test_max_relation_edges_caps_each_matched_entity(
    client: httpx.AsyncClient, realm: str
) -> None:
    q = {"query": "Ada Lovelace", "mode": "local", "hops": 1, "relation_top_k": 40}
    wide = await query_data(client, realm, **q)
    assert wide["stats"]["channels"]["traversal"] == 12  # every edge of Ada's in the space
    capped = await query_data(client, realm, **q, max_relation_edges=3)
    assert capped["stats"]["channels"]["traversal"] == 3
    response = await client.post(
        f"/v1/realms/{realm}/query_data", json={**q, "max_relation_edges": 500}
    )
    assert response.status_code == 422 and "max_relation_edges" in response.text


@pytest.mark.postgres
async def test_mmr_and_node_distance_keep_the_requests_filters(
    client: httpx.AsyncClient, realm: str
) -> None:
    on = {"mmr": True, "node_distance": True, "relation_top_k": 40, "hops": 3}
    other = await query_data(client, realm, query="Ada Lovelace", space="other", **on)
    assert {r["space"] for r in other["relations"]} == {"other"}
    assert _lines(other) == [("Ada Lovelace", "knows", "Zeno Ray")]
    dated = await query_data(client, realm, query="Ada Lovelace", as_of="1900-01-01", **on)
    assert ("Ada Lovelace", "knows", "Cato Pell") not in _lines(dated)
    assert all(r["space"] == "default" for r in dated["relations"])
    then = await query_data(client, realm, query="Ada Lovelace", as_of="1805-01-01", **on)
    assert _hops(then)[("Ada Lovelace", "knows", "Cato Pell")] == 1
