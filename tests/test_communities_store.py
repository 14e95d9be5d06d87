"""Community builds against a real PostgreSQL, graphs written through the real writer.

A build replaces the space's communities in one transaction that takes the realm lock,
draws the next sequence and appends ``communities_built``; the next graph write says the
communities are stale; dormant entities are never members; and on a fixture graph where
label propagation floods everything into one cluster, Leiden does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.communities.auto import auto_build_loop
from tidegraph.indexer.communities.detect import ClusterParams
from tidegraph.indexer.communities.reports import (
    ClusterView,
    RatingScale,
    Report,
    offline_reporter,
)
from tidegraph.indexer.communities.store import (
    BuildResult,
    build_communities,
    read_snapshot,
)
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.schemas.servers import Servers
from tidegraph.store.cluster import Cluster

from graph_helpers import GraphHarness, ent, rel

pytestmark = pytest.mark.postgres

GROUPS = 6
SIZE = 5
EMBEDDER = HashingEmbedder(8)
"""The realm's pinned embedder (``hashing:8``, as GraphHarness creates realms)."""


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as c:
        yield c


@pytest.fixture
async def graph(
    conn: psycopg.AsyncConnection[Any], unique_name: Callable[[str], str]
) -> GraphHarness:
    return await GraphHarness.create(conn, unique_name("cm"))


def member(g: int, i: int) -> str:
    return f"Member {chr(65 + g)}{i}"


async def write_hub_fixture(graph: GraphHarness, space: str = "default") -> None:
    """Six dense groups (one document each) whose members all know one hub entity, said in
    two chunks of another document (weight 2): label propagation floods the whole graph
    from the hub, Leiden does not."""
    for g in range(GROUPS):
        names = [member(g, i) for i in range(SIZE)]
        await graph.upsert(
            f"group-{g}",
            [
                (
                    [ent(n) for n in names],
                    [rel(a, "worked_with", b) for a in names for b in names if a < b],
                )
            ],
            space=space,
        )
    everyone = [member(g, i) for g in range(GROUPS) for i in range(SIZE)]
    hub = ([ent("Hub Person")], [rel("Hub Person", "knew", n) for n in everyone])
    await graph.upsert("hub", [hub, hub], space=space)


async def rows(conn: psycopg.AsyncConnection[Any], query: str, *args: Any) -> list[Any]:
    cur = await conn.execute(query, args)
    return list(await cur.fetchall())


async def communities(
    graph: GraphHarness, *, current: bool = True
) -> list[tuple[int, int, int | None, str, set[str]]]:
    """(id, level, parent id, title, member names) of the current build (or of every build
    the realm keeps)."""
    s = sql.Identifier(graph.info.schema)
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT c.id, c.level, c.parent_id, c.title, array_agg(e.name ORDER BY e.name)"
            " FROM {s}.communities c JOIN {s}.community_members m ON m.community_id = c.id"
            " JOIN {s}.entities e ON e.id = m.entity_id WHERE c.t_expired IS NULL OR NOT %s"
            " GROUP BY c.id ORDER BY c.id"
        ).format(s=s),
        (current,),
    )
    return [(int(i), int(lv), p, t, set(names)) for i, lv, p, t, names in await cur.fetchall()]


async def outbox(graph: GraphHarness) -> list[tuple[int, int, str, str, Any]]:
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT seq, idx, kind, space, belief_time FROM {}.outbox ORDER BY seq, idx"
        ).format(sql.Identifier(graph.info.schema))
    )
    return [(int(a), int(b), str(c), str(d), e) for a, b, c, d, e in await cur.fetchall()]


async def meta(graph: GraphHarness) -> tuple[int, Any, Any, bool]:
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT seq, last_write_at, communities_built_at, communities_stale FROM {}.meta"
        ).format(sql.Identifier(graph.info.schema))
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0]), row[1], row[2], bool(row[3])


async def build(
    conn: psycopg.AsyncConnection[Any], graph: GraphHarness, **kwargs: Any
) -> BuildResult:
    result = await build_communities(conn, graph.info, EMBEDDER, **kwargs)
    assert result is not None
    return result


# --------------------------------------------------------------------------- the build


async def test_build_is_one_sequenced_commit_and_the_next_write_says_stale(
    conn: psycopg.AsyncConnection[Any], graph: GraphHarness
) -> None:
    await write_hub_fixture(graph)
    seq_before, last_write, _, _ = await meta(graph)
    result = await build(conn, graph)

    assert result.seq == seq_before + 1 and not result.graph_moved
    [space] = result.spaces
    assert (space.space, space.method, space.entities) == ("default", "leiden", 31)
    assert space.written == space.clusters[0] == GROUPS and space.failed == 0
    stored = await communities(graph)
    assert len(stored) == GROUPS
    for g in range(GROUPS):  # every group is one community (the hub joins one of them)
        assert sum({member(g, i) for i in range(SIZE)} <= names for *_, names in stored) == 1
    assert len({t.lower() for _, _, _, t, _ in stored}) == GROUPS, "titles are unique"

    changes = await outbox(graph)
    assert changes[-1][:4] == (result.seq, 0, "communities_built", "default")
    assert [c[0] for c in changes] == sorted(c[0] for c in changes)
    assert changes[-1][4] >= max(c[4] for c in changes[:-1]), "belief time never goes back"
    seq, last, built_at, stale = await meta(graph)
    assert (seq, built_at, stale) == (result.seq, result.built_at, False)
    assert built_at >= last_write and last == built_at

    cur = await conn.execute(
        sql.SQL("SELECT DISTINCT built_at FROM {}.communities").format(
            sql.Identifier(graph.info.schema)
        )
    )
    assert [r[0] for r in await cur.fetchall()] == [result.built_at]

    await graph.upsert(
        "late",
        [([ent("Member A0"), ent("Newcomer")], [rel("Newcomer", "worked_with", "Member A0")])],
    )
    kinds = [k for s, _, k, _, _ in await outbox(graph) if s > result.seq]
    assert kinds.count("communities_stale") == 1
    assert (await meta(graph))[3] is True


async def test_a_rebuild_replaces_stale_communities_and_keeps_the_earlier_build(
    conn: psycopg.AsyncConnection[Any], graph: GraphHarness
) -> None:
    await write_hub_fixture(graph)
    lonely = ["Loner One", "Loner Two", "Loner Three", "Loner Four"]
    await graph.upsert(
        "lonely",
        [([ent(n) for n in lonely], [rel(a, "met", b) for a in lonely for b in lonely if a < b])],
    )
    first = await build(conn, graph)
    before = await communities(graph)
    assert any(set(lonely) == names for *_, names in before)
    assert first.spaces[0].written == GROUPS + 1

    await graph.delete("lonely")  # its members go dormant, its relations are retracted
    second = await build(conn, graph)
    after = await communities(graph)
    assert second.spaces[0].written == GROUPS == len(after)
    assert not {i for i, *_ in before} & {i for i, *_ in after}, "no old row is current"
    assert not any(names & set(lonely) for *_, names in after)
    # The earlier build is kept whole, believed until the rebuild's commit.
    kept = await communities(graph, current=False)
    assert kept == sorted(before + after)
    [[until]] = await rows(
        conn,
        sql.SQL("SELECT DISTINCT t_expired FROM {}.communities WHERE id = ANY(%s)")
        .format(sql.Identifier(graph.info.schema))
        .as_string(conn),
        [i for i, *_ in before],
    )
    [[since]] = await rows(
        conn,
        sql.SQL("SELECT DISTINCT t_created FROM {}.communities WHERE id = ANY(%s)")
        .format(sql.Identifier(graph.info.schema))
        .as_string(conn),
        [i for i, *_ in after],
    )
    assert until == since is not None
    built = [c for c in await outbox(graph) if c[2] == "communities_built"]
    assert [c[0] for c in built] == [first.seq, second.seq]


async def test_members_never_include_dormant_entities(
    conn: psycopg.AsyncConnection[Any], graph: GraphHarness
) -> None:
    await write_hub_fixture(graph)
    # A member withheld from retrieval while its relations stay current (as an archived
    # entity is): it must leave the snapshot and every community.
    await conn.execute(
        sql.SQL("UPDATE {}.entities SET dormant_since = now() WHERE name = %s").format(
            sql.Identifier(graph.info.schema)
        ),
        ("Member B2",),
    )
    snap = await read_snapshot(conn, graph.info)
    entities, relations = snap.spaces["default"]
    ids = {e.id for e in entities}
    assert "Member B2" not in {e.name for e in entities}
    assert all(r.subject in ids and r.object in ids for r in relations)
    await build(conn, graph)
    stored = await communities(graph)
    assert stored and not any("Member B2" in names for *_, names in stored)
    assert any({member(1, i) for i in (0, 1, 3, 4)} <= names for *_, names in stored)


async def test_leiden_keeps_the_largest_community_smaller_than_label_propagation(
    conn: psycopg.AsyncConnection[Any], graph: GraphHarness
) -> None:
    await write_hub_fixture(graph)
    lpa = await build(conn, graph, params=ClusterParams(method="label_propagation"))
    leiden = await build(conn, graph, params=ClusterParams(method="leiden"))
    share_lpa, share_leiden = lpa.spaces[0].largest_share, leiden.spaces[0].largest_share
    print(
        f"\nlargest community share of {leiden.spaces[0].entities} entities: "
        f"label propagation {share_lpa:.1%}, Leiden {share_leiden:.1%}"
    )
    assert share_lpa == 1.0
    assert share_leiden < 0.25
    assert len(await communities(graph)) == GROUPS


async def test_hierarchy_is_stored_with_children_inside_parents(
    conn: psycopg.AsyncConnection[Any], graph: GraphHarness
) -> None:
    """Three families of three cliques; bridges inside a family, one between families."""
    for f in range(3):
        cliques = [[f"Person {f}{c}{i}" for i in range(6)] for c in range(3)]
        rels = [rel(a, "worked_with", b) for cl in cliques for a in cl for b in cl if a < b]
        rels += [rel(cliques[c][t], "met", cliques[c + 1][t]) for c in range(2) for t in (0, 1)]
        await graph.upsert(f"family-{f}", [([ent(n) for cl in cliques for n in cl], rels)])
    await graph.upsert(
        "links",
        [([], [rel("Person 020", "met", "Person 100"), rel("Person 120", "met", "Person 200")])],
    )
    result = await build(conn, graph, params=ClusterParams(levels=2))
    assert result.spaces[0].clusters == (9, 3)
    stored = await communities(graph)
    by_id = {i: (lv, p, names) for i, lv, p, _, names in stored}
    children = [(p, names) for lv, p, names in by_id.values() if lv == 0]
    assert len(children) == 9 and all(p is not None for p, _ in children)
    for p, names in children:
        assert p is not None and by_id[p][0] == 1 and names <= by_id[p][2]
    for lv, p, names in by_id.values():
        if lv == 1:
            assert p is None and len(names) == 18
            assert len({n[7] for n in names}) == 1, "a parent is one family"


async def test_graph_moving_during_the_build_stores_it_already_stale(
    conn: psycopg.AsyncConnection[Any], graph: GraphHarness
) -> None:
    await write_hub_fixture(graph)
    inner = offline_reporter()
    wrote: list[bool] = []

    async def meanwhile(view: ClusterView, scale: RatingScale, kids: Sequence[Report]) -> Report:
        if not wrote:  # a document is indexed while reports are being written
            wrote.append(True)
            await graph.upsert("meanwhile", [([ent("Late Arrival")], [])])
        return await inner(view, scale, kids)

    result = await build(conn, graph, reporter=meanwhile)
    assert result.graph_moved
    last = [(c[1], c[2]) for c in await outbox(graph) if c[0] == result.seq]
    assert last == [(0, "communities_built"), (1, "communities_stale")]
    _, last_write, built_at, stale = await meta(graph)
    assert stale and built_at < last_write


async def test_only_the_spaces_asked_for_are_replaced(
    conn: psycopg.AsyncConnection[Any], graph: GraphHarness
) -> None:
    await write_hub_fixture(graph, space="alpha")
    await write_hub_fixture(graph, space="beta")
    both = await build(conn, graph)
    assert [s.space for s in both.spaces] == ["alpha", "beta"]
    built = [c for c in await outbox(graph) if c[0] == both.seq]
    assert [(c[1], c[2], c[3]) for c in built] == [
        (0, "communities_built", "alpha"),
        (1, "communities_built", "beta"),
    ]
    s = sql.Identifier(graph.info.schema)
    [[beta_ids]] = await rows(
        conn,
        sql.SQL("SELECT array_agg(id ORDER BY id) FROM {}.communities WHERE space = 'beta'")
        .format(s)
        .as_string(conn),
    )
    only = await build(conn, graph, spaces=["alpha"])
    assert [sp.space for sp in only.spaces] == ["alpha"]
    [[beta_after]] = await rows(
        conn,
        sql.SQL("SELECT array_agg(id ORDER BY id) FROM {}.communities WHERE space = 'beta'")
        .format(s)
        .as_string(conn),
    )
    assert beta_after == beta_ids


def _no_other(name: str, dsn: str) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
    raise AssertionError(f"one server only, not {name!r}")


async def test_automatic_build_after_a_quiet_period(pg_dsn: str, graph: GraphHarness) -> None:
    await write_hub_fixture(graph)
    pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
        pg_dsn, min_size=1, max_size=2, open=False, kwargs={"autocommit": True}
    )
    async with pool:
        task = asyncio.create_task(
            auto_build_loop(
                Cluster(Servers.single(pg_dsn), _no_other, main_pool=pool),
                0.5,
                embedder_for=lambda _info: EMBEDDER,
                poll_seconds=0.1,
                realms=[graph.info.realm],
            )
        )
        try:
            for _ in range(100):
                if len(await communities(graph)) == GROUPS:
                    break
                await asyncio.sleep(0.1)
            assert len(await communities(graph)) == GROUPS
            first = (await meta(graph))[2]
            await graph.upsert(
                "late",
                [
                    (
                        [ent("Member A0"), ent("Newcomer")],
                        [rel("Newcomer", "worked_with", "Member A0")],
                    )
                ],
            )
            for _ in range(100):
                if (await meta(graph))[2] != first and not (await meta(graph))[3]:
                    break
                await asyncio.sleep(0.1)
            _, _, again, stale = await meta(graph)
            assert again != first and not stale, "stale communities were rebuilt"
            assert any("Newcomer" in names for *_, names in await communities(graph))
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
