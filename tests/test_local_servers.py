"""The model path against what people run locally — Ollama, vLLM, LM Studio — as the
scripted server imitates each one's differences from OpenAI's API (``FLAVOURS``): error
bodies, missing ``usage``, what ``dimensions`` does, a reasoning block before the answer,
a model that is not served; then ``tidegraph doctor`` and the recipes of
docs/local-models.md, each against its server."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tidegraph.indexer.extraction.interfaces import Chunk, DocumentContext
from tidegraph.indexer.extraction.llm import LLMExtractor
from tidegraph.indexer.models.client import LLMClient, TokenUsage, without_reasoning
from tidegraph.indexer.models.embedder import LLMEmbedder
from tidegraph.indexer.models.errors import (
    EmbeddingDimensionMismatch,
    LLMEndpointMisconfigured,
    LLMRequestRejected,
)
from tidegraph.infra.doctor import SAMPLE
from tidegraph.schemas.extraction import ExtractionOutput
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import create_realm, ensure_control

from llm_server import FLAVOURS, THINKING, Fault, ScriptedLLMServer, load_fixtures
from local_services import env_without_settings, run_cli

REPO = Path(__file__).resolve().parents[1]
LOCAL = ["ollama", "vllm", "lmstudio"]
CHAT, EMBED = "local-chat", "local-embed"
SAMPLE_OUTPUT = {
    "entities": [
        {"name": "Ada Lovelace", "type": "Person"},
        {"name": "Charles Babbage", "type": "Person"},
    ],
    "relations": [{"subject": "Ada Lovelace", "predicate": "worked_with",
                   "object": "Charles Babbage", "valid_from": "1843"}],
}  # fmt: skip


@pytest.fixture(params=LOCAL)
def local(request: pytest.FixtureRequest) -> Iterator[ScriptedLLMServer]:
    """A scripted server imitating one local server, serving two models."""
    server = ScriptedLLMServer(load_fixtures(), flavour=request.param, models=[CHAT, EMBED])
    server.add_fixture(SAMPLE, SAMPLE_OUTPUT)
    with server:
        yield server


def client_of(server: ScriptedLLMServer, make: Callable[..., LLMClient]) -> LLMClient:
    return make(base_url=server.base_url, model=CHAT, embed_model=EMBED)


async def test_extraction_works_and_reads_the_answer_not_the_reasoning(
    local: ScriptedLLMServer, make_llm_client: Callable[..., LLMClient]
) -> None:
    extractor = LLMExtractor(client_of(local, make_llm_client), realm="local", gleaning=0)
    found = await extractor.extract(Chunk(0, SAMPLE), DocumentContext())
    assert found == ExtractionOutput.model_validate(SAMPLE_OUTPUT)
    [(_, body)] = [(r, b) for r, b in local.requests if r == "chat"]
    assert body["response_format"]["type"] == "json_schema"


def test_a_reasoning_block_is_dropped_only_when_it_leads() -> None:
    assert without_reasoning(THINKING + '{"a": 1}') == '{"a": 1}'
    assert without_reasoning('  <think>\n{"x": 2}\n</think>{"a": 1}') == '{"a": 1}'
    kept = 'The answer cites <think>…</think> literally: {"a": 1}'
    assert without_reasoning(kept) == kept
    assert without_reasoning("<think>cut off before the end") == "<think>cut off before the end"


async def test_embeddings_work_at_the_model_width_whatever_usage_says(
    local: ScriptedLLMServer, make_llm_client: Callable[..., LLMClient]
) -> None:
    client = client_of(local, make_llm_client)
    embedder = LLMEmbedder(client, dimension=local.embed_dim, realm="local", model=EMBED)
    vectors = await embedder.embed(["one", "two"])
    assert [len(v) for v in vectors] == [local.embed_dim] * 2
    [(_, body)] = [(r, b) for r, b in local.requests if r == "embed"]
    assert "dimensions" not in body  # never sent unless asked: vLLM refuses it
    result = await client.embed(["three"], realm="local", model=EMBED)
    if local.flavour.usage:
        assert result.usage.prompt_tokens > 0
    else:
        assert result.usage == TokenUsage()


async def test_asking_for_dimensions_is_honoured_refused_or_caught(
    local: ScriptedLLMServer, make_llm_client: Callable[..., LLMClient]
) -> None:
    """What each server does with ``dimensions``, and what tidegraph makes of it: vectors
    of the width asked, a rejection in the server's words, or a loud mismatch — never
    vectors of another width stored."""
    client = client_of(local, make_llm_client)
    embedder = LLMEmbedder(client, dimension=8, realm="local", model=EMBED, request_dimensions=True)
    behaviour = local.flavour.dimensions
    if behaviour == "honour":
        assert [len(v) for v in await embedder.embed(["x"])] == [8]
    elif behaviour == "reject":
        with pytest.raises(LLMRequestRejected) as rejected:
            await embedder.embed(["x"])
        assert rejected.value.status_code == 400 and "matryoshka" in rejected.value.detail
    else:
        with pytest.raises(EmbeddingDimensionMismatch):
            await embedder.embed(["x"])


async def test_a_model_not_served_is_named_in_the_servers_words(
    local: ScriptedLLMServer, make_llm_client: Callable[..., LLMClient]
) -> None:
    client = make_llm_client(base_url=local.base_url, model="not-pulled", embed_model="nope")
    with pytest.raises(LLMEndpointMisconfigured) as caught:
        await client.chat([{"role": "user", "content": "hi"}], realm="local")
    assert caught.value.status_code == 404
    assert caught.value.detail == local.flavour.not_found.format(model="not-pulled")
    with pytest.raises(LLMEndpointMisconfigured) as caught:
        await client.embed(["x"], realm="local")
    assert caught.value.detail == local.flavour.not_found.format(model="nope")


@pytest.mark.parametrize("style", ["openai", "flat", "string", "text"])
async def test_every_error_body_style_gives_the_servers_message(
    make_llm_client: Callable[..., LLMClient], style: str
) -> None:
    flavour = FLAVOURS["openai"].__class__(error_style=style)  # type: ignore[arg-type]
    with ScriptedLLMServer(flavour=flavour, models=[CHAT]) as server:
        client = make_llm_client(base_url=server.base_url, model="gone")
        with pytest.raises(LLMEndpointMisconfigured) as caught:
            await client.chat([{"role": "user", "content": "hi"}], realm="local")
    assert caught.value.detail == "The model `gone` does not exist."


async def test_a_busy_server_without_retry_after_is_waited_for(
    local: ScriptedLLMServer, make_llm_client: Callable[..., LLMClient]
) -> None:
    """Ollama answers 503 when its queue is full, none of them sends rate-limit headers:
    backoff alone paces the retries."""
    local.enqueue(Fault.http(503), Fault.http(429))
    client = client_of(local, make_llm_client)
    result = await client.embed(["x"], realm="local", model=EMBED)
    assert result.attempts == 3


# ------------------------------------------------------------------ tidegraph doctor


def _doctor(server: ScriptedLLMServer, *extra: str, **env: str) -> tuple[int, str]:
    settings = {
        "TIDEGRAPH_LLM_BASE_URL": server.base_url,
        "TIDEGRAPH_LLM_MODEL": CHAT,
        "TIDEGRAPH_EMBED_MODEL": EMBED,
        **env,
    }
    done = run_cli(["doctor", "--deadline", "20", *extra], env_without_settings(**settings))
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    return done.returncode, lines[0]


@pytest.mark.parametrize("flavour", LOCAL)
def test_doctor_says_in_one_line_that_the_path_works(flavour: str) -> None:
    server = ScriptedLLMServer(flavour=flavour, models=[CHAT, EMBED])
    server.add_fixture(SAMPLE, SAMPLE_OUTPUT)
    with server:
        code, line = _doctor(server)
    assert code == 0, line
    assert f"chat {CHAT} ok (structured output; 2 entities and 1 relation" in line
    assert f"embeddings {EMBED} ok (16 dimensions" in line
    assert ("no token usage reported" in line) is (not FLAVOURS[flavour].usage)
    assert "rerank not configured" in line


def test_doctor_says_what_fails_and_exits_1() -> None:
    with ScriptedLLMServer(flavour="ollama", models=[EMBED]) as server:
        code, line = _doctor(server)
    assert code == 1
    assert line.startswith(f"doctor: chat {CHAT} FAILED:") and "try pulling it first" in line
    assert f"embeddings {EMBED} ok" in line


def test_doctor_checks_a_realms_pinned_width_and_the_rerank_endpoint(
    pg_dsn: str, rerank_url: str
) -> None:
    realm = "doc" + uuid.uuid4().hex[:10]

    async def make() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await ensure_control(conn)
            await create_realm(conn, realm, RealmConfig(embedder=f"llm:{EMBED}:32"))

    asyncio.run(make())
    with ScriptedLLMServer(flavour="lmstudio", models=[CHAT, EMBED]) as server:
        code, line = _doctor(
            server, "--realm", realm, TIDEGRAPH_PG_DSN=pg_dsn, TIDEGRAPH_RERANK_URL=rerank_url
        )
    assert code == 1
    assert f"embeddings {EMBED} return 16 dimensions but realm {realm} is pinned to 32" in line
    assert "rerank endpoint ok (2 of 2 scored" in line


@pytest.fixture
def rerank_url() -> Iterator[str]:
    from rerank_server import ScriptedRerankServer

    with ScriptedRerankServer() as server:
        yield server.url


# ------------------------------------------------------------------ the recipes


RECIPE = re.compile(r"^### (Ollama|vLLM|LM Studio)\n(.*?)(?=^### |^## |\Z)", re.M | re.S)
EXPORT = re.compile(r"^export (TIDEGRAPH_[A-Z_]+)=(\S+)$", re.M)


def recipes() -> dict[str, dict[str, str]]:
    text = (REPO / "docs" / "local-models.md").read_text(encoding="utf-8")
    return {name: dict(EXPORT.findall(body)) for name, body in RECIPE.findall(text)}


@pytest.mark.parametrize(
    ("name", "flavour"), [("Ollama", "ollama"), ("vLLM", "vllm"), ("LM Studio", "lmstudio")]
)
def test_each_recipe_works_against_its_server(name: str, flavour: str) -> None:
    """The variables a recipe sets, each address pointed at a scripted server of its kind
    serving the models the recipe names (a second one when embeddings have their own
    address): doctor finds the path working, at the width the recipe pins."""
    env = recipes()[name]
    chat, embed = env["TIDEGRAPH_LLM_MODEL"], env["TIDEGRAPH_EMBED_MODEL"]
    assert env["TIDEGRAPH_EXTRACTOR"] == "llm"
    assert env["TIDEGRAPH_EMBEDDER"].startswith(f"llm:{embed}:")
    width = int(env["TIDEGRAPH_EMBEDDER"].rsplit(":", 1)[1])
    urls = [k for k in ("TIDEGRAPH_LLM_BASE_URL", "TIDEGRAPH_EMBED_BASE_URL") if k in env]
    servers = [ScriptedLLMServer(flavour=flavour, models=[chat, embed]) for _ in urls]
    for key, server in zip(urls, servers, strict=True):
        assert env[key].startswith("http://localhost:") and env[key].endswith("/v1"), env[key]
        server.embed_dim = width
        server.add_fixture(SAMPLE, SAMPLE_OUTPUT)
        server.start()
        env[key] = server.base_url
    try:
        done = run_cli(["doctor"], env_without_settings(**env))
    finally:
        for server in servers:
            server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"chat {chat} ok" in done.stdout
    assert f"embeddings {embed} ok ({width} dimensions" in done.stdout
    if len(servers) == 2:  # embeddings went to their own server
        assert servers[0].calls["embed"] == 0 and servers[1].calls["embed"] == 1
