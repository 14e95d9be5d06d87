"""Functional predicates on real PostgreSQL: the writer's reconciliation loads a value's
whole scope, so the current value is the latest by order_key for any arrival order and any
withdrawal, and every supersession records its mechanism — in the relation, its belief
history, the relations API and the change feed."""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import open_realm

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool

pytestmark = pytest.mark.postgres

CONFIG = RealmConfig(
    embedder="hashing:8",
    exclusive_groups=(frozenset({"ally_of", "enemy_of"}),),
    functional_predicates={"lives_in": "subject", "chairman_of": "object"},
)
CITIES = {"d1": ("London", "2019"), "d2": ("Paris", "2021"), "d3": ("Rome", "2020")}


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as c:
        yield c


async def _lives(graph: GraphHarness, key: str) -> None:
    city, order = CITIES[key]
    await graph.upsert(
        key,
        [([ent("Ada"), ent(city, "Location")], [rel("Ada", "lives_in", city)])],
        order_key=order,
    )


async def _states(graph: GraphHarness) -> dict[str, tuple[str, str | None, str | None]]:
    """Object name → (status, superseding object name, mechanism) of Ada's lives_in edges."""
    s = sql.Identifier(graph.info.schema)
    cur = await graph.conn.execute(
        sql.SQL(
            "SELECT eo.name, r.status, xo.name, r.superseded_via FROM {s}.relations r"
            " JOIN {s}.entities eo ON eo.id = r.object_id"
            " LEFT JOIN {s}.relations x ON x.id = r.superseded_by"
            " LEFT JOIN {s}.entities xo ON xo.id = x.object_id"
            " WHERE r.predicate = 'lives_in' AND NOT r.negated"
        ).format(s=s)
    )
    return {str(o): (str(st), by, via) for o, st, by, via in await cur.fetchall()}


def _model(live: set[str]) -> dict[str, tuple[str, str | None, str | None]]:
    """Brute force: the latest live value by order is current; every other live value is
    superseded by the next live one in order; a withdrawn one is retracted."""
    ordered = sorted(live, key=lambda k: CITIES[k][1])
    out: dict[str, tuple[str, str | None, str | None]] = {}
    for key, (city, _) in CITIES.items():
        if key not in live:
            out[city] = ("retracted", None, None)
        elif key == ordered[-1]:
            out[city] = ("current", None, None)
        else:
            nxt = ordered[ordered.index(key) + 1]
            out[city] = ("superseded", CITIES[nxt][0], "functional")
    return out


@pytest.mark.parametrize("arrival", list(itertools.permutations(sorted(CITIES))))
async def test_every_arrival_order_and_withdrawal_leaves_the_latest_value_current(
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
    arrival: tuple[str, ...],
) -> None:
    graph = await GraphHarness.create(conn, unique_name("fw"), CONFIG)
    for key in arrival:
        await _lives(graph, key)
    assert await _states(graph) == _model(set(CITIES))
    # Withdraw in a seeded order: each time the newest remaining value is current again.
    live = set(CITIES)
    withdrawn = random.Random("".join(arrival)).sample(sorted(CITIES), 2)
    for key in withdrawn:
        await graph.delete(key)
        live.discard(key)
        assert await _states(graph) == _model(live)
    # A value indexed again takes its place in document order again.
    await _lives(graph, withdrawn[0])
    live.add(withdrawn[0])
    assert await _states(graph) == _model(live)


async def test_object_side_denials_and_other_pairs(
    conn: psycopg.AsyncConnection[Any], unique_name: Callable[[str], str]
) -> None:
    graph = await GraphHarness.create(conn, unique_name("fo"), CONFIG)
    acme = ent("Acme", "Organization")
    await graph.upsert(
        "new", [([ent("Bob"), acme], [rel("Bob", "chairman_of", "Acme")])], order_key="2022"
    )
    await graph.upsert(
        "old", [([ent("Ann"), acme], [rel("Ann", "chairman_of", "Acme")])], order_key="2019"
    )
    # A denial about London says nothing about Paris; one about Paris supersedes it.
    await graph.upsert(
        "paris", [([ent("Ada"), ent("Paris")], [rel("Ada", "lives_in", "Paris")])], order_key="3"
    )
    no = [ent("Ada"), ent("London")]
    await graph.upsert("no-london", [(no, [rel("Ada", "lives_in", "London", negated=True)])])
    assert await graph.relations(include_superseded=True) == {
        ("Bob", "chairman_of", "Acme", False, "current"),
        ("Ann", "chairman_of", "Acme", False, "superseded"),
        ("Ada", "lives_in", "Paris", False, "current"),
        ("Ada", "lives_in", "London", True, "current"),
    }
    await graph.upsert(
        "no-paris",
        [([ent("Ada"), ent("Paris")], [rel("Ada", "lives_in", "Paris", negated=True)])],
        order_key="4",
    )
    assert ("Ada", "lives_in", "Paris", False, "superseded") in await graph.relations(
        include_superseded=True
    )
    s = sql.Identifier(graph.info.schema)
    cur = await conn.execute(
        sql.SQL(
            "SELECT es.name, r.superseded_via, h.superseded_via FROM {s}.relations r"
            " JOIN {s}.entities es ON es.id = r.subject_id"
            " JOIN {s}.relation_history h ON h.relation_id = r.id AND h.t_expired IS NULL"
            " WHERE r.status = 'superseded'"
        ).format(s=s)
    )
    assert sorted(await cur.fetchall()) == [
        ("Ada", "negation", "negation"),
        ("Ann", "functional", "functional"),
    ]


async def test_the_mechanism_reaches_the_feed_and_the_relations_api(
    conn: psycopg.AsyncConnection[Any], pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    realm = unique_name("fa")
    graph = await GraphHarness.create(conn, realm, CONFIG)
    pair = [ent("Arthur"), ent("Mordred")]
    await graph.upsert("a", [(pair, [rel("Arthur", "ally_of", "Mordred")])], order_key="1")
    await graph.upsert("e", [(pair, [rel("Arthur", "enemy_of", "Mordred")])], order_key="2")
    await _lives(graph, "d1")
    await _lives(graph, "d2")
    s = sql.Identifier(graph.info.schema)
    cur = await conn.execute(
        sql.SQL(
            "SELECT payload->'relation'->>'predicate', payload->>'superseded_via'"
            " FROM {}.outbox WHERE kind = 'relation_superseded' ORDER BY seq, idx"
        ).format(s)
    )
    assert await cur.fetchall() == [("ally_of", "exclusive_group"), ("lives_in", "functional")]
    async with open_pool(pg_dsn) as pool, api_client(pool) as client:
        r = await client.get(f"/v1/realms/{realm}/relations", params={"include_superseded": "true"})
        assert r.status_code == 200, r.text
        listed = {
            (x["predicate"], x["object"], x["status"], x["superseded_via"])
            for x in r.json()["relations"]
        }
        assert listed == {
            ("ally_of", "Mordred", "superseded", "exclusive_group"),
            ("enemy_of", "Mordred", "current", None),
            ("lives_in", "London", "superseded", "functional"),
            ("lives_in", "Paris", "current", None),
        }
        changes = await client.get(f"/v1/realms/{realm}/changes", params={"after_seq": 0})
        assert changes.status_code == 200, changes.text
        superseded = [c for c in changes.json()["changes"] if c["kind"] == "relation_superseded"]
        assert [c["superseded_via"] for c in superseded] == ["exclusive_group", "functional"]


async def test_a_realm_created_before_mechanisms_gets_the_columns_when_opened(
    conn: psycopg.AsyncConnection[Any], unique_name: Callable[[str], str]
) -> None:
    graph = await GraphHarness.create(conn, unique_name("fu"), CONFIG)
    s = sql.Identifier(graph.info.schema)
    for table in ("relations", "relation_history"):
        await conn.execute(
            sql.SQL("ALTER TABLE {}.{} DROP COLUMN superseded_via").format(s, sql.Identifier(table))
        )
    await open_realm(conn, graph.info.realm)
    await _lives(graph, "d1")
    await _lives(graph, "d2")
    assert await _states(graph) == {
        "London": ("superseded", "Paris", "functional"),
        "Paris": ("current", None, None),
    }
