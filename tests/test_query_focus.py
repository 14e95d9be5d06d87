"""Answers rank the relation the question asks about first, in the role it asks about
(the predicate focus), on the demo corpus and on a corpus of hub entities; the relation cap
follows the request; weak vector matches are not reported as entities."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.infra.package_files import sample_corpus
from tidegraph.query_service.focus import find_word, question_focus
from tidegraph.schemas.realm_config import preset

from graph_helpers import GraphHarness
from query_helpers import api_client, index_corpus, open_pool, query_data

pytestmark = pytest.mark.postgres

DEMO = sample_corpus()
RELATION_MODES = ("mix", "local", "global", "hybrid")


_TEXT = st.text(alphabet="ab _-é1.", max_size=12)


@given(_TEXT, _TEXT)
def test_whole_word_search_finds_what_the_regular_expression_finds(text: str, phrase: str) -> None:
    expected = re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) if phrase.strip() else None
    assert find_word(text, phrase) == (expected.span() if expected else None)


def test_roles_follow_word_order_and_the_passive() -> None:
    f = question_focus("What did Charles Babbage design?", ["charles babbage"])
    assert f.terms == ("design",) and f.roles == {"charles babbage": "subject"}
    assert question_focus("Who mentored Ada?", ["ada"]).roles == {"ada": "object"}
    assert question_focus("What was designed by Ada?", ["ada"]).roles == {"ada": "subject"}
    assert question_focus("Tell me about Ada", ["ada"]).roles == {"ada": None}


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


async def _corpus_realm(dsn: str, folder: Path) -> str:
    realm = "f" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        config = preset("narrative", extractor="rules", embedder="hashing:384")
        graph = await GraphHarness.create(conn, realm, config)
        graph.embedder = HashingEmbedder(384)  # type: ignore[assignment]
        assert await index_corpus(graph, folder) > 0
    return realm


@pytest.fixture(scope="module")
async def demo(pg_dsn: str) -> str:
    return await _corpus_realm(pg_dsn, DEMO)


@pytest.fixture(scope="module")
async def client(pool: AsyncConnectionPool[Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(pool, embedder=HashingEmbedder(384)) as c:
        yield c


def _lines(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["subject"], r["predicate"], r["object"]) for r in result["relations"]]


@pytest.mark.parametrize("mode", RELATION_MODES)
async def test_what_did_babbage_design_ranks_designed_first(
    client: httpx.AsyncClient, demo: str, mode: str
) -> None:
    out = await query_data(client, demo, query="What did Charles Babbage design?", mode=mode)
    lines = _lines(out)
    assert set(lines[:2]) == {
        ("Charles Babbage", "designed", "Difference Engine"),
        ("Charles Babbage", "designed", "Analytical Engine"),
    }, lines
    assert all("predicate" in r["channels"] for r in out["relations"][:2])


@pytest.mark.parametrize("mode", RELATION_MODES)
async def test_who_worked_with_babbage_ranks_worked_with_first(
    client: httpx.AsyncClient, demo: str, mode: str
) -> None:
    out = await query_data(client, demo, query="Who worked with Charles Babbage?", mode=mode)
    lines = _lines(out)
    worked = [x for x in lines if x[1] == "worked_with" and "Charles Babbage" in (x[0], x[2])]
    assert len(worked) >= 2, lines
    assert lines[: len(worked)] == worked, lines


async def test_a_question_without_a_predicate_term_keeps_fused_order(
    client: httpx.AsyncClient, demo: str
) -> None:
    out = await query_data(client, demo, query="Charles Babbage", mode="local")
    assert out["relations"] and all("predicate" not in r["channels"] for r in out["relations"])


# ------------------------------------------------------------ hubs: a corpus of our own

COMPANIES = [f"Corp{chr(65 + i)}{chr(75 + i)}" for i in range(14)]
PEOPLE = [f"Person{chr(65 + i)}{chr(80 + i)}" for i in range(8)]


def _write_hub_corpus(folder: Path) -> None:
    """Two hubs: Orvale Holdings acquires 13 companies among many other relations, and is
    itself acquired once; Mira Kessel mentors four people and was mentored by two."""
    folder.mkdir()
    texts = []
    for i, c in enumerate(COMPANIES[:13]):
        texts.append(f"Orvale Holdings acquired {c} in {1990 + i}. {c} owns Plant{i}x.")
        texts.append(f"Orvale Holdings owns Depot{i}y. Orvale Holdings supported Fund{i}z.")
    texts.append(f"{COMPANIES[13]} acquired Orvale Holdings in 2020.")
    for p in PEOPLE[:4]:
        texts.append(f"Mira Kessel mentored {p}. Mira Kessel influenced {p}.")
    for p in PEOPLE[4:6]:
        texts.append(f"{p} mentored Mira Kessel. {p} influenced Mira Kessel.")
    for p in PEOPLE[6:]:
        texts.append(f"Mira Kessel worked with {p}.")
    for i, text in enumerate(texts):
        (folder / f"doc{i:03d}.md").write_text(text + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
async def hubs(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("hubs") / "corpus"
    _write_hub_corpus(folder)
    return await _corpus_realm(pg_dsn, folder)


@pytest.mark.parametrize("mode", RELATION_MODES)
async def test_all_acquisitions_of_a_hub_lead_the_answer(
    client: httpx.AsyncClient, hubs: str, mode: str
) -> None:
    out = await query_data(
        client, hubs, query="Which companies did Orvale Holdings acquire?", mode=mode
    )
    lines = _lines(out)
    wanted = [("Orvale Holdings", "acquired", c) for c in COMPANIES[:13]]
    assert set(lines[:13]) == set(wanted), lines
    # the reverse direction (the hub being acquired) comes next, before other relations
    assert lines[13] == (COMPANIES[13], "acquired", "Orvale Holdings"), lines


@pytest.mark.parametrize(
    ("query", "first", "then"),
    [
        ("Who did Mira Kessel mentor?", PEOPLE[:4], PEOPLE[4:6]),
        ("Who mentored Mira Kessel?", PEOPLE[4:6], PEOPLE[:4]),
    ],
)
async def test_direction_is_respected(
    client: httpx.AsyncClient, hubs: str, query: str, first: list[str], then: list[str]
) -> None:
    lines = _lines(await query_data(client, hubs, query=query, mode="local"))
    other = {x[2] if x[0] == "Mira Kessel" else x[0] for x in lines[: len(first + then)]}
    head = lines[: len(first)]
    assert all(x[1].startswith("mentor") for x in lines[: len(first + then)]), lines
    assert {x[2] if x[0] == "Mira Kessel" else x[0] for x in head} == set(first), lines
    assert other == set(first + then)


async def test_the_relation_cap_follows_the_request(client: httpx.AsyncClient, hubs: str) -> None:
    q = "Orvale Holdings"
    assert len((await query_data(client, hubs, query=q))["relations"]) == 25
    assert len((await query_data(client, hubs, query=q, top_k=40))["relations"]) == 40
    assert len((await query_data(client, hubs, query=q, relation_top_k=5))["relations"]) == 5
    wide = await query_data(client, hubs, query=q, top_k=40, relation_top_k=30)
    assert len(wide["relations"]) == 30


async def test_weak_vector_matches_are_not_entities(client: httpx.AsyncClient, demo: str) -> None:
    out = await query_data(client, demo, query="What did Charles Babbage design?", top_k=50)
    vector = [e for e in out["entities"] if e["matched"] == "vector"]
    assert all(e["score"] >= 0.1 for e in vector), vector
    assert len(out["entities"]) < 50  # the rest of the realm is below the floor
    named = [e["name"] for e in out["entities"] if e["matched"] == "name"]
    assert named == ["Charles Babbage"]


def test_an_auxiliary_inverts_the_clause() -> None:
    f = question_focus("Which companies did Orvale acquire?", ["orvale"])
    assert f.roles == {"orvale": "subject"}
    assert question_focus("Who has mentored Ada?", ["ada"]).roles == {"ada": "object"}
    assert question_focus("Who has Ada mentored?", ["ada"]).roles == {"ada": "subject"}
