"""The write path against a real PostgreSQL: replacement, dormancy, retraction, supersession,
restoration and append-only belief history (DESIGN invariants 3–7)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.errors import AlreadySettled, Fenced

from graph_helpers import T0, GraphHarness, ent, rel

pytestmark = pytest.mark.postgres

GROUPS = RealmConfig(
    embedder="hashing:8",
    exclusive_groups=(frozenset({"ally_of", "enemy_of", "friend_of"}),),
)


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as c:
        yield c


@pytest.fixture
async def graph(
    conn: psycopg.AsyncConnection[Any], unique_name: Callable[[str], str]
) -> GraphHarness:
    return await GraphHarness.create(conn, unique_name("w"), GROUPS)


async def test_replacement_dormancy_and_revival(graph: GraphHarness) -> None:
    await graph.upsert(
        "a",
        [
            (
                [ent("Ada Lovelace"), ent("Charles Babbage")],
                [rel("Ada Lovelace", "worked_with", "Charles Babbage")],
            )
        ],
    )
    assert await graph.relations() == {
        ("Ada Lovelace", "worked_with", "Charles Babbage", False, "current")
    }
    # v2 of the same document no longer mentions Babbage: the relation is retracted and
    # Babbage goes dormant; nothing is deleted.
    await graph.upsert(
        "a",
        [
            (
                [ent("Ada Lovelace"), ent("Mary Somerville")],
                [rel("Ada Lovelace", "studied_with", "Mary Somerville")],
            )
        ],
    )
    assert await graph.relations() == {
        ("Ada Lovelace", "studied_with", "Mary Somerville", False, "current")
    }
    ents = await graph.entities()
    assert ents["Charles Babbage"][1] is True
    assert ents["Ada Lovelace"][1] is False
    # Another document mentions Babbage again: revived.
    await graph.upsert("b", [([ent("Charles Babbage")], [])])
    assert (await graph.entities())["Charles Babbage"][1] is False
    kinds = [k for _, _, k in await graph.changes()]
    assert "relation_retracted" in kinds and "entity_dormant" in kinds
    assert "entity_revived" in kinds and "document_replaced" in kinds


async def test_delete_withdraws_contribution(graph: GraphHarness) -> None:
    await graph.upsert(
        "a",
        [
            (
                [ent("X Corp", "Organization"), ent("Jane Roe")],
                [rel("Jane Roe", "works_at", "X Corp")],
            )
        ],
    )
    result = await graph.delete("a")
    assert result.status == "deleted"
    assert await graph.relations() == set()
    assert all(dormant for _, dormant, _ in (await graph.entities()).values())


async def test_corroboration_counts_distinct_chunks_and_never_inflates(graph: GraphHarness) -> None:
    facts = (
        [ent("Ada Lovelace"), ent("Charles Babbage")],
        [rel("Ada Lovelace", "worked_with", "Charles Babbage")],
    )
    await graph.upsert("a", [facts, facts])
    await graph.upsert("b", [facts])
    assert (await graph.weights())[("Ada Lovelace", "worked_with", "Charles Babbage")] == 3
    await graph.upsert("a", [facts, facts], content="sha256:" + "1" * 64)  # re-index a
    assert (await graph.weights())[("Ada Lovelace", "worked_with", "Charles Babbage")] == 3


async def test_supersession_by_order_key_whatever_the_arrival(graph: GraphHarness) -> None:
    pair = [ent("Arthur"), ent("Mordred")]
    await graph.upsert("late", [(pair, [rel("Arthur", "enemy_of", "Mordred")])], order_key="2")
    await graph.upsert("early", [(pair, [rel("Arthur", "ally_of", "Mordred")])], order_key="1")
    assert await graph.relations() == {("Arthur", "enemy_of", "Mordred", False, "current")}
    assert ("Arthur", "ally_of", "Mordred", False, "superseded") in await graph.relations(
        include_superseded=True
    )


async def _relation_writes(graph: GraphHarness, write: Callable[[], Any]) -> tuple[int, int]:
    """(rows inserted, row versions updated) in ``relations`` by one write, as the server
    counts them for the transaction the write runs in (the view also holds counts of this
    session's earlier transactions not yet flushed, hence the difference)."""

    async def counts() -> tuple[int, int]:
        cur = await graph.conn.execute(
            "SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables"
            " WHERE schemaname = %s AND relname = 'relations'",
            (graph.info.schema,),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    async with graph.conn.transaction():
        before = await counts()
        await write()
        after = await counts()
    return after[0] - before[0], after[1] - before[1]


async def test_a_new_edge_is_written_once_and_still_announced(graph: GraphHarness) -> None:
    """A new edge is born current: no second version of its row in the same transaction
    (each would spend the page's free space and push a later update off the heap-only
    path, re-inserting the embedding into the vector index), yet the feed reports it."""
    people = [ent("Ada Lovelace"), ent("Charles Babbage"), ent("Mary Somerville")]
    facts = [
        rel("Ada Lovelace", "worked_with", "Charles Babbage"),
        rel("Ada Lovelace", "studied_with", "Mary Somerville"),
        rel("Mary Somerville", "ally_of", "Charles Babbage"),
    ]
    written = await _relation_writes(
        graph, lambda: graph.upsert("a", [(people, facts)], order_key="2")
    )
    assert written == (3, 0)
    added = [k for _, _, k in await graph.changes()].count("relation_added")
    assert added == 3
    # Written second but earlier in document order, the rival is superseded at birth: one
    # move, told as added then superseded; its history holds only the superseded interval.
    late = [rel("Mary Somerville", "enemy_of", "Charles Babbage")]
    assert await _relation_writes(
        graph, lambda: graph.upsert("b", [(people, late)], order_key="1")
    ) == (1, 1)
    changes = await graph.changes()
    last = [k for seq, _, k in changes if seq == changes[-1][0] and k.startswith("relation_")]
    assert last == ["relation_added", "relation_superseded"]
    assert ("Mary Somerville", "enemy_of", "Charles Babbage", False, "superseded") in (
        await graph.relations(include_superseded=True)
    )
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT h.state, count(*) FROM {} h JOIN {} r ON r.id = h.relation_id"
            " WHERE r.predicate = 'enemy_of' GROUP BY h.state"
        ).format(
            sql.Identifier(graph.info.schema, "relation_history"),
            sql.Identifier(graph.info.schema, "relations"),
        )
    )
    assert dict(await cur.fetchall()) == {"superseded": 1}


async def test_reassertion_after_supersession_and_restoration(graph: GraphHarness) -> None:
    pair = [ent("Arthur"), ent("Mordred")]
    await graph.upsert("d1", [(pair, [rel("Arthur", "ally_of", "Mordred")])], order_key="1")
    await graph.upsert("d2", [(pair, [rel("Arthur", "enemy_of", "Mordred")])], order_key="2")
    await graph.upsert("d3", [(pair, [rel("Arthur", "ally_of", "Mordred")])], order_key="3")
    everything = await graph.relations(include_superseded=True)
    assert ("Arthur", "ally_of", "Mordred", False, "current") in everything
    assert ("Arthur", "enemy_of", "Mordred", False, "superseded") in everything
    assert await graph.relations() == {("Arthur", "ally_of", "Mordred", False, "current")}
    # Withdraw d3 and d1: enemy is current again (restored).
    await graph.delete("d3")
    await graph.delete("d1")
    assert await graph.relations() == {("Arthur", "enemy_of", "Mordred", False, "current")}
    assert "relation_restored" in [k for _, _, k in await graph.changes()]


async def test_past_answers_never_change(graph: GraphHarness) -> None:
    pair = [ent("Arthur"), ent("Mordred")]
    await graph.upsert("d1", [(pair, [rel("Arthur", "ally_of", "Mordred")])], order_key="1")
    instants = [graph.clock + timedelta(milliseconds=500)]
    await graph.upsert("d2", [(pair, [rel("Arthur", "enemy_of", "Mordred")])], order_key="2")
    instants.append(graph.clock + timedelta(milliseconds=500))
    before = [await graph.relations(believed_at=t, include_superseded=True) for t in instants]
    await graph.delete("d2")
    await graph.upsert("d1", [(pair, [rel("Arthur", "friend_of", "Mordred")])], order_key="5")
    after = [await graph.relations(believed_at=t, include_superseded=True) for t in instants]
    assert before == after
    assert before[0] == {("Arthur", "ally_of", "Mordred", False, "current")}


async def test_outbox_sequence_is_gap_free(graph: GraphHarness) -> None:
    for i in range(5):
        await graph.upsert(
            f"d{i}", [([ent(f"Person {i}"), ent("Hub")], [rel(f"Person {i}", "knows", "Hub")])]
        )
    seqs = sorted({s for s, _, _ in await graph.changes()})
    assert seqs == list(range(1, 6))


async def test_zombie_write_is_fenced(graph: GraphHarness) -> None:
    from tidegraph.store import positions

    # A new owner claims the partition: the harness's epoch is now stale.
    await positions.claim(graph.conn, "test", graph.topic, 0, 0)
    with pytest.raises(Fenced):
        await graph.upsert("z", [([ent("Zed")], [])])
    assert await graph.entities() == {}


async def test_position_moves_over_an_offset_gap_but_never_back(graph: GraphHarness) -> None:
    await graph.upsert("a", [([ent("Ada")], [])])
    graph.offset += 5  # offsets with no record (retention, transaction markers)
    await graph.upsert("b", [([ent("Bea")], [])])
    graph.offset -= 1  # a record below the realm's position is a repeat: settled already
    with pytest.raises(AlreadySettled):
        await graph.upsert("c", [([ent("Cy")], [])])
    assert set(await graph.entities()) == {"Ada", "Bea"}


async def test_alias_resolution_longest_form_wins(graph: GraphHarness) -> None:
    await graph.upsert("a", [([ent("Babbage", "Concept")], [])])
    await graph.upsert(
        "b", [([ent("Charles Babbage", "Person", "mathematician", aliases=("Babbage",))], [])]
    )
    ents = await graph.entities()
    assert set(ents) == {"Charles Babbage"}
    assert ents["Charles Babbage"][0] == "Person"
    assert "Babbage" in ents["Charles Babbage"][2]


async def test_first_write_after_a_community_build_says_communities_are_stale(
    graph: GraphHarness,
) -> None:
    from psycopg import sql

    await graph.upsert("a", [([ent("Ada Lovelace")], [])])
    await graph.conn.execute(
        sql.SQL(
            "UPDATE {}.meta SET communities_built_at = now(), communities_stale = false"
        ).format(sql.Identifier(graph.info.schema))
    )
    await graph.upsert("b", [([ent("Charles Babbage")], [])])
    await graph.upsert("c", [([ent("Mary Somerville")], [])])
    kinds = [k for _, _, k in await graph.changes()]
    assert kinds.count("communities_stale") == 1


async def test_the_batch_sequencer_draws_what_the_live_one_draws(
    conn: psycopg.AsyncConnection[Any], unique_name: Callable[[str], str]
) -> None:
    """The sequencer contract: a batch reads the meta row once, draws each write's
    sequence, belief instant and staleness notice in memory and stores the row once; the
    realm must end exactly as when the database draws for each write, with the log's clock
    stepping back and a community build between two batches."""
    from psycopg import sql

    from tidegraph.indexer.write.sequencer import BatchSequencer

    own = await GraphHarness.create(conn, unique_name("own"), GROUPS)
    batched = await GraphHarness.create(conn, unique_name("batched"), GROUPS)
    times = [T0 + timedelta(seconds=s) for s in (10, 20, 15, 15, 30, 25, 40)]
    names = [
        "Ada Lovelace",
        "Charles Babbage",
        "Mary Somerville",
        "Ada Lovelace",
        "Michael Faraday",
        "John Herschel",
        "Charles Babbage",
    ]

    async def build_communities(graph: GraphHarness) -> None:
        await conn.execute(
            sql.SQL(
                "UPDATE {}.meta SET communities_built_at = now(), communities_stale = false"
            ).format(sql.Identifier(graph.info.schema))
        )

    async def outcome(graph: GraphHarness) -> tuple[Any, ...]:
        schema = sql.Identifier(graph.info.schema)
        cur = await conn.execute(
            sql.SQL("SELECT seq, idx, kind, belief_time FROM {}.outbox ORDER BY seq, idx").format(
                schema
            )
        )
        changes = await cur.fetchall()
        cur = await conn.execute(
            sql.SQL("SELECT seq, last_write_at, communities_stale FROM {}.meta").format(schema)
        )
        return tuple(changes), await cur.fetchone()

    for n, (t, name) in enumerate(zip(times, names, strict=True)):
        if n == 4:
            await build_communities(own)
        await own.upsert(f"d{n % 5}", [([ent(name)], [])], at=t)
    for batch in (range(0, 4), range(4, 7)):
        if batch.start == 4:
            await build_communities(batched)
        async with conn.transaction():
            sequencer = await BatchSequencer.open(conn, batched.info)
            opened = sequencer.meta
            for n in batch:
                await batched.upsert(
                    f"d{n % 5}", [([ent(names[n])], [])], at=times[n], sequencer=sequencer
                )
            await sequencer.close(conn, opened)
    mine = await outcome(own)
    assert mine == await outcome(batched)
    kinds = [k for _, _, k, _ in mine[0]]
    assert kinds.count("communities_stale") == 1 and "document_replaced" in kinds
    assert mine[1][0] == len(times) and mine[1][1] == max(times)


async def test_a_swapped_out_schema_refuses_writes(graph: GraphHarness) -> None:
    from psycopg import sql

    from tidegraph.store.errors import RealmSwapped

    await graph.conn.execute(
        sql.SQL("UPDATE {}.meta SET swapped_out = true").format(sql.Identifier(graph.info.schema))
    )
    with pytest.raises(RealmSwapped):
        await graph.upsert("a", [([ent("Ada Lovelace")], [])])
    assert await graph.entities() == {}


async def test_every_outbox_payload_key_reaches_the_change_feed(graph: GraphHarness) -> None:
    """What the outbox stores, ``GraphChange`` carries: merges (``merged_into``), entity
    updates (a type refined, a longer description, a new alias), supersession, deletion."""
    from psycopg import sql

    from tidegraph.query_service.reads import change_from_row

    await graph.upsert("a", [([ent("Babbage", "Concept")], [rel("Babbage", "ally_of", "Airy")])])
    await graph.upsert("b", [([ent("Charles Babbage", "Person", "mathematician")], [])])
    await graph.upsert(
        "c",
        [
            (
                [ent("Charles Babbage", "Person", "mathematician", aliases=("Babbage",))],
                [rel("Charles Babbage", "enemy_of", "Airy")],
            )
        ],
        order_key="2",
    )
    await graph.upsert(
        "d", [([ent("Airy", "Person", "astronomer royal of England")], [])], order_key="3"
    )
    await graph.delete("a")
    cur = await graph.conn.execute(
        sql.SQL("SELECT seq, idx, kind, space, belief_time, payload FROM {}.outbox").format(
            sql.Identifier(graph.info.schema)
        )
    )
    rows = await cur.fetchall()
    kinds = {r[2] for r in rows}
    assert {"entity_updated", "entity_dormant", "relation_superseded"} <= kinds
    assert any("merged_into" in r[5] for r in rows)
    for row in rows:
        change = change_from_row(graph.info.realm, row).model_dump(by_alias=True)
        for key, value in row[5].items():
            assert key in change, f"{row[2]}: {key} is stored but not on the feed"
            if isinstance(value, dict):
                assert {k: change[key][k] for k in value} == value
            else:
                assert change[key] == value
    updated = [change_from_row(graph.info.realm, r) for r in rows if r[2] == "entity_updated"]
    babbage = [c.entity for c in updated if c.entity and c.entity.name == "Charles Babbage"]
    assert babbage and babbage[-1].type == "Person" and "Babbage" in (babbage[-1].aliases or [])
