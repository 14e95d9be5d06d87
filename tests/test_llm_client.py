"""LLMClient against the scripted server: retries, deadlines, Retry-After, the in-flight
bound, failure classes and what the metrics show."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client import REGISTRY

from tidegraph.indexer.models.client import LLMClient, LLMSettings, _retry_after
from tidegraph.indexer.models.errors import (
    LLMBadOutput,
    LLMEndpointMisconfigured,
    LLMRequestRejected,
    LLMUnavailable,
)
from tidegraph.indexer.models.slots import call_priority
from tidegraph.schemas.errors import ConfigError, TransientError

from llm_server import Fault, ScriptedLLMServer

MakeClient = Callable[..., LLMClient]
MARGIN = 0.3
"""Slack over a deadline for event-loop scheduling on a loaded machine."""
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "<chunk>\nMara Ellison was born in Port Alder\n</chunk>"}
]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def realm(unique_name: Callable[[str], str]) -> str:
    return unique_name("r")


async def test_chat_answers_and_records_usage(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    client = make_llm_client()
    result = await client.chat(MESSAGES, realm=realm)
    assert '"Mara Ellison"' in result.content
    assert result.attempts == 1
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    assert client.usage == result.usage
    body = llm_server.requests[0][1]
    assert body["temperature"] == 0 and body["model"] == "scripted-chat"
    assert "response_format" not in body
    kind = {"realm": realm, "kind": "chat"}
    assert sample("tidegraph_model_calls_total", outcome="ok", **kind) == 1
    assert sample("tidegraph_model_prompt_tokens_total", **kind) == result.usage.prompt_tokens
    assert (
        sample("tidegraph_model_completion_tokens_total", **kind) == result.usage.completion_tokens
    )
    assert sample("tidegraph_model_call_seconds_count", **kind) == 1


async def test_5xx_retried_then_success(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.fail_next(2, 500)
    llm_server.enqueue(Fault.http(502))
    result = await make_llm_client().chat(MESSAGES, realm=realm)
    assert result.attempts == 4
    assert llm_server.calls["chat"] == 4
    kind = {"realm": realm, "kind": "chat"}
    assert sample("tidegraph_model_failures_total", error_class="server_error", **kind) == 3
    assert sample("tidegraph_model_calls_total", outcome="error", **kind) == 3
    assert sample("tidegraph_model_calls_total", outcome="ok", **kind) == 1


async def test_429_retry_after_is_honoured(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.enqueue(Fault.rate_limited(0.4))
    started = time.monotonic()
    result = await make_llm_client().chat(MESSAGES, realm=realm)
    assert time.monotonic() - started >= 0.4
    assert result.attempts == 2
    labels = {"realm": realm, "kind": "chat", "error_class": "rate_limited"}
    assert sample("tidegraph_model_failures_total", **labels) == 1


async def test_retry_after_beyond_deadline_gives_up_at_once(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.enqueue(Fault.rate_limited(30))
    client = make_llm_client(deadline=2.0)
    started = time.monotonic()
    with pytest.raises(LLMUnavailable) as caught:
        await client.chat(MESSAGES, realm=realm)
    assert time.monotonic() - started < 1.0
    assert caught.value.retry_after == 30
    assert llm_server.calls["chat"] == 1


async def test_outage_beyond_deadline_is_transient_and_bounded(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.outage(60, status=503)
    deadline = 0.6
    client = make_llm_client(deadline=deadline, max_attempts=100)
    started = time.monotonic()
    with pytest.raises(LLMUnavailable) as caught:
        await client.chat(MESSAGES, realm=realm)
    elapsed = time.monotonic() - started
    assert elapsed < deadline + MARGIN
    error = caught.value
    assert isinstance(error, TransientError) and error.retriable
    assert error.attempts > 1 and error.failures["server_error"] >= 1
    assert "server_error ×" in str(error)
    kind = {"realm": realm, "kind": "chat"}
    assert sample("tidegraph_model_failures_total", error_class="unavailable", **kind) == 1
    assert (
        sample("tidegraph_model_failures_total", error_class="server_error", **kind)
        == error.failures["server_error"]
    )


async def test_attempt_budget_exhausted_is_transient(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.fail_next(5, 500)
    with pytest.raises(LLMUnavailable) as caught:
        await make_llm_client(max_attempts=3).chat(MESSAGES, realm=realm)
    assert caught.value.attempts == 3 == llm_server.calls["chat"]


async def test_server_that_never_answers_fails_within_the_deadline(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.enqueue(*(Fault.hang() for _ in range(20)))
    deadline = 0.8
    client = make_llm_client(deadline=deadline, attempt_timeout=0.25, max_attempts=20)
    started = time.monotonic()
    with pytest.raises(LLMUnavailable) as caught:
        await client.chat(MESSAGES, realm=realm)
    elapsed = time.monotonic() - started
    # Not attempts × attempt_timeout: the deadline bounds the whole call.
    assert elapsed < deadline + MARGIN
    assert caught.value.attempts >= 2
    labels = {"realm": realm, "kind": "chat", "error_class": "timeout"}
    assert sample("tidegraph_model_failures_total", **labels) == caught.value.attempts


async def test_attempt_timeout_longer_than_deadline_is_cut_by_the_deadline(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.enqueue(Fault.hang())
    client = make_llm_client(deadline=0.4, attempt_timeout=30)
    started = time.monotonic()
    with pytest.raises(LLMUnavailable):
        await client.chat(MESSAGES, realm=realm)
    assert time.monotonic() - started < 0.4 + MARGIN


async def test_connection_refused_is_transient(realm: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = LLMSettings(
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key="k",
        deadline=0.5,
        backoff_base=0.01,
        backoff_cap=0.05,
    )
    async with LLMClient(settings) as client:
        with pytest.raises(LLMUnavailable) as caught:
            await client.chat(MESSAGES, realm=realm)
    assert caught.value.attempts > 1
    labels = {"realm": realm, "kind": "chat", "error_class": "connection"}
    assert sample("tidegraph_model_failures_total", **labels) == caught.value.attempts


async def test_400_is_permanent_and_not_retried(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.fail_next(1, 400)
    with pytest.raises(LLMRequestRejected) as caught:
        await make_llm_client().chat(MESSAGES, realm=realm)
    error = caught.value
    assert not error.retriable and error.status_code == 400
    assert not isinstance(error, LLMEndpointMisconfigured)
    assert "scripted HTTP 400" in str(error)
    assert llm_server.calls["chat"] == 1
    labels = {"realm": realm, "kind": "chat", "error_class": "rejected"}
    assert sample("tidegraph_model_failures_total", **labels) == 1


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_auth_and_not_found_are_misconfiguration(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str, status: int
) -> None:
    llm_server.fail_next(1, status)
    with pytest.raises(LLMEndpointMisconfigured) as caught:
        await make_llm_client().chat(MESSAGES, realm=realm)
    assert isinstance(caught.value, ConfigError) and not caught.value.retriable
    assert "OPENAI_API_KEY" in str(caught.value)


@pytest.mark.parametrize("status", [408, 409])
async def test_request_timeout_and_conflict_are_retried(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str, status: int
) -> None:
    llm_server.fail_next(1, status)
    result = await make_llm_client().chat(MESSAGES, realm=realm)
    assert result.attempts == 2


async def test_undecodable_body_is_bad_output(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.enqueue(Fault.raw_body(b'{"id": "chatcmpl-1", "choices": [{"mess'))
    with pytest.raises(LLMBadOutput):
        await make_llm_client().chat(MESSAGES, realm=realm)
    assert llm_server.calls["chat"] == 1
    labels = {"realm": realm, "kind": "chat", "error_class": "bad_output"}
    assert sample("tidegraph_model_failures_total", **labels) == 1


async def test_body_without_choices_is_bad_output(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.enqueue(Fault.raw_body(b'{"id": "chatcmpl-1", "choices": []}'))
    with pytest.raises(LLMBadOutput, match="no choices"):
        await make_llm_client().chat(MESSAGES, realm=realm)


async def test_in_flight_bound_is_respected(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.latency = 0.1
    client = make_llm_client(max_in_flight=3)
    await asyncio.gather(
        *(client.chat(MESSAGES, realm=realm) for _ in range(12)),
        client.embed(["a", "b"], realm=realm),
    )
    assert llm_server.max_concurrent == 3
    assert llm_server.calls["chat"] == 12 and llm_server.calls["embed"] == 1


async def test_waiting_calls_are_served_by_the_priority_of_their_work(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    """One slot, calls queued behind it: the endpoint sees the earlier document's call
    first, whatever order they queued in, and a call made outside any document first of
    all (a contradiction question asked from inside a write)."""
    llm_server.latency = 0.1
    client = make_llm_client(max_in_flight=1)

    async def call(name: str, priority: tuple[int, ...]) -> None:
        call_priority.set(priority)
        messages: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": f"<chunk>\n{name}\n</chunk>"}
        ]
        await client.chat(messages, realm=realm)

    first = asyncio.create_task(call("holds the slot", (0,)))
    await asyncio.sleep(0.05)  # it holds the one slot; the others queue behind it
    queued = [
        asyncio.create_task(call(name, priority))
        for name, priority in [
            ("document 9", (9, 0)),
            ("document 3, chunk 4", (3, 4)),
            ("outside any document", ()),
            ("document 3, chunk 1", (3, 1)),
        ]
    ]
    await asyncio.gather(first, *queued)
    seen = [body["messages"][-1]["content"].split("\n")[1] for _, body in llm_server.requests]
    assert seen == [
        "holds the slot",
        "outside any document",
        "document 3, chunk 1",
        "document 3, chunk 4",
        "document 9",
    ]


async def test_in_flight_bound_holds_while_backing_off(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.latency = 0.05
    llm_server.fail_next(4, 503)
    client = make_llm_client(max_in_flight=2)
    results = await asyncio.gather(*(client.chat(MESSAGES, realm=realm) for _ in range(6)))
    assert llm_server.max_concurrent <= 2
    assert sum(r.attempts for r in results) == 10


async def test_embeddings_through_the_client(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    result = await make_llm_client().embed(["alpha", "beta"], realm=realm)
    assert [len(v) for v in result.vectors] == [16, 16]
    assert llm_server.requests[0][1]["encoding_format"] == "float"
    kind = {"realm": realm, "kind": "embed"}
    assert sample("tidegraph_model_prompt_tokens_total", **kind) == result.usage.prompt_tokens > 0
    assert sample("tidegraph_model_calls_total", outcome="ok", **kind) == 1


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGRAPH_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("TIDEGRAPH_LLM_MODEL", "m-chat")
    monkeypatch.setenv("TIDEGRAPH_EMBED_MODEL", "m-embed")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("TIDEGRAPH_LLM_MAX_IN_FLIGHT", "5")
    settings = LLMSettings()
    assert settings.base_url == "http://127.0.0.1:9/v1"
    assert (settings.model, settings.embed_model, settings.max_in_flight) == (
        "m-chat",
        "m-embed",
        5,
    )
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "sk-secret"
    assert "sk-secret" not in repr(settings)
    assert settings.temperature == 0
    assert LLMSettings(model="flag").model == "flag"


def test_retry_after_forms() -> None:
    assert _retry_after({"retry-after": "2"}) == 2.0
    assert _retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert _retry_after({"retry-after": "soon"}) is None
    assert _retry_after({}) is None
    when = datetime.now(UTC) + timedelta(seconds=30)
    value = _retry_after({"retry-after": format_datetime(when, usegmt=True)})
    assert value is not None and 28 <= value <= 30
