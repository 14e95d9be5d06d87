"""A realm's symmetric predicates are stored once per unordered pair (``graph.symmetry``):
both directions make one edge, supersession and negation work across directions, and an
entity merge coalesces the edges it makes one. Written through the production writer on
real PostgreSQL; the orientation rule itself has a unit test against an explicit model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb

from tidegraph.indexer.graph.symmetry import orient, pair_of
from tidegraph.schemas.names import name_key
from tidegraph.schemas.realm_config import RealmConfig, preset
from tidegraph.store.realms import open_realm

from graph_helpers import GraphHarness, ent, rel

SYMMETRIC = RealmConfig(
    embedder="hashing:8",
    exclusive_groups=(frozenset({"ally_of", "enemy_of"}),),
    symmetric_predicates=frozenset({"worked_with", "ally_of", "enemy_of"}),
)
ADA, BAB, AIRY = "Ada Lovelace", "Charles Babbage", "George Airy"


NAMES = st.dictionaries(st.integers(1, 50), st.text(min_size=1, max_size=6), min_size=2)


@given(NAMES, st.data(), st.sampled_from(["worked_with", "mentored"]))
def test_a_new_edge_is_oriented_by_its_ends_names(
    names: dict[int, str], data: st.DataObject, p: str
) -> None:
    s, o = data.draw(st.lists(st.sampled_from(sorted(names)), min_size=2, max_size=2, unique=True))
    symmetric = {"worked_with"}
    stored = orient(s, p, o, symmetric, names)
    if p in symmetric:
        # the same whichever way it is stated: the end whose name key sorts first leads
        assert stored == orient(o, p, s, symmetric, names)
        first = min((s, o), key=lambda i: (name_key(names[i]), i))
        assert stored[0] == first and set(stored) == {s, o}
        assert pair_of(s, p, o, symmetric) == pair_of(o, p, s, symmetric) == (min(s, o), max(s, o))
    else:
        assert stored == pair_of(s, p, o, symmetric) == (s, o)


def test_the_presets_exclusive_groups_are_all_symmetric_or_all_ordered() -> None:
    """Supersession meets symmetric and ordered edges on one pair only by chance, so no
    preset mixes them in a group."""
    for name in ("biography", "finance", "narrative"):
        config = preset(name)
        for group in config.exclusive_groups:
            kinds = {p in config.symmetric_predicates for p in group}
            assert len(kinds) == 1, (name, sorted(group))


@pytest.fixture
async def g(pg_dsn: str, unique_name: Callable[[str], str]) -> AsyncIterator[GraphHarness]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        yield await GraphHarness.create(conn, unique_name("sym"), SYMMETRIC)


async def _edges(g: GraphHarness) -> list[tuple[Any, ...]]:
    """Every stored edge: (subject, predicate, object, negated, status, weight, rendered,
    subject's name key < object's)."""
    s = sql.Identifier(g.info.schema)
    cur = await g.conn.execute(
        sql.SQL(
            "SELECT es.name, r.predicate, eo.name, r.negated, r.status, r.weight, r.rendered,"
            " es.name_key < eo.name_key FROM {s}.relations r"
            " JOIN {s}.entities es ON es.id = r.subject_id"
            " JOIN {s}.entities eo ON eo.id = r.object_id ORDER BY r.id"
        ).format(s=s)
    )
    return [tuple(r) for r in await cur.fetchall()]


async def _relation_changes(g: GraphHarness) -> list[tuple[str, str, str, str]]:
    """(kind, subject, predicate, object) of every relation change on the feed."""
    cur = await g.conn.execute(
        sql.SQL(
            "SELECT kind, payload -> 'relation' FROM {} WHERE payload ? 'relation'"
            " ORDER BY seq, idx"
        ).format(sql.Identifier(g.info.schema, "outbox"))
    )
    return [(str(k), r["subject"], r["predicate"], r["object"]) for k, r in await cur.fetchall()]


@pytest.mark.postgres
async def test_both_directions_are_one_edge_weighing_both_documents(g: GraphHarness) -> None:
    people = [ent(ADA), ent(BAB)]
    await g.upsert("a.md", [(people, [rel(ADA, "worked_with", BAB)])])
    await g.upsert("b.md", [(people, [rel(BAB, "worked_with", ADA)])])
    # a third document states it both ways in one chunk: one contribution more
    await g.upsert("c.md", [(people, [rel(BAB, "worked_with", ADA), rel(ADA, "worked_with", BAB)])])
    [edge] = await _edges(g)
    subject, _, obj, negated, status, weight, rendered, canonical = edge
    assert (status, weight, negated, canonical) == ("current", 3, False, True)
    assert {subject, obj} == {ADA, BAB}
    assert rendered == f"{subject} worked with {obj}"
    # the feed names the edge as stored, once
    assert await _relation_changes(g) == [("relation_added", subject, "worked_with", obj)]
    # withdrawing one direction's documents leaves the other's
    await g.delete("a.md")
    await g.delete("c.md")
    assert [e[4:6] for e in await _edges(g)] == [("current", 1)]


@pytest.mark.postgres
async def test_alliance_then_enmity_stated_the_other_way_round_supersedes(
    g: GraphHarness,
) -> None:
    """The demo's dispute, one year each way: ally_of(Babbage, Airy) in 1830,
    enemy_of(Airy, Babbage) in 1842."""
    people = [ent(BAB), ent(AIRY)]
    await g.upsert("rivalry-1.md", [(people, [rel(BAB, "ally_of", AIRY)])], order_key="1830")
    allied = g.clock + timedelta(milliseconds=500)
    await g.upsert("rivalry-2.md", [(people, [rel(AIRY, "enemy_of", BAB)])], order_key="1842")
    edges = await _edges(g)
    by_predicate = {e[1]: e for e in edges}
    assert by_predicate["ally_of"][4] == "superseded" and by_predicate["enemy_of"][4] == "current"
    assert all(e[7] for e in edges), "both oriented the same way"
    [enemy] = [(s, p, o, n, st) for s, p, o, n, st in await g.relations() if p == "enemy_of"]
    assert enemy[4] == "current"
    # as believed between the two documents, the alliance was current
    assert {r[1] for r in await g.relations(believed_at=allied)} == {"ally_of"}
    kinds = sorted((c[0], c[2]) for c in await _relation_changes(g))
    assert kinds == [
        ("relation_added", "ally_of"),
        ("relation_added", "enemy_of"),
        ("relation_superseded", "ally_of"),
    ]
    # a late-arriving older document restating the alliance the other way changes nothing
    await g.upsert("rivalry-0.md", [(people, [rel(AIRY, "ally_of", BAB)])], order_key="1829")
    assert {(e[1], e[4], e[5]) for e in await _edges(g)} == {
        ("ally_of", "superseded", 2),
        ("enemy_of", "current", 1),
    }


@pytest.mark.postgres
async def test_a_denial_stated_the_other_way_round_supersedes_the_assertion(
    g: GraphHarness,
) -> None:
    people = [ent(ADA), ent(BAB)]
    await g.upsert("a.md", [(people, [rel(ADA, "worked_with", BAB)])], order_key="2020")
    await g.upsert(
        "b.md", [(people, [rel(BAB, "worked_with", ADA, negated=True)])], order_key="2021"
    )
    states = {(e[3], e[4]) for e in await _edges(g)}
    assert states == {(False, "superseded"), (True, "current")}


@pytest.mark.postgres
async def test_a_merge_makes_the_two_edges_one(g: GraphHarness) -> None:
    """``Countess Lovelace`` and ``Ada Lovelace`` are stored apart, each working with
    Babbage, the two edges oriented differently by name; a document proving them one
    entity leaves one edge with the provenance of both, in an orientation it had (the
    feed's ``merged_into`` tells a consumer its new end; no edge turns round)."""
    countess = "Countess Lovelace"
    await g.upsert("a.md", [([ent(countess), ent(BAB)], [rel(countess, "worked_with", BAB)])])
    await g.upsert("b.md", [([ent(BAB), ent(ADA)], [rel(BAB, "worked_with", ADA)])])
    before = await _edges(g)
    assert [(e[0], e[2]) for e in before] == [(BAB, countess), (ADA, BAB)]
    await g.upsert("c.md", [([ent(ADA, aliases=(countess,))], [])])
    live = [e for e in await _edges(g) if e[4] != "retracted"]
    assert len(live) == 1
    subject, _, obj, _, status, weight, rendered, _ = live[0]
    assert (subject, obj) == (BAB, countess), "the longest form survives; the edge keeps its way"
    assert (status, weight) == ("current", 2)
    assert rendered == f"{subject} worked with {obj}"
    # a statement either way round goes to that edge
    await g.upsert("d.md", [([ent(countess), ent(BAB)], [rel(countess, "worked_with", BAB)])])
    assert [e[5] for e in await _edges(g) if e[4] != "retracted"] == [3]


@pytest.mark.postgres
async def test_the_stored_edge_does_not_depend_on_arrival_order(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    people = [ent(ADA), ent(BAB)]
    docs = [
        ("a.md", [(people, [rel(BAB, "worked_with", ADA)])]),
        ("b.md", [(people, [rel(ADA, "worked_with", BAB)])]),
    ]
    seen = []
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for order in (docs, docs[::-1]):
            g = await GraphHarness.create(conn, unique_name("sym"), SYMMETRIC)
            for key, chunks in order:
                await g.upsert(key, chunks)
            seen.append([e[:6] for e in await _edges(g)])
    assert seen[0] == seen[1] == [(ADA, "worked_with", BAB, False, "current", 2)]


@pytest.mark.postgres
async def test_a_realm_holding_both_directions_keeps_one_current(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """A realm written before the rule holds both directions; the next write on the pair
    adds to the edge the rule would have made, and the two compete as edges of one
    identity: one stays current, so the current graph holds the fact once until a
    replay stores it once."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, unique_name("sym"), RealmConfig(embedder="hashing:8"))
        people = [ent(ADA), ent(BAB)]
        await g.upsert("a.md", [(people, [rel(ADA, "worked_with", BAB)])])
        await g.upsert("b.md", [(people, [rel(BAB, "worked_with", ADA)])])
        assert [e[4] for e in await _edges(g)] == ["current", "current"]
        await conn.execute(
            sql.SQL("UPDATE {} SET config = %s").format(sql.Identifier(g.info.schema, "meta")),
            (Jsonb(orjson.loads(SYMMETRIC.to_json())),),
        )
        g.info = await open_realm(conn, g.info.realm)
        await g.upsert("c.md", [(people, [rel(BAB, "worked_with", ADA)])])
        edges = await _edges(g)
        assert [(e[0], e[5]) for e in edges] == [(ADA, 2), (BAB, 1)]
        # which one stays current is supersession's tie rule (the larger id)
        assert sorted(e[4] for e in edges) == ["current", "superseded"]
