"""A symmetric predicate of the realm (``RealmConfig.symmetric_predicates``) is one fact
whichever way a document states it: ``query_data`` returns it once, with the documents of
both directions, and a question naming either side finds it in the role it asks about."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.schemas.realm_config import RealmConfig, preset

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, query_data, write_doc

RELATION_MODES = ("mix", "local", "global", "hybrid")
ADA, BABBAGE, MARY = "Ada Lovelace", "Charles Babbage", "Mary Somerville"


def test_presets_name_their_symmetric_predicates_and_the_config_round_trips() -> None:
    assert {"worked_with", "married_to", "ally_of", "enemy_of"} <= (
        preset("narrative").symmetric_predicates
    )
    assert "worked_with" in preset("biography").symmetric_predicates
    assert RealmConfig().symmetric_predicates == frozenset()
    config = RealmConfig(symmetric_predicates=frozenset({"worked_with", "ally_of"}))
    assert RealmConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="symmetric predicate"):
        RealmConfig(symmetric_predicates=frozenset({"Worked With"}))


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture(scope="module")
async def client(pool: AsyncConnectionPool[Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(pool, embedder=HashingEmbedder(384)) as c:
        yield c


async def _realm(dsn: str, symmetric: frozenset[str]) -> str:
    """The collaboration stated both ways in two documents and once more in another space;
    mentoring both ways (not symmetric); Mary's collaboration stated one way only."""
    name = "s" + uuid.uuid4().hex[:12]
    config = RealmConfig(embedder="hashing:384", symmetric_predicates=symmetric)
    people = [ent(ADA), ent(BABBAGE)]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, config)
        g.embedder = HashingEmbedder(384)
        await write_doc(
            g,
            "a.md",
            [
                (
                    "a",
                    [*people, ent("Sketch Notes", "Work")],
                    [rel(ADA, "worked_with", BABBAGE), rel(ADA, "wrote", "Sketch Notes")],
                )
            ],
        )
        await write_doc(
            g,
            "b.md",
            [
                (
                    "b",
                    people,
                    [
                        rel(BABBAGE, "worked_with", ADA),
                        rel(BABBAGE, "mentored", ADA),
                        rel(ADA, "mentored", BABBAGE),
                    ],
                )
            ],
        )
        await write_doc(g, "m.md", [("m", [ent(MARY), ent(ADA)], [rel(MARY, "worked_with", ADA)])])
        await write_doc(
            g, "c.md", [("c", people, [rel(BABBAGE, "worked_with", ADA)])], space="other"
        )
    return name


@pytest.fixture(scope="module")
async def symmetric(pg_dsn: str) -> str:
    return await _realm(pg_dsn, frozenset({"worked_with"}))


@pytest.fixture(scope="module")
async def ordered(pg_dsn: str) -> str:
    return await _realm(pg_dsn, frozenset())


def _worked(out: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in out["relations"] if r["predicate"] == "worked_with"]


def _pair(r: dict[str, Any]) -> frozenset[str]:
    return frozenset({r["subject"], r["object"]})


@pytest.mark.postgres
@pytest.mark.parametrize("mode", RELATION_MODES)
async def test_a_symmetric_fact_is_returned_once(
    client: httpx.AsyncClient, symmetric: str, ordered: str, mode: str
) -> None:
    q = {"query": "Who worked with Charles Babbage?", "mode": mode}
    out = await query_data(client, symmetric, **q)
    babbage = [r for r in _worked(out) if _pair(r) == {ADA, BABBAGE}]
    assert len(babbage) == 1, out["relations"]
    assert babbage[0]["doc_keys"] == ["a.md", "b.md"]
    assert out["relations"][0] is not None and _pair(out["relations"][0]) == {ADA, BABBAGE}
    mentored = [r for r in out["relations"] if r["predicate"] == "mentored"]
    assert len(mentored) in (0, 2)  # not symmetric: never merged
    # the realm that declares nothing symmetric answers both directions
    both = [
        r for r in _worked(await query_data(client, ordered, **q)) if _pair(r) == {ADA, BABBAGE}
    ]
    assert len(both) == 2


@pytest.mark.postgres
async def test_mentoring_both_ways_stays_two_facts(
    client: httpx.AsyncClient, symmetric: str
) -> None:
    out = await query_data(client, symmetric, query="Who mentored Charles Babbage?", mode="local")
    lines = {(r["subject"], r["object"]) for r in out["relations"] if r["predicate"] == "mentored"}
    assert lines == {(ADA, BABBAGE), (BABBAGE, ADA)}


@pytest.mark.postgres
async def test_every_space_still_one_fact(client: httpx.AsyncClient, symmetric: str) -> None:
    out = await query_data(
        client, symmetric, query="Who worked with Charles Babbage?", mode="local", space="*"
    )
    babbage = [r for r in _worked(out) if _pair(r) == {ADA, BABBAGE}]
    assert len(babbage) == 1 and babbage[0]["doc_keys"] == ["a.md", "b.md", "c.md"]


@pytest.mark.postgres
async def test_either_direction_fits_the_asked_role(
    client: httpx.AsyncClient, symmetric: str, ordered: str
) -> None:
    # Ada is the subject the question asks about; Mary's fact names her as object, which
    # fits a symmetric predicate but not an ordered one
    q = {"query": "Who did Ada Lovelace work with?", "mode": "local"}
    out = await query_data(client, symmetric, **q)
    # the collaboration stated both ways is one stored edge: two fitting rows, not three
    assert out["stats"]["focus"] == {"fitting": 2, "other_role": 0}
    assert {_pair(r) for r in out["relations"][:2]} == {
        frozenset({ADA, BABBAGE}),
        frozenset({ADA, MARY}),
    }, out["relations"]
    plain = await query_data(client, ordered, **q)
    assert plain["stats"]["focus"] == {"fitting": 1, "other_role": 2}
    lines = [(r["subject"], r["object"]) for r in _worked(plain)]
    assert lines[0] == (ADA, BABBAGE) and lines.index((MARY, ADA)) > 0, lines
