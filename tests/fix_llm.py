"""The scripted OpenAI-compatible server (``tests/llm_server.py``) as pytest fixtures.

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

from llm_server import FIXTURES_DIR, ExtractionFixture, ScriptedLLMServer, load_fixtures


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
