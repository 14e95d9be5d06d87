"""The rerank endpoint: the answer follows the endpoint's scores (passages, then relations
with the predicate focus leading), a per-request switch, the retrieval order kept with a
warning and a metric on every kind of failure, and prompt budgets applied after the
rerank — pure, then through the app on PostgreSQL against the scripted rerank server."""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from tidegraph.query_service.rerank_endpoint import (
    RerankEndpoint,
    RerankFailed,
    apply_scores,
    parse_scores,
)
from tidegraph.query_service.synthesis import render_relation
from tidegraph.schemas.api import ChunkOut, QueryDataResponse, RelationOut
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, write_doc
from rerank_server import Fault, ScriptedRerankServer

# ------------------------------------------------------------------ pure

score_st = st.floats(-1e6, 1e6, allow_nan=False)


@given(st.data(), st.integers(0, 12), st.sampled_from(["cohere", "tei"]))
def test_scores_are_read_by_index_whatever_the_order(data: Any, n: int, api: Any) -> None:
    given_scores = data.draw(st.dictionaries(st.integers(0, max(n - 1, 0)), score_st, max_size=n))
    if n == 0:
        given_scores = {}
    entries = list(given_scores.items())
    data.draw(st.randoms()).shuffle(entries)
    key = "score" if api == "tei" else "relevance_score"
    listed = [{"index": i, key: s, "document": {"text": "x"}} for i, s in entries]
    answer = listed if api == "tei" else {"results": listed, "model": "m"}
    assert parse_scores(api, answer, n) == [given_scores.get(i) for i in range(n)]


@pytest.mark.parametrize(
    "answer",
    [
        {"data": []},
        [{"index": 0, "relevance_score": 1.0}],
        {"results": "no"},
        {"results": [{"index": 3, "relevance_score": 1.0}]},
        {"results": [{"index": -1, "relevance_score": 1.0}]},
        {"results": [{"index": "0", "relevance_score": 1.0}]},
        {"results": [{"index": True, "relevance_score": 1.0}]},
        {"results": [{"index": 0, "relevance_score": "high"}]},
        {"results": [{"index": 0, "relevance_score": math.nan}]},
        {"results": [{"index": 0}]},
        {"results": [{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 2}]},
        {"results": [7]},
    ],
)
def test_a_malformed_answer_is_refused(answer: Any) -> None:
    with pytest.raises(RerankFailed) as caught:
        parse_scores("cohere", answer, 3)
    assert caught.value.kind == "malformed"


def _chunk(i: int) -> ChunkOut:
    return ChunkOut(
        id=str(i),
        space="default",
        doc_key=f"d{i}",
        ordinal=0,
        text=f"passage {i}",
        citation=f"d{i}#0",
        channels=["similarity"],
        score=1.0,
    )


def _relation(i: int, focus: bool) -> RelationOut:
    return RelationOut(
        id=str(i),
        space="default",
        subject=f"S{i}",
        predicate="p",
        object=f"O{i}",
        negated=False,
        valid_from=None,
        valid_to=None,
        t_created="2026-01-01T00:00:00Z",  # type: ignore[arg-type]
        t_expired=None,
        status="current",
        superseded_by=None,
        weight=1,
        doc_keys=[],
        hop=1,
        channels=["predicate", "traversal"] if focus else ["traversal"],
        score=1.0,
    )


maybe_score = st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 0.5, 2.0]))


@given(
    st.lists(maybe_score, max_size=8),
    st.lists(st.tuples(st.booleans(), maybe_score), max_size=8),
)
def test_order_is_by_score_within_groups_ties_keeping_retrieval_order(
    chunk_scores: list[float | None], relation_rows: list[tuple[bool, float | None]]
) -> None:
    data = QueryDataResponse(
        entities=[],
        relations=[_relation(i, f) for i, (f, _) in enumerate(relation_rows)],
        chunks=[_chunk(i) for i in range(len(chunk_scores))],
        communities=[],
        stats={},
    )
    out = apply_scores(data, [*chunk_scores, *(s for _, s in relation_rows)])
    # the reference: a pairwise rule, not a sort key — x precedes y iff it is in an earlier
    # group, or scored above y (an unscored one below every scored one), or equal and earlier
    for items, scores, groups in (
        (out.chunks, chunk_scores, [0] * len(chunk_scores)),
        (out.relations, [s for _, s in relation_rows], [0 if f else 1 for f, _ in relation_rows]),
    ):
        positions = [int(x.id) for x in items]
        assert sorted(positions) == list(range(len(scores)))
        for x in items:
            assert x.rerank_score == scores[int(x.id)]
        for a, b in zip(positions, positions[1:], strict=False):
            assert _before(a, b, scores, groups), (positions, scores, groups)


def _before(a: int, b: int, scores: list[float | None], groups: list[int]) -> bool:
    if groups[a] != groups[b]:
        return groups[a] < groups[b]
    sa, sb = scores[a], scores[b]
    if sa is None or sb is None:
        return sb is None and (sa is not None or a < b)
    return sa > sb or (sa == sb and a < b)


# ------------------------------------------------------------------ through the app

Q = {"query": "What did Charles Babbage design?", "mode": "mix", "top_k": 10}


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture(scope="module")
async def realm(pg_dsn: str) -> str:
    name = "rr" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, RealmConfig(embedder="hashing:8"))
        people = [
            ent("Charles Babbage"),
            ent("Analytical Engine", "Machine"),
            ent("Difference Engine", "Machine"),
            ent("Ada Lovelace"),
        ]
        facts = [
            rel("Charles Babbage", "designed", "Analytical Engine", vf="1834"),
            rel("Charles Babbage", "designed", "Difference Engine", vf="1822"),
            rel("Ada Lovelace", "worked_with", "Charles Babbage"),
            rel("Ada Lovelace", "wrote", "Analytical Engine"),
            rel("Ada Lovelace", "translated", "Analytical Engine"),
        ]
        for i in range(5):
            text = f"Charles Babbage and the engines, passage {i}: " + f"detail {i}. " * 20
            await write_doc(g, f"doc{i}.md", [(text, people, facts)])
    return name


async def _post(client: httpx.AsyncClient, realm: str, **body: Any) -> dict[str, Any]:
    r = await client.post(f"/v1/realms/{realm}/query_data", json={**Q, **body})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _ids(items: list[dict[str, Any]]) -> list[str]:
    return [x["id"] for x in items]


def _focus_first_reversed(relations: list[dict[str, Any]]) -> list[str]:
    focus = [r["id"] for r in relations if "predicate" in r["channels"]]
    rest = [r["id"] for r in relations if "predicate" not in r["channels"]]
    return focus[::-1] + rest[::-1]


@pytest.mark.postgres
async def test_the_answer_follows_the_endpoint_and_carries_its_scores(
    pool: AsyncConnectionPool[Any],
    realm: str,
    rerank_server: ScriptedRerankServer,
    make_reranker: Callable[..., RerankEndpoint],
) -> None:
    rerank_server.reverse = True  # later documents score higher: the order turns round
    async with api_client(pool, reranker=make_reranker()) as client:
        before = await _post(client, realm, rerank=False)
        assert rerank_server.requests == []
        after = await _post(client, realm)
    assert len(before["chunks"]) == 5 and len(before["relations"]) >= 4
    assert any("predicate" in r["channels"] for r in before["relations"])
    assert _ids(after["chunks"]) == _ids(before["chunks"])[::-1]
    assert _ids(after["relations"]) == _focus_first_reversed(before["relations"])
    assert all(x["rerank_score"] is None for x in before["chunks"] + before["relations"])

    [(path, headers, body)] = rerank_server.requests
    documents = [c["text"] for c in before["chunks"]] + [
        render_relation(RelationOut.model_validate(r)) for r in before["relations"]
    ]
    assert path == "/v1/rerank" and headers["authorization"] == "Bearer rk-scripted"
    assert body == {
        "model": "scripted-rerank",
        "query": Q["query"],
        "documents": documents,
        "top_n": len(documents),
    }
    sent = {text: i for i, text in enumerate(documents)}
    for c in after["chunks"]:
        assert c["rerank_score"] == rerank_server.score(c["text"], sent[c["text"]])
    stats = after["stats"]["rerank_endpoint"]
    assert stats["outcome"] == "reranked" and stats["documents"] == len(documents)
    assert not any("rerank" in w for w in after["stats"]["warnings"])


@pytest.mark.postgres
async def test_the_predicate_focus_leads_whatever_the_scores(
    pool: AsyncConnectionPool[Any],
    realm: str,
    rerank_server: ScriptedRerankServer,
    make_reranker: Callable[..., RerankEndpoint],
) -> None:
    rerank_server.rules = {"--[designed]-->": -5.0, "--[translated]-->": 9.0}
    async with api_client(pool, reranker=make_reranker()) as client:
        after = await _post(client, realm)
    predicates = [r["predicate"] for r in after["relations"]]
    assert predicates[:2] == ["designed", "designed"]
    assert predicates[2] == "translated"  # first of the rest: it scored highest


@pytest.mark.postgres
async def test_rerank_is_a_per_request_switch(
    pool: AsyncConnectionPool[Any],
    realm: str,
    rerank_server: ScriptedRerankServer,
    make_reranker: Callable[..., RerankEndpoint],
) -> None:
    async with api_client(pool) as client:  # no endpoint configured
        plain = await _post(client, realm)
        assert "rerank_endpoint" not in plain["stats"]
        refused = await client.post(f"/v1/realms/{realm}/query_data", json={**Q, "rerank": True})
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "reranker_not_configured"
    async with api_client(pool, reranker=make_reranker()) as client:
        off = await _post(client, realm, rerank=False)
        on = await _post(client, realm, rerank=True)
    assert _ids(off["chunks"]) == _ids(plain["chunks"])
    assert "rerank_endpoint" not in off["stats"]
    assert on["stats"]["rerank_endpoint"]["outcome"] == "reranked"
    assert len(rerank_server.requests) == 1


FAILURES = [
    pytest.param(Fault.hang(), "timeout", id="hang"),
    pytest.param(Fault.delay(2.0), "timeout", id="slow"),
    pytest.param(Fault.http(500), "error", id="http-500"),
    pytest.param(Fault.http(429), "error", id="http-429"),
    pytest.param(Fault.http(401), "error", id="http-401"),
    pytest.param(Fault.raw(b"<html>busy</html>"), "malformed", id="not-json"),
    pytest.param(Fault.raw(b'{"results": [{"index": 0, "rel'), "malformed", id="cut-off"),
    pytest.param(Fault.json({"data": []}), "malformed", id="wrong-shape"),
    pytest.param(
        Fault.json({"results": [{"index": 999, "relevance_score": 1.0}]}),
        "malformed",
        id="index-out-of-range",
    ),
    pytest.param(
        Fault.json(
            {"results": [{"index": 1, "relevance_score": 1}, {"index": 1, "relevance_score": 0}]}
        ),
        "malformed",
        id="index-twice",
    ),
    pytest.param(
        Fault.raw(b'{"results": [{"index": 0, "relevance_score": NaN}]}'),
        "malformed",
        id="nan",
    ),
]


@pytest.mark.postgres
@pytest.mark.parametrize(("fault", "kind"), FAILURES)
async def test_a_failing_endpoint_leaves_the_retrieval_order(
    pool: AsyncConnectionPool[Any],
    realm: str,
    rerank_server: ScriptedRerankServer,
    make_reranker: Callable[..., RerankEndpoint],
    fault: Fault,
    kind: str,
) -> None:
    rerank_server.reverse = True
    async with api_client(pool, reranker=make_reranker(timeout=0.5)) as client:
        before = await _post(client, realm, rerank=False)
        rerank_server.enqueue(fault)
        after = await _post(client, realm)
        metrics = (await client.get("/metrics")).text
    _assert_fallback(before, after, kind, metrics)


@pytest.mark.postgres
async def test_an_unreachable_endpoint_leaves_the_retrieval_order(
    pool: AsyncConnectionPool[Any], realm: str, make_reranker: Callable[..., RerankEndpoint]
) -> None:
    with ScriptedRerankServer() as gone:
        url = gone.url
    async with api_client(pool, reranker=make_reranker(url=url)) as client:
        before = await _post(client, realm, rerank=False)
        after = await _post(client, realm)
        metrics = (await client.get("/metrics")).text
    _assert_fallback(before, after, "error", metrics)


def _assert_fallback(
    before: dict[str, Any], after: dict[str, Any], kind: str, metrics: str
) -> None:
    assert _ids(after["chunks"]) == _ids(before["chunks"])
    assert _ids(after["relations"]) == _ids(before["relations"])
    assert all(x["rerank_score"] is None for x in after["chunks"] + after["relations"])
    assert after["stats"]["rerank_endpoint"]["outcome"] == kind
    [warning] = [w for w in after["stats"]["warnings"] if w.startswith("rerank endpoint")]
    assert "retrieval order" in warning
    assert f'tidegraph_rerank_fallbacks_total{{reason="{kind}"}} 1.0' in metrics
    assert 'tidegraph_rerank_seconds_count{outcome="fallback"} 1.0' in metrics


class RecordingChat:
    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def __call__(self, system: str, prompt: str) -> str:
        self.prompts.append(prompt)
        return "An answer [1]."


@pytest.mark.postgres
async def test_prompt_budgets_apply_after_the_rerank(
    pool: AsyncConnectionPool[Any],
    realm: str,
    rerank_server: ScriptedRerankServer,
    make_reranker: Callable[..., RerankEndpoint],
) -> None:
    rerank_server.reverse = True
    chat = RecordingChat()
    async with api_client(pool, chat=chat, reranker=make_reranker()) as client:
        plain = await _post(client, realm, rerank=False)
        one_passage = len(plain["chunks"][0]["text"]) // 4 + 5
        longest = max(
            len(render_relation(RelationOut.model_validate(x))) for x in plain["relations"]
        )
        budgets = {"passages": one_passage, "relations": longest // 4 + 1}
        r = await client.post(f"/v1/realms/{realm}/query", json={**Q, "token_budgets": budgets})
    assert r.status_code == 200, r.text
    body = r.json()
    last = plain["chunks"][-1]  # first after the rerank, the only passage that fits
    assert [ref["chunk_id"] for ref in body["references"]] == [last["id"]]
    assert body["prompt"]["blocks"]["passages"]["prompt_items"] == 1
    prompt = chat.prompts[-1]
    assert last["text"][:60] in prompt and plain["chunks"][0]["text"][:60] not in prompt
    reranked_first = body["data"]["relations"][0]
    assert render_relation(RelationOut.model_validate(reranked_first)) in prompt


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("mode", "chunks", "relations"),
    [
        ("mix", True, True),
        ("local", True, True),
        ("hybrid", True, True),
        ("global", False, True),
        ("naive", True, False),
        ("bypass", False, False),
    ],
)
async def test_every_mode_with_passages_or_relations_is_reranked(
    pool: AsyncConnectionPool[Any],
    realm: str,
    rerank_server: ScriptedRerankServer,
    make_reranker: Callable[..., RerankEndpoint],
    mode: str,
    chunks: bool,
    relations: bool,
) -> None:
    rerank_server.reverse = True
    async with api_client(pool, reranker=make_reranker()) as client:
        before = await _post(client, realm, mode=mode, rerank=False)
        after = await _post(client, realm, mode=mode)
    assert bool(before["chunks"]) is chunks and bool(before["relations"]) is relations
    if not (chunks or relations):
        assert rerank_server.requests == []
        return
    [(_, _, body)] = rerank_server.requests
    assert len(body["documents"]) == len(before["chunks"]) + len(before["relations"])
    assert _ids(after["chunks"]) == _ids(before["chunks"])[::-1]
    assert _ids(after["relations"]) == _focus_first_reversed(before["relations"])


@pytest.mark.postgres
async def test_text_embeddings_inference_shape(
    pool: AsyncConnectionPool[Any],
    realm: str,
    rerank_server: ScriptedRerankServer,
    make_reranker: Callable[..., RerankEndpoint],
) -> None:
    rerank_server.api = "tei"
    rerank_server.reverse = True
    async with api_client(pool, reranker=make_reranker()) as client:
        before = await _post(client, realm, rerank=False)
        after = await _post(client, realm)
    [(path, _, body)] = rerank_server.requests
    assert path == "/rerank" and set(body) == {"query", "texts", "truncate"}
    assert _ids(after["chunks"]) == _ids(before["chunks"])[::-1]
    assert after["chunks"][0]["rerank_score"] is not None
