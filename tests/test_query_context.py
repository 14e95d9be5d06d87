"""Context assembly accounting (paper §8.3): per prompt block, items and characters
retrieved against reaching the prompt, per-block token budgets (none by default), and the
same figures as Prometheus histograms — pure, then through ``/query`` on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from tidegraph.query_service.context import (
    BLOCKS,
    CHARS_PER_TOKEN,
    MIN_CLIP_CHARS,
    approx_tokens,
    fit_block,
)
from tidegraph.query_service.synthesis import build_prompt
from tidegraph.schemas.api import ChunkOut, QueryDataResponse
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, write_doc

texts_st = st.lists(st.text(max_size=300), max_size=10)


@given(texts_st, st.one_of(st.none(), st.integers(0, 400)), st.booleans())
def test_a_block_keeps_a_prefix_within_its_budget(
    texts: list[str], budget: int | None, clippable: bool
) -> None:
    kept = fit_block(texts, budget, clippable)
    if budget is None:
        assert kept == texts
        return
    assert sum(map(len, kept)) <= budget * CHARS_PER_TOKEN
    assert kept[:-1] == texts[: max(len(kept) - 1, 0)]  # whole items, in rank order
    if kept and kept[-1] != texts[len(kept) - 1]:  # only the last may be clipped
        assert clippable and len(kept[-1]) >= MIN_CLIP_CHARS - 1
        assert kept[-1].endswith("…")
    if not clippable:
        assert kept == texts[: len(kept)]
    if len(kept) < len(texts) and kept == texts[: len(kept)]:  # the next did not fit whole
        rest = budget * CHARS_PER_TOKEN - sum(map(len, kept))
        assert len(texts[len(kept)]) > rest


def test_token_estimate() -> None:
    assert [approx_tokens(n) for n in (0, 1, 4, 5)] == [0, 1, 1, 2]


@given(st.lists(st.text(min_size=1, max_size=200), max_size=6), st.integers(0, 120))
def test_left_out_passages_get_no_number_and_every_block_is_counted(
    texts: list[str], budget: int
) -> None:
    chunks = [
        ChunkOut(
            id=str(i),
            space="default",
            doc_key=f"d{i}",
            ordinal=0,
            text=t,
            citation=f"d{i}#0",
            channels=[],
            score=1.0,
        )  # fmt: skip
        for i, t in enumerate(texts)
    ]
    data = QueryDataResponse(entities=[], relations=[], chunks=chunks, communities=[], stats={})
    prompt = build_prompt("q?", data, None, {"passages": budget})
    assert set(prompt.blocks) == set(BLOCKS)
    passages = prompt.blocks["passages"]
    assert (passages.retrieved_items, passages.retrieved_chars) == (
        len(texts),
        sum(map(len, texts)),
    )
    assert [r.n for r in prompt.references] == list(range(1, passages.prompt_items + 1))
    assert passages.token_budget == budget and prompt.blocks["relations"].token_budget is None
    assert prompt.prompt_chars == sum(b.prompt_chars for b in prompt.blocks.values())
    assert f"[{passages.prompt_items + 1}] (" not in prompt.text


# ------------------------------------------------------------------ through /query


class RecordingChat:
    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def __call__(self, system: str, prompt: str) -> str:
        self.prompts.append(prompt)
        return "An answer [1]."


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture(scope="module")
async def realm(pg_dsn: str) -> str:
    name = "c" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, RealmConfig(embedder="hashing:8"))
        people = [ent("Charles Babbage"), ent("Analytical Engine", "Machine"), ent("Ada Lovelace")]
        facts = [
            rel("Charles Babbage", "designed", "Analytical Engine", vf="1834"),
            rel("Ada Lovelace", "worked_with", "Charles Babbage"),
            rel("Ada Lovelace", "wrote", "Analytical Engine"),
        ]
        for i in range(3):
            text = f"Charles Babbage designed the Analytical Engine, part {i}. " * 8
            await write_doc(g, f"doc{i}.md", [(text, people, facts)])
    return name


@pytest.fixture
async def chat() -> RecordingChat:
    return RecordingChat()


@pytest.fixture
async def client(
    pool: AsyncConnectionPool[Any], chat: RecordingChat
) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(pool, chat=chat) as c:
        yield c


Q = {"query": "What did Charles Babbage design?", "mode": "mix"}


@pytest.mark.postgres
async def test_every_block_is_reported_and_nothing_is_cut_by_default(
    client: httpx.AsyncClient, realm: str
) -> None:
    r = await client.post(f"/v1/realms/{realm}/query", json=Q)
    assert r.status_code == 200, r.text
    body = r.json()
    blocks = body["prompt"]["blocks"]
    assert set(blocks) == {"communities", "passages", "entities", "relations"}
    data = body["data"]
    assert blocks["passages"]["retrieved_items"] == len(data["chunks"]) == 3
    assert blocks["relations"]["retrieved_items"] == len(data["relations"]) > 0
    assert blocks["entities"]["retrieved_items"] == len(data["entities"]) > 0
    assert blocks["communities"]["retrieved_items"] == 0
    for b in blocks.values():
        assert (b["prompt_items"], b["prompt_chars"]) == (
            b["retrieved_items"],
            b["retrieved_chars"],
        )
        assert b["token_budget"] is None
    assert blocks["passages"]["retrieved_chars"] == sum(len(c["text"]) for c in data["chunks"])


@pytest.mark.postgres
async def test_block_budgets_cut_only_their_block(
    client: httpx.AsyncClient, chat: RecordingChat, realm: str
) -> None:
    passage = len((await _data(client, realm))["chunks"][0]["text"])
    budgets = {"relations": 0, "passages": approx_tokens(passage) + 10}
    r = await client.post(f"/v1/realms/{realm}/query", json={**Q, "token_budgets": budgets})
    assert r.status_code == 200, r.text
    blocks = r.json()["prompt"]["blocks"]
    assert blocks["relations"]["prompt_items"] == 0 < blocks["relations"]["retrieved_items"]
    assert blocks["relations"]["token_budget"] == 0
    assert blocks["passages"]["prompt_items"] == 1 and blocks["passages"]["retrieved_items"] == 3
    assert blocks["entities"]["prompt_items"] == blocks["entities"]["retrieved_items"]
    assert [x["n"] for x in r.json()["references"]] == [1]
    prompt = chat.prompts[-1]
    assert "## Relations" not in prompt and "[2] (" not in prompt and "[1] (" in prompt

    bad = await client.post(f"/v1/realms/{realm}/query", json={**Q, "token_budgets": {"x": 1}})
    assert bad.status_code == 422


@pytest.mark.postgres
async def test_blocks_are_exported_as_histograms(client: httpx.AsyncClient, realm: str) -> None:
    budgets = {"relations": 0}
    assert (
        await client.post(f"/v1/realms/{realm}/query", json={**Q, "token_budgets": budgets})
    ).status_code == 200
    text = (await client.get("/metrics")).text
    retrieved = _sample(text, "tidegraph_context_items_sum", "relations", "retrieved")
    assert retrieved > 0
    assert _sample(text, "tidegraph_context_items_sum", "relations", "prompt") == 0
    assert _sample(text, "tidegraph_context_chars_count", "passages", "prompt") == 1


async def _data(client: httpx.AsyncClient, realm: str) -> dict[str, Any]:
    r = await client.post(f"/v1/realms/{realm}/query_data", json=Q)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _sample(text: str, metric: str, block: str, stage: str) -> float:
    prefix = f'{metric}{{block="{block}",stage="{stage}"}} '
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, (prefix, text)
    return float(lines[0][len(prefix) :])
