"""query_data against a realm written through the real writer: modes, channels, temporal
filters and space isolation (paper §5.4, §7; DESIGN invariant 9)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.schemas.changes import GraphChange
from tidegraph.schemas.errors import InvalidNameError
from tidegraph.schemas.names import validate_space
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, HashEmbedder, ent, rel
from query_helpers import api_client, open_pool, query_data, triples, write_doc

pytestmark = pytest.mark.postgres

CONFIG = RealmConfig(embedder="hashing:8", exclusive_groups=(frozenset({"ally_of", "enemy_of"}),))


class Built:
    """The realm every test here reads, and the belief instants worth asking about."""

    def __init__(self, realm: str, before: datetime, after: datetime) -> None:
        self.realm = realm
        self.before_supersession = before
        self.after_supersession = after


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture(scope="module")
async def built(pg_dsn: str) -> Built:
    import uuid

    realm = "q" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, realm, CONFIG)
        ada, babbage, engine = (
            ent("Ada Lovelace"),
            ent("Charles Babbage"),
            ent("Analytical Engine", "Machine"),
        )
        await write_doc(
            g,
            "bio/ada.md",
            [
                (
                    "Ada Lovelace worked with Charles Babbage on the Analytical Engine.",
                    [ada, babbage, engine],
                    [
                        rel("Ada Lovelace", "worked_with", "Charles Babbage"),
                        rel("Charles Babbage", "designed", "Analytical Engine", vf="1834"),
                    ],
                ),
                (
                    "Ada Lovelace was married to William King from 1835 to 1852.",
                    [ada, ent("William King")],
                    [rel("Ada Lovelace", "married_to", "William King", vf="1835", vt="1852")],
                ),
            ],
        )
        await write_doc(
            g,
            "bio/mary.md",
            [
                (
                    "Mary Somerville mentored Ada Lovelace; she never worked with Babbage.",
                    [ent("Mary Somerville"), ada, babbage],
                    [
                        rel("Mary Somerville", "mentored", "Ada Lovelace"),
                        rel("Mary Somerville", "worked_with", "Charles Babbage", negated=True),
                    ],
                ),
            ],
        )
        await write_doc(
            g,
            "saga/1.md",
            [
                (
                    "Arthur was an ally of Mordred.",
                    [ent("Arthur"), ent("Mordred")],
                    [rel("Arthur", "ally_of", "Mordred")],
                ),
            ],
            order_key="0001",
        )
        before = g.clock
        await write_doc(
            g,
            "saga/2.md",
            [
                (
                    "Arthur became the enemy of Mordred.",
                    [ent("Arthur"), ent("Mordred")],
                    [rel("Arthur", "enemy_of", "Mordred")],
                ),
            ],
            order_key="0002",
        )
        after = g.clock
        # Two spaces with a two-hop chain each; names overlap on purpose.
        for space, names in (
            ("alpha", ("Alpha One", "Alpha Two", "Gamma Hub")),
            ("beta", ("Beta One", "Beta Two", "Gamma Hub")),
        ):
            a, b, c = names
            await write_doc(
                g,
                f"{space}/chain.md",
                [
                    (
                        f"{a} knows {b}. {b} knows {c}. Part XK-{space}-9.",
                        [ent(a), ent(b), ent(c)],
                        [rel(a, "knows", b), rel(b, "knows", c), rel(c, f"tagged_{space}", a)],
                    ),
                ],
                space=space,
            )
    return Built(realm, before, after)


@pytest.fixture
async def client(pool: AsyncConnectionPool[Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(pool) as c:
        yield c


async def test_mix_combines_entities_chunks_and_three_channels(
    client: httpx.AsyncClient, built: Built
) -> None:
    out = await query_data(client, built.realm, query="Who worked with Charles Babbage?")
    names = {e["name"] for e in out["entities"]}
    assert "Charles Babbage" in names
    assert [e for e in out["entities"] if e["name"] == "Charles Babbage"][0]["matched"] == "name"
    rels = {(r["subject"], r["predicate"], r["object"]): r for r in out["relations"]}
    worked = rels[("Ada Lovelace", "worked_with", "Charles Babbage")]
    assert worked["hop"] == 1 and "traversal" in worked["channels"]
    assert worked["doc_keys"] == ["bio/ada.md"]
    assert {
        "id",
        "negated",
        "valid_from",
        "valid_to",
        "t_created",
        "t_expired",
        "superseded_by",
        "weight",
        "channels",
        "doc_keys",
    } <= set(worked)
    assert any("fulltext" in r["channels"] for r in out["relations"])
    assert any("similarity" in r["channels"] for r in out["relations"])
    # mention expansion: both passages naming Babbage are reached
    docs = {c["doc_key"] for c in out["chunks"] if "mentions" in c["channels"]}
    assert {"bio/ada.md", "bio/mary.md"} <= docs
    assert all(c["citation"].startswith(c["doc_key"] + "#") for c in out["chunks"])
    assert out["stats"]["mode"] == "mix" and out["stats"]["seeds"] >= 1


async def test_two_hops_reach_the_chain_and_one_hop_does_not(
    client: httpx.AsyncClient, built: Built
) -> None:
    # top_k=1: the named entity is the only seed (in a realm this small every entity is
    # among the ten nearest by vector, and every seed is hop 0).
    two = await query_data(
        client, built.realm, query="Mary Somerville", mode="local", space="default", top_k=1
    )
    hops = {(r["subject"], r["predicate"], r["object"]): r["hop"] for r in two["relations"]}
    assert hops[("Mary Somerville", "mentored", "Ada Lovelace")] == 1
    assert hops[("Ada Lovelace", "married_to", "William King")] == 2
    one = await query_data(
        client,
        built.realm,
        query="Mary Somerville",
        hops=1,
        top_k=1,
        relation_types=["mentored", "married_to"],
    )
    walked = {
        (r["subject"], r["predicate"], r["object"])
        for r in one["relations"]
        if "traversal" in r["channels"]
    }
    assert walked == {("Mary Somerville", "mentored", "Ada Lovelace")}
    assert {r["predicate"] for r in one["relations"]} <= {"mentored", "married_to"}


async def test_relation_types_apply_inside_the_walk(
    client: httpx.AsyncClient, built: Built
) -> None:
    # Without `mentored` the walk cannot leave Mary towards Ada, so married_to (two hops
    # away through a mentored edge) is never reached by traversal.
    out = await query_data(
        client, built.realm, query="Mary Somerville", top_k=1, relation_types=["married_to"]
    )
    walked = [r for r in out["relations"] if "traversal" in r["channels"]]
    assert walked == []
    assert {r["predicate"] for r in out["relations"]} <= {"married_to"}


async def test_denials_are_marked(client: httpx.AsyncClient, built: Built) -> None:
    out = await query_data(client, built.realm, query="Mary Somerville Charles Babbage")
    denied = [r for r in out["relations"] if r["negated"]]
    assert [(r["subject"], r["object"]) for r in denied] == [("Mary Somerville", "Charles Babbage")]


@pytest.mark.parametrize(
    ("as_of", "present"),
    [
        ("1830-06-01", False),
        ("1840-01-01", True),
        ("1852-12-31", True),
        ("1860-01-01", False),
        # a year and a year-month, as valid_from holds them: the whole year or month
        ("1834", False),
        ("1835", True),
        ("1852-12", True),
        ("1853", False),
    ],
)
async def test_as_of_before_inside_and_after_a_stated_period(
    client: httpx.AsyncClient, built: Built, as_of: str, present: bool
) -> None:
    out = await query_data(client, built.realm, query="Ada Lovelace William King", as_of=as_of)
    got = triples(out)
    assert (("Ada Lovelace", "married_to", "William King") in got) is present
    # undated relations hold at every date
    assert ("Ada Lovelace", "worked_with", "Charles Babbage") in got


async def test_as_believed_at_before_and_after_a_supersession(
    client: httpx.AsyncClient, built: Built
) -> None:
    ask = {"query": "Arthur Mordred", "relation_types": ["ally_of", "enemy_of"]}
    old = await query_data(
        client, built.realm, **ask, as_believed_at=built.before_supersession.isoformat()
    )
    assert triples(old) == {("Arthur", "ally_of", "Mordred")}
    new = await query_data(
        client, built.realm, **ask, as_believed_at=built.after_supersession.isoformat()
    )
    assert triples(new) == {("Arthur", "enemy_of", "Mordred")}
    never = await query_data(
        client,
        built.realm,
        **ask,
        as_believed_at=(built.before_supersession - timedelta(days=1)).isoformat(),
    )
    assert never["relations"] == [] and never["chunks"] == []
    now = await query_data(client, built.realm, **ask)
    assert triples(now) == {("Arthur", "enemy_of", "Mordred")}


async def test_superseded_only_with_include_superseded(
    client: httpx.AsyncClient, built: Built
) -> None:
    ask = {"query": "Arthur Mordred", "relation_types": ["ally_of", "enemy_of"]}
    both = await query_data(client, built.realm, **ask, include_superseded=True)
    by_pred = {r["predicate"]: r for r in both["relations"]}
    assert set(by_pred) == {"ally_of", "enemy_of"}
    assert by_pred["ally_of"]["status"] == "superseded"
    assert by_pred["ally_of"]["superseded_by"] == by_pred["enemy_of"]["id"]
    assert by_pred["ally_of"]["t_expired"] is not None
    for mode in ("global", "hybrid", "local"):
        out = await query_data(client, built.realm, **ask, mode=mode)
        assert "ally_of" not in {r["predicate"] for r in out["relations"]}, mode


async def test_space_isolation_through_every_channel(
    client: httpx.AsyncClient, built: Built
) -> None:
    # The query names entities of both spaces and a part number of beta: the walk, the
    # similarity search and the full-text search would all reach beta if unscoped.
    q = "Alpha One, Beta One, Gamma Hub: XK-beta-9 knows tagged"
    for mode in ("mix", "local", "hybrid", "global", "naive"):
        out = await query_data(client, built.realm, query=q, space="alpha", mode=mode, hops=2)
        assert {r["space"] for r in out["relations"]} <= {"alpha"}, mode
        assert {c["space"] for c in out["chunks"]} <= {"alpha"}, mode
        assert {e["space"] for e in out["entities"]} <= {"alpha"}, mode
    walk = await query_data(client, built.realm, query="Alpha One", space="alpha", top_k=1)
    reached = {
        (r["subject"], r["object"]): r["hop"]
        for r in walk["relations"]
        if "traversal" in r["channels"]
    }
    assert reached[("Alpha Two", "Gamma Hub")] == 2
    both = await query_data(client, built.realm, query=q, space="*", relation_top_k=50)
    beta = [r for r in both["relations"] if r["space"] == "beta"]
    assert beta
    seen = {c for r in beta for c in r["channels"]}
    assert {"traversal", "similarity", "fulltext"} <= seen
    assert {c["space"] for c in both["chunks"]} >= {"alpha", "beta"} or any(
        c["space"] == "beta" for c in both["chunks"]
    )


def test_a_write_side_wildcard_is_impossible() -> None:
    with pytest.raises(InvalidNameError):
        validate_space("*")
    with pytest.raises(ValueError, match="wildcard"):
        GraphChange.model_validate(
            {
                "id": "r:1:0",
                "realm": "r",
                "space": "*",
                "seq": 1,
                "belief_time": "2026-01-01T00:00:00Z",
                "kind": "document_indexed",
                "doc_key": "d",
            }
        )


async def test_every_mode_answers_and_unknown_mode_is_422(
    client: httpx.AsyncClient, built: Built
) -> None:
    q = "Ada Lovelace and the Analytical Engine"
    shapes = {}
    for mode in ("mix", "local", "global", "hybrid", "naive", "bypass"):
        out = await query_data(client, built.realm, query=q, mode=mode)
        assert set(out) == {"entities", "relations", "chunks", "communities", "stats"}
        shapes[mode] = tuple(bool(out[k]) for k in ("entities", "relations", "chunks"))
    assert shapes["mix"] == (True, True, True)
    assert shapes["local"] == (True, True, True)
    assert shapes["hybrid"] == (True, True, True)
    assert shapes["global"] == (False, True, False)
    assert shapes["naive"] == (False, False, True)
    assert shapes["bypass"] == (False, False, False)
    bad = await client.post(
        f"/v1/realms/{built.realm}/query_data", json={"query": q, "mode": "fancy"}
    )
    assert bad.status_code == 422
    assert set(bad.json()) == {"error"} and bad.json()["error"]["code"] == "invalid_request"
    assert "mode" in bad.json()["error"]["message"]


async def test_naive_ranks_the_exact_passage_first(client: httpx.AsyncClient, built: Built) -> None:
    text = "Arthur became the enemy of Mordred."
    out = await query_data(client, built.realm, query=text, mode="naive", top_k=3)
    assert out["chunks"][0]["text"] == text and out["chunks"][0]["doc_key"] == "saga/2.md"


async def test_quota_fusion_is_available(client: httpx.AsyncClient, built: Built) -> None:
    out = await query_data(
        client,
        built.realm,
        query="Charles Babbage",
        fusion="quota",
        similarity_share=0.25,
        relation_top_k=8,
    )
    assert out["stats"]["fusion"] == "quota"
    assert 0 < len(out["relations"]) <= 8


async def test_global_ranks_communities_and_warns_when_stale(
    pool: AsyncConnectionPool[Any],
    client: httpx.AsyncClient,
    unique_name: Callable[[str], str],
    pg_dsn: str,
) -> None:
    realm = unique_name("c")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, realm, CONFIG)
        before = await query_data(client, realm, query="themes", mode="global")
        assert before["communities"] == []  # degrades to relation ranking, never fails
        await write_doc(
            g,
            "d",
            [
                (
                    "Rome fought Carthage.",
                    [ent("Rome"), ent("Carthage")],
                    [rel("Rome", "enemy_of", "Carthage")],
                )
            ],
        )
        [vec] = await HashEmbedder().embed(["broad themes"])
        s = sql.Identifier(g.info.schema)
        for title, rating, size in (("Niche", 1.0, 3), ("Wars of antiquity", 9.0, 40)):
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {}.communities (space, title, summary, findings, rating,"
                    " size, built_at, t_created, embedding) VALUES ('default', %s, %s,"
                    " jsonb_build_array(jsonb_build_object('summary', %s::text)), %s, %s,"
                    " '2000-01-01Z', '2000-01-01Z', %s::vector)"
                ).format(s),
                (title, f"{title} summary", f"{title} finding", rating, size, str(vec)),
            )
    out = await query_data(client, realm, query="broad themes", mode="global")
    assert [c["title"] for c in out["communities"]] == ["Wars of antiquity", "Niche"]
    assert out["communities"][0]["findings"] == ["Wars of antiquity finding"]
    assert any("predate" in w for w in out["stats"]["warnings"])
    assert triples(out) == {("Rome", "enemy_of", "Carthage")}
