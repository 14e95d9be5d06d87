"""The scripted model endpoints as pytest fixtures: the OpenAI-compatible server
(``tests/llm_server.py``) and the rerank server (``tests/rerank_server.py``).

``llm_server`` is function-scoped: every test starts with no faults, no outage and zeroed
counters, on its own free loopback port, loaded with the corpus fixtures of
``tests/fixtures/llm``. Starting one costs a thread and a socket, so per-test is cheap.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidegraph.indexer.models.client import LLMClient, LLMSettings
from tidegraph.query_service.rerank_endpoint import RerankEndpoint, RerankSettings

from llm_server import FIXTURES_DIR, ExtractionFixture, ScriptedLLMServer, load_fixtures
from rerank_server import ScriptedRerankServer


@pytest.fixture(scope="session")
def llm_fixtures_dir() -> Path:
    """``tests/fixtures/llm``: the corpus, its realm config, manifest and scripted outputs."""
    return Path(FIXTURES_DIR)


@pytest.fixture(scope="session")
def llm_extraction_fixtures() -> list[ExtractionFixture]:
    return load_fixtures()


@pytest.fixture
def llm_server(llm_extraction_fixtures: list[ExtractionFixture]) -> Iterator[ScriptedLLMServer]:
    """A started scripted server; ``llm_server.base_url`` is the ``…/v1`` URL to use."""
    server = ScriptedLLMServer(llm_extraction_fixtures)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def make_llm_client(
    llm_server: ScriptedLLMServer,
) -> AsyncIterator[Callable[..., LLMClient]]:
    """``make_llm_client(deadline=1.0, …)`` → an ``LLMClient`` on the scripted server.

    Test defaults keep failures fast (2 s deadline, 1 s attempts, 10–50 ms backoff); any
    ``LLMSettings`` field can be overridden. Clients are closed at teardown.
    """
    clients: list[LLMClient] = []

    def make(**overrides: Any) -> LLMClient:
        values: dict[str, Any] = {
            "base_url": llm_server.base_url,
            "api_key": "sk-scripted",
            "model": "scripted-chat",
            "embed_model": "scripted-embed",
            "deadline": 2.0,
            "attempt_timeout": 1.0,
            "backoff_base": 0.01,
            "backoff_cap": 0.05,
        }
        values.update(overrides)
        client = LLMClient(LLMSettings(**values))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
def rerank_server() -> Iterator[ScriptedRerankServer]:
    """A started scripted rerank server (``cohere`` shape); ``rerank_server.url`` is the
    endpoint URL."""
    with ScriptedRerankServer() as server:
        yield server


@pytest.fixture
async def make_reranker(
    rerank_server: ScriptedRerankServer,
) -> AsyncIterator[Callable[..., RerankEndpoint]]:
    """``make_reranker(timeout=0.5, …)`` → a ``RerankEndpoint`` on the scripted server, in
    its shape; any ``RerankSettings`` field can be overridden. Closed at teardown."""
    endpoints: list[RerankEndpoint] = []

    def make(**overrides: Any) -> RerankEndpoint:
        values: dict[str, Any] = {
            "url": rerank_server.url,
            "model": "scripted-rerank",
            "key": "rk-scripted",
            "timeout": 1.0,
            "api": rerank_server.api,
        }
        values.update(overrides)
        endpoint = RerankEndpoint(RerankSettings(**values))
        endpoints.append(endpoint)
        return endpoint

    yield make
    for endpoint in endpoints:
        await endpoint.aclose()
