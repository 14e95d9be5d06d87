"""Query decomposition (paper §8.5, off by default): the lexical splitter, the merge, and
decomposed retrieval through ``query_data`` on PostgreSQL."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from tidegraph.query_service.decompose import MAX_PARTS, merge, sub_questions
from tidegraph.schemas.api import EntityOut, QueryDataResponse, RelationOut
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, query_data, write_doc


@pytest.mark.parametrize(
    ("query", "parts"),
    [
        (
            "When did Ada Lovelace meet Charles Babbage, and when did Mary Somerville publish?",
            ["When did Ada Lovelace meet Charles Babbage?", "when did Mary Somerville publish?"],
        ),
        ("Where was Ada born? Where did she die?", ["Where was Ada born?", "Where did she die?"]),
        (
            "Did Ada meet Babbage before Mary wrote Connexion?",
            ["Did Ada meet Babbage?", "Mary wrote Connexion?"],
        ),
        ("What did Charles Babbage design?", None),
        ("Who worked with Ada and Babbage?", None),  # one question about two names
        ("Which companies did Orvale acquire and when?", None),  # "when" alone is no question
        ("Tell me about Ada, Babbage and Mary", None),
    ],
)
def test_sub_questions(query: str, parts: list[str] | None) -> None:
    assert sub_questions(query) == (parts or [query])


WORDS = ["Ada", "met", "when", "did", "and", "or", "before", "Mary", "wrote", "it", "who"]
SEPARATORS = [" ", " ", " ", ", ", "? ", "; "]


CONNECTIVES = {"and", "but", "while", "or", "before", "after"}


@given(st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SEPARATORS)), max_size=20))
def test_splitting_drops_only_the_connectives(tokens: list[tuple[str, str]]) -> None:
    query = "".join(w + s for w, s in tokens).strip() or "Ada"
    parts = sub_questions(query)
    assert 1 <= len(parts) <= MAX_PARTS
    words = iter(re.findall(r"\w+", query))
    for word in re.findall(r"\w+", " ".join(parts)):  # in order, skipping connectives only
        skipped = next(w for w in words if w == word or w.lower() not in CONNECTIVES)
        assert skipped == word, (query, parts)
    if len(parts) < MAX_PARTS:
        assert all(w.lower() in CONNECTIVES for w in words), (query, parts)


T = datetime(2026, 1, 1, tzinfo=UTC)


def _e(i: int, matched: str) -> EntityOut:
    return EntityOut(
        id=str(i), space="default", name=f"E{i}", type="Person", description="", aliases=[],
        matched=matched, score=1.0,
    )  # fmt: skip


def _r(i: int) -> RelationOut:
    return RelationOut(
        id=str(i), space="default", subject="A", predicate="p", object=f"B{i}", negated=False,
        valid_from=None, valid_to=None, t_created=T, t_expired=None, superseded_by=None,
        status="current", weight=1, hop=1, channels=[], doc_keys=[], score=1.0,
    )  # fmt: skip


def _result(entities: list[EntityOut], relations: list[RelationOut]) -> QueryDataResponse:
    return QueryDataResponse(
        entities=entities, relations=relations, chunks=[], communities=[], stats={}
    )


def test_merge_alternates_parts_and_keeps_named_entities_first() -> None:
    a = _result([_e(1, "name"), _e(2, "vector")], [_r(1), _r(2), _r(3)])
    b = _result([_e(3, "vector"), _e(4, "name")], [_r(4), _r(2), _r(5)])
    out = merge([a, b], top_k=3, relation_top_k=4)
    assert [e.id for e in out.entities] == ["1", "4", "3"]  # E3 leads its part, E2 not
    # in both parts first, then each part's first, then the cap cuts the third places
    assert [r.id for r in out.relations] == ["2", "1", "4", "3"]


# ------------------------------------------------------------ through query_data


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture(scope="module")
async def client(pool: AsyncConnectionPool[Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(pool) as c:
        yield c


@pytest.fixture(scope="module")
async def realm(pg_dsn: str) -> str:
    """Two events, each among many other relations of the same people."""
    name = "d" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, RealmConfig(embedder="hashing:8"))
        for who, event in (
            ("Ada Lovelace", rel("Ada Lovelace", "met", "Charles Babbage", vf="1833")),
            ("Mary Somerville", rel("Mary Somerville", "wrote", "Connexion", vf="1834")),
        ):
            others = [f"{who.split()[0]} Friend {i}" for i in range(8)]
            facts = [event, *(rel(who, "visited", o) for o in others)]
            entities = [ent(who), ent(event.object), *(ent(o) for o in others)]
            await write_doc(g, f"{who}.md", [(f"{who} story", entities, facts)])
    return name


QUERY = "When did Ada Lovelace meet Charles Babbage, and when did Mary Somerville write Connexion?"


@pytest.mark.postgres
async def test_decomposed_retrieval_merges_each_parts_answer(
    client: httpx.AsyncClient, realm: str
) -> None:
    body = {"query": QUERY, "relation_top_k": 6, "mode": "mix"}
    plain = await query_data(client, realm, **body)
    assert "decomposition" not in plain["stats"]  # off by default
    out = await query_data(client, realm, **body, decompose=True)
    parts = out["stats"]["decomposition"]
    assert parts == [
        "When did Ada Lovelace meet Charles Babbage?",
        "when did Mary Somerville write Connexion?",
    ]
    asked = [await query_data(client, realm, **{**body, "query": p}) for p in parts]
    lines = {(r["subject"], r["predicate"], r["object"]) for r in out["relations"]}
    assert ("Ada Lovelace", "met", "Charles Babbage") in lines
    assert ("Mary Somerville", "wrote", "Connexion") in lines
    for each in asked:  # each part's best relations reach the merged answer
        top = each["relations"][:2]
        assert {r["id"] for r in top} <= {r["id"] for r in out["relations"]}
    every = {r["id"] for each in asked for r in each["relations"]}
    assert {r["id"] for r in out["relations"]} <= every and len(out["relations"]) == 6
    names = {e["name"] for e in out["entities"] if e["matched"] == "name"}
    assert {"Ada Lovelace", "Charles Babbage", "Mary Somerville", "Connexion"} <= names
    assert len(out["stats"]["parts"]) == 2


@pytest.mark.postgres
async def test_a_single_question_is_retrieved_as_usual(
    client: httpx.AsyncClient, realm: str
) -> None:
    body = {"query": "When did Ada Lovelace meet Charles Babbage?", "relation_top_k": 6}
    out = await query_data(client, realm, **body, decompose=True)
    assert out["stats"]["decomposition"] == [body["query"]]
    plain = await query_data(client, realm, **body)
    assert [r["id"] for r in out["relations"]] == [r["id"] for r in plain["relations"]]
