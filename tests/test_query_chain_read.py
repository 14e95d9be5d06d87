"""The evidence-chain read (``channels.relation_chains``) against an independent model, on
random graphs written through the real writer into PostgreSQL.

The model enumerates every simple path from the named entities over the relations
``as_of`` admits, and applies the rules as ``query_service.paths`` states them (the terms
the named entities' own relations explain come from the focus read, as in retrieval), with its
own table of which question word names which predicate or type (the read decides that
with PostgreSQL's English stemmer): a link is named when its predicate names a term no
earlier link names; at most one link is not named; the last is, or the far end's type
names a term no link names; the chain names a term that no relation of a named entity
whose predicate names a term names (by that predicate or its other end's type). The
per-step caps are set beyond any degree here, so the read must return exactly the
model's chains.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tidegraph.query_service import channels
from tidegraph.query_service.channels import Scope
from tidegraph.query_service.keywords import websearch_text
from tidegraph.schemas.names import name_key
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from query_helpers import write_doc

pytestmark = [pytest.mark.postgres]

NODES = ("Arn Vale", "Bo Kettle", "Cass Wren", "Dell Orme", "Eske Rook", "Fen Marsh", "Gil Tarr")
TYPES = ("Person", "City", "Organization")
PREDICATES = ("works_for", "located_in", "funded_by", "knows", "studied_at")
TERMS = ("works", "located", "funds", "studied", "city", "organization")
NAMES_PREDICATE = {
    "works_for": {"works"},
    "located_in": {"located"},
    "funded_by": {"funds"},
    "knows": set(),
    "studied_at": {"studied"},
}
NAMES_TYPE = {"Person": set(), "City": {"city"}, "Organization": {"organization"}}
PERIODS = ((None, None), ("2000", "2002"), ("2004", None))

edges = st.lists(
    st.tuples(
        st.sampled_from(NODES),
        st.sampled_from(PREDICATES),
        st.sampled_from(NODES),
        st.sampled_from(PERIODS),
    ).filter(lambda e: e[0] != e[2]),
    min_size=6,
    max_size=16,
    unique_by=lambda e: (e[0], e[1], e[2]),
)
example = st.fixed_dictionaries(
    {
        "types": st.lists(st.sampled_from(TYPES), min_size=len(NODES), max_size=len(NODES)),
        "edges": edges,
        "named": st.lists(st.sampled_from(NODES[:3]), min_size=1, max_size=2, unique=True),
        "terms": st.lists(st.sampled_from(TERMS), min_size=2, max_size=5, unique=True),
        "hops": st.sampled_from((2, 3)),
        "as_of": st.sampled_from((None, "2001", "2005")),
    }
)


class Realm:
    def __init__(self, graph: GraphHarness) -> None:
        self.graph = graph
        self.n = 0


@pytest.fixture(scope="module")
def realm(pg_dsn: str) -> Iterator[tuple[asyncio.AbstractEventLoop, Realm]]:
    loop = asyncio.new_event_loop()

    async def setup() -> Realm:
        conn = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
        name = "cr" + uuid.uuid4().hex[:12]
        return Realm(await GraphHarness.create(conn, name, RealmConfig(embedder="hashing:8")))

    r = loop.run_until_complete(setup())
    yield loop, r
    loop.run_until_complete(r.graph.conn.close())
    loop.close()


def _mask(words: set[str], terms: list[str]) -> int:
    return sum(1 << i for i, t in enumerate(terms) if t in words)


def _admitted(period: tuple[str | None, str | None], as_of: str | None) -> bool:
    if as_of is None:
        return True
    first, last = period
    return (first is None or int(first) <= int(as_of)) and (last is None or int(last) >= int(as_of))


Row = tuple[tuple[int, ...], tuple[int, ...], int, bool]


def model(ex: dict[str, Any], ids: dict[tuple[str, str, str], int]) -> set[Row]:
    """Every chain the rules admit, by plain enumeration of simple paths."""
    terms: list[str] = ex["terms"]
    kind = dict(zip(NODES, ex["types"], strict=True))
    links = [
        (ids[(s, p, o)], s, p, o)
        for s, p, o, period in ex["edges"]
        if _admitted(period, ex["as_of"])
    ]

    def incident(node: str) -> list[tuple[int, str, str]]:
        """(relation id, predicate, the other end) of the admitted relations on ``node``."""
        return [(i, p, o if s == node else s) for i, s, p, o in links if node in (s, o)]

    own = 0
    for n in ex["named"]:
        for _, p, other in incident(n):
            if _mask(NAMES_PREDICATE[p], terms):
                own |= _mask(NAMES_PREDICATE[p] | NAMES_TYPE[kind[other]], terms)
    out: set[Row] = set()

    def walk(
        at: str,
        path: list[int],
        masks: list[int],
        seen: int,
        loose: int,
        last: bool,
        visited: set[str],
    ) -> None:  # noqa: E501
        ends = _mask(NAMES_TYPE[kind[at]], terms)
        if len(path) >= 2 and (last or ends & ~seen) and (seen | ends) & ~own:
            out.add((tuple(path), tuple(masks), ends, at in ex["named"]))
        if len(path) == ex["hops"]:
            return
        for i, p, other in incident(at):
            mask = _mask(NAMES_PREDICATE[p], terms)
            adds = bool(mask & ~seen)
            if other in visited or (not adds and loose):
                continue
            walk(
                other,
                [*path, i],
                [*masks, mask],
                seen | mask,
                loose + (not adds),
                adds,
                visited | {other},
            )

    for n in ex["named"]:
        walk(n, [], [], 0, 0, False, {n})
    return out


async def _write(r: Realm, ex: dict[str, Any]) -> tuple[str, dict[tuple[str, str, str], int]]:
    r.n += 1
    space = f"x{r.n}"
    g = r.graph
    entities = [ent(n, t) for n, t in zip(NODES, ex["types"], strict=True)]
    facts = [rel(s, p, o, vf=vf, vt=vt) for s, p, o, (vf, vt) in ex["edges"]]
    await write_doc(g, "graph.md", [("graph", entities, facts)], space=space)
    schema = sql.Identifier(g.info.schema)
    rows = await (
        await g.conn.execute(
            sql.SQL(
                "SELECT r.id, s.name, r.predicate, o.name FROM {s}.relations r"
                " JOIN {s}.entities s ON s.id = r.subject_id"
                " JOIN {s}.entities o ON o.id = r.object_id WHERE r.space = %s"
            ).format(s=schema),
            (space,),
        )
    ).fetchall()
    return space, {(s, p, o): int(i) for i, s, p, o in rows}


async def _read(r: Realm, space: str, ex: dict[str, Any]) -> set[Row]:
    """The chains read as retrieval reads them: the focus read gives the terms the named
    entities' own relations explain, the chain read starts at the named entities."""
    scope = Scope(space, channels.valid_days(ex["as_of"]), None, False, None)
    schema = r.graph.info.schema
    params = channels.parameters(
        scope,
        fnames=[name_key(n) for n in ex["named"]],
        froles=[None] * len(ex["named"]),
        fterms=[websearch_text((t,)) for t in ex["terms"]],
        symmetric=[],
        hops=ex["hops"],
        cap=1000,
        fanout=1000,
        depth=100_000,
    )
    conn = r.graph.conn
    focus = await (
        await conn.execute(channels.relations_by_focus(schema, scope), params)
    ).fetchall()
    named = await (
        await conn.execute(
            sql.SQL("SELECT id FROM {}.entities WHERE space = %s AND name = ANY(%s)").format(
                sql.Identifier(schema)
            ),
            (space, ex["named"]),
        )
    ).fetchall()
    params |= {"own": int(focus[0][2]) if focus else 0, "named": [int(x[0]) for x in named]}
    rows = await (await conn.execute(channels.relation_chains(schema, scope), params)).fetchall()
    return {(tuple(a), tuple(b), int(c), bool(d)) for a, b, c, d in rows}


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ex=example)
def test_the_chain_read_returns_exactly_the_chains_the_rules_admit(
    realm: tuple[asyncio.AbstractEventLoop, Realm], ex: dict[str, Any]
) -> None:
    loop, r = realm

    async def run() -> None:
        space, ids = await _write(r, ex)
        assert len(ids) == len(ex["edges"])
        got = await _read(r, space, ex)
        assert got == model(ex, ids), ex

    loop.run_until_complete(run())
