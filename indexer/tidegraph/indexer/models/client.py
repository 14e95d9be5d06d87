"""One OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LiteLLM …), called the way a long
stream of documents needs: bounded, deadline-limited, classified, counted.

Why a wrapper rather than the ``openai`` client's own retry loop: the consumer must be told
*within a known time* whether the endpoint is down (so it pauses the partition) or the
request is hopeless (so the chunk is skipped), and a sustained outage must not cost
retries × backoff on every call (paper §3.5). So:

1. The ``openai`` client's own retries are off (``max_retries=0``); these are the only ones.
2. A call first takes one of ``max_in_flight`` slots of this endpoint and holds it until
   it returns or gives up, backoff included. Holding the slot while backing off keeps a
   rate-limited or failing endpoint from being hammered by the calls queued behind.
3. From the moment it holds a slot, a call has ``deadline`` seconds of wall-clock time for
   all its attempts. Each attempt gets ``min(remaining, attempt_timeout)``, enforced with
   ``asyncio.timeout`` (a server that accepts the connection and never answers cannot hold
   the call past its deadline). Time spent waiting for a slot is not charged: the queue
   ahead drains within its own deadlines, and charging it would turn a busy but healthy
   endpoint into spurious outages.
4. Failures are classified (:func:`_classify`): connection errors, timeouts, 408, 409, 429
   and 5xx are transient and retried with exponential backoff and jitter, a 429's
   ``Retry-After`` being a floor for the wait; when the deadline or ``max_attempts`` is
   reached the call raises :class:`LLMUnavailable` (``retriable``). Other 4xx and
   unusable 2xx bodies raise at once (:mod:`tidegraph.indexer.models.errors`).
5. Every attempt is timed and counted, and the token usage of every response recorded,
   per realm (:mod:`tidegraph.indexer.models.metrics`).

One :class:`LLMClient` is one endpoint: build it once in the composition root and share it
between the extractor and the embedder of every realm, so the in-flight bound holds for
the endpoint as a whole.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

import openai
from openai import AsyncOpenAI, omit
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidegraph.indexer.models.errors import (
    LLMBadOutput,
    LLMEndpointMisconfigured,
    LLMError,
    LLMRequestRejected,
    LLMUnavailable,
)
from tidegraph.indexer.models.metrics import CallKind, ErrorClass, ModelMetrics, model_metrics

__all__ = [
    "ChatResult",
    "EmbeddingResult",
    "LLMClient",
    "LLMSettings",
    "TokenUsage",
    "load_llm_settings",
]

_T = TypeVar("_T")

_MIN_ATTEMPT = 0.05
"""Seconds an attempt needs at least; with less left before the deadline, give up now
rather than send a request that can only time out."""

# Sent when no key is configured: local servers (vLLM, Ollama) ignore it, OpenAI answers 401,
# which surfaces as LLMEndpointMisconfigured naming OPENAI_API_KEY.
_NO_KEY = "no-key-configured"


class LLMSettings(BaseSettings):
    """Model endpoint settings. Environment: ``TIDEGRAPH_LLM_*``, plus the two names the
    contract fixes (``TIDEGRAPH_EMBED_MODEL``, ``OPENAI_API_KEY``)."""

    model_config = SettingsConfigDict(
        env_prefix="TIDEGRAPH_LLM_", extra="ignore", validate_by_name=True
    )

    base_url: str | None = Field(
        None, description="OpenAI-compatible base URL (…/v1); unset means OpenAI itself."
    )
    model: str = Field("gpt-4o-mini", description="Chat model used for extraction.")
    embed_model: str = Field(
        "text-embedding-3-small",
        validation_alias="TIDEGRAPH_EMBED_MODEL",
        description="Embedding model.",
    )
    api_key: SecretStr | None = Field(
        None, validation_alias="OPENAI_API_KEY", description="Bearer key for the endpoint."
    )
    embed_base_url: str | None = Field(
        None,
        validation_alias="TIDEGRAPH_EMBED_BASE_URL",
        description="Base URL (…/v1) for embeddings when another server serves them (vLLM "
        "serves one model per process); unset: `base_url`.",
    )
    deadline: float = Field(
        60.0, gt=0, description="Seconds one call may take, all retries and backoff included."
    )
    attempt_timeout: float = Field(30.0, gt=0, description="Upper bound of one HTTP attempt.")
    max_attempts: int = Field(8, ge=1, description="Attempts per call, within the deadline.")
    max_in_flight: int = Field(8, ge=1, description="Calls in flight against this endpoint.")
    backoff_base: float = Field(0.5, ge=0, description="First backoff, doubled per retry.")
    backoff_cap: float = Field(10.0, ge=0, description="Largest backoff between attempts.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature for chat calls.")
    max_tokens: int | None = Field(None, ge=1, description="Completion token cap, if any.")


def load_llm_settings(**overrides: object) -> LLMSettings:
    """Settings from the environment with explicit (flag) overrides on top; ``None`` skips."""
    return LLMSettings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]


@dataclass(frozen=True)
class TokenUsage:
    """Token counts as the endpoint reported them (zero when it reported none)."""

    prompt_tokens: int = 0
    """Tokens of the request (prompt, or embedding input)."""
    completion_tokens: int = 0
    """Tokens generated (always 0 for embeddings)."""

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


@dataclass(frozen=True)
class ChatResult:
    """The answer of one chat call."""

    content: str
    """The first choice's message text."""
    finish_reason: str | None
    """``stop`` normally; ``length`` means the answer was cut off at the token cap."""
    usage: TokenUsage
    """Tokens of the successful attempt."""
    attempts: int
    """HTTP attempts the call took (1 when nothing failed)."""
    elapsed: float = 0.0
    """Seconds from getting an in-flight slot to the answer: what the deadline was charged."""


@dataclass(frozen=True)
class EmbeddingResult:
    """The vectors of one embeddings call, in input order, exactly as returned."""

    vectors: list[list[float]]
    usage: TokenUsage
    attempts: int


@dataclass(frozen=True)
class _Failure:
    """How one failed attempt is handled: retried unless ``permanent`` is set."""

    error_class: ErrorClass
    detail: str
    retry_after: float | None = None
    permanent: LLMError | None = None


class LLMClient:
    """Chat and embeddings against one endpoint, with deadlines, retries and a slot bound."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        metrics: ModelMetrics | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        key = settings.api_key.get_secret_value() if settings.api_key is not None else _NO_KEY
        self._openai = AsyncOpenAI(
            api_key=key,
            base_url=settings.base_url,
            max_retries=0,
            timeout=settings.attempt_timeout,
        )
        # The client imports its resource modules on first attribute access (~0.7 s);
        # do it here, not inside the first call's attempt timeout on the event loop.
        self._completions = self._openai.chat.completions
        self._embed_openai = _embedding_openai(settings, key, self._openai)
        self._embeddings = self._embed_openai.embeddings
        self.embed_endpoint = str(self._embed_openai.base_url).rstrip("/")
        """Where embeddings go: ``endpoint`` unless ``embed_base_url`` names another."""
        self.endpoint = str(self._openai.base_url).rstrip("/")
        self._slots = asyncio.Semaphore(settings.max_in_flight)
        self._metrics = metrics if metrics is not None else model_metrics()
        self._rng = rng if rng is not None else random.Random()  # noqa: S311 - jitter only
        self._usage = TokenUsage()
        self._json_schema_unsupported: set[str] = set()

    def _endpoint(self, kind: CallKind) -> str:
        return self.embed_endpoint if kind == "embed" else self.endpoint

    @property
    def usage(self) -> TokenUsage:
        """Tokens reported by every successful response of this client so far."""
        return self._usage

    def json_schema_supported(self, model: str) -> bool:
        """False once this endpoint refused a ``json_schema`` response format for ``model``."""
        return model not in self._json_schema_unsupported

    def mark_json_schema_unsupported(self, model: str) -> None:
        """Remember that structured output is refused here, so later calls skip the probe."""
        self._json_schema_unsupported.add(model)

    async def aclose(self) -> None:
        await self._openai.close()
        if self._embed_openai is not self._openai:
            await self._embed_openai.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def chat(
        self,
        messages: Sequence[ChatCompletionMessageParam],
        *,
        realm: str,
        model: str | None = None,
        response_format: ResponseFormat | None = None,
        deadline: float | None = None,
    ) -> ChatResult:
        """One chat completion; ``deadline`` (seconds) overrides the configured one."""
        model = model or self.settings.model
        settings = self.settings

        async def attempt(seconds: float) -> tuple[tuple[str, str | None], TokenUsage]:
            completion = await self._completions.create(
                model=model,
                messages=list(messages),
                temperature=settings.temperature,
                response_format=response_format if response_format is not None else omit,
                max_tokens=settings.max_tokens if settings.max_tokens is not None else omit,
                timeout=seconds,
            )
            try:
                choice = completion.choices[0]
                content = choice.message.content
                finish_reason = choice.finish_reason
            except (AttributeError, IndexError, TypeError) as exc:
                raise LLMBadOutput(self.endpoint, "chat", model, reason="no choices") from exc
            if not isinstance(content, str):
                raise LLMBadOutput(self.endpoint, "chat", model, reason="no message content")
            content = without_reasoning(content)
            return (content, finish_reason), _usage(getattr(completion, "usage", None))

        (content, finish_reason), usage, attempts, elapsed = await self._call(
            "chat", model, realm, deadline, attempt
        )
        return ChatResult(content, finish_reason, usage, attempts, elapsed)

    async def embed(
        self,
        texts: Sequence[str],
        *,
        realm: str,
        model: str | None = None,
        dimensions: int | None = None,
        deadline: float | None = None,
    ) -> EmbeddingResult:
        """Vectors for ``texts`` in one request (the caller batches); not normalised."""
        model = model or self.settings.embed_model
        count = len(texts)

        async def attempt(seconds: float) -> tuple[list[list[float]], TokenUsage]:
            response = await self._embeddings.create(
                model=model,
                input=list(texts),
                encoding_format="float",
                dimensions=dimensions if dimensions is not None else omit,
                timeout=seconds,
            )
            try:
                rows = sorted(response.data, key=lambda row: row.index)
                vectors = [[float(x) for x in row.embedding] for row in rows]
            except (AttributeError, TypeError, ValueError) as exc:
                raise LLMBadOutput(
                    self.embed_endpoint, "embed", model, reason=f"malformed embedding data: {exc}"
                ) from exc
            if len(vectors) != count:
                raise LLMBadOutput(
                    self.embed_endpoint,
                    "embed",
                    model,
                    reason=f"{len(vectors)} vectors for {count} inputs",
                )
            return vectors, _usage(getattr(response, "usage", None))

        vectors, usage, attempts, _ = await self._call("embed", model, realm, deadline, attempt)
        return EmbeddingResult(vectors, usage, attempts)

    async def _call(
        self,
        kind: CallKind,
        model: str,
        realm: str,
        deadline: float | None,
        attempt: Callable[[float], Awaitable[tuple[_T, TokenUsage]]],
    ) -> tuple[_T, TokenUsage, int, float]:
        """Run ``attempt`` under the slot bound, deadline and retry policy."""
        settings = self.settings
        budget = settings.deadline if deadline is None else deadline
        async with self._slots:
            started = time.monotonic()
            deadline_at = started + budget
            attempts = 0
            failures: Counter[str] = Counter()
            while True:
                remaining = deadline_at - time.monotonic()
                if remaining <= 0:
                    # Only reachable when the caller's own budget was already spent.
                    raise self._unavailable(
                        kind, model, realm, started, failures, "no time left", None
                    )
                attempts += 1
                attempt_started = time.monotonic()
                try:
                    async with asyncio.timeout(min(remaining, settings.attempt_timeout)):
                        value, usage = await attempt(min(remaining, settings.attempt_timeout))
                except (
                    openai.APIError,
                    LLMError,
                    TimeoutError,
                    json.JSONDecodeError,
                    UnicodeDecodeError,
                ) as exc:
                    failure = _classify(exc, self._endpoint(kind), kind, model)
                    failures[failure.error_class] += 1
                    self._metrics.attempt(
                        realm, kind, time.monotonic() - attempt_started, failure.error_class
                    )
                    if failure.permanent is not None:
                        raise failure.permanent from exc
                    wait = self._backoff(attempts)
                    if failure.retry_after is not None:
                        wait = max(wait, failure.retry_after)
                    left = deadline_at - time.monotonic()
                    if attempts >= settings.max_attempts or wait + _MIN_ATTEMPT > left:
                        raise self._unavailable(
                            kind,
                            model,
                            realm,
                            started,
                            failures,
                            failure.detail,
                            failure.retry_after,
                        ) from exc
                    await asyncio.sleep(wait)
                else:
                    self._metrics.attempt(realm, kind, time.monotonic() - attempt_started, None)
                    self._metrics.tokens(realm, kind, usage.prompt_tokens, usage.completion_tokens)
                    self._usage = self._usage + usage
                    return value, usage, attempts, time.monotonic() - started

    def _backoff(self, attempts: int) -> float:
        """Exponential backoff with jitter: half fixed, half random, so waits spread out."""
        s = self.settings
        ceiling = min(s.backoff_cap, s.backoff_base * 2.0 ** (attempts - 1))
        return ceiling * self._rng.uniform(0.5, 1.0)

    def _unavailable(
        self,
        kind: CallKind,
        model: str,
        realm: str,
        started: float,
        failures: Counter[str],
        detail: str,
        retry_after: float | None,
    ) -> LLMUnavailable:
        self._metrics.failure(realm, kind, "unavailable")
        return LLMUnavailable(
            self._endpoint(kind),
            kind,
            model,
            failures=dict(failures),
            elapsed=time.monotonic() - started,
            last_error=detail,
            retry_after=retry_after,
        )


def _embedding_openai(settings: LLMSettings, key: str, chat: AsyncOpenAI) -> AsyncOpenAI:
    """The client embeddings go through: the chat one unless ``embed_base_url`` is set."""
    if not settings.embed_base_url:
        return chat
    return AsyncOpenAI(
        api_key=key,
        base_url=settings.embed_base_url,
        max_retries=0,
        timeout=settings.attempt_timeout,
    )


def _usage(usage: object) -> TokenUsage:
    """Token usage from a response object, tolerating endpoints that omit it."""
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    return TokenUsage(
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


_TRANSIENT_STATUS = frozenset({408, 409, 429})
_MISCONFIGURED_STATUS = frozenset({401, 403, 404})


def _classify(exc: BaseException, endpoint: str, kind: CallKind, model: str) -> _Failure:
    """Decide what one failed attempt means: retry, or give up with a permanent error."""
    if isinstance(exc, LLMError):  # raised by our own reading of a 2xx body
        return _Failure("bad_output", str(exc), permanent=exc)
    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return _Failure("timeout", "attempt timed out")
    if isinstance(exc, openai.APIConnectionError):
        return _Failure("connection", f"connection failed: {exc}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = f"HTTP {status}: {_error_message(exc)}"
        if status == 429:
            return _Failure("rate_limited", detail, _retry_after(exc.response.headers))
        if status >= 500:
            return _Failure("server_error", detail)
        if status in _TRANSIENT_STATUS:
            return _Failure("server_error", detail)
        message = _error_message(exc)
        if status in _MISCONFIGURED_STATUS:
            return _Failure(
                "misconfigured",
                detail,
                permanent=LLMEndpointMisconfigured(
                    endpoint, kind, model, status_code=status, detail=message
                ),
            )
        return _Failure(
            "rejected",
            detail,
            permanent=LLMRequestRejected(endpoint, kind, model, status_code=status, detail=message),
        )
    # APIResponseValidationError and undecodable bodies: the endpoint answered, uselessly.
    reason = f"undecodable response: {exc}"
    return _Failure(
        "bad_output", reason, permanent=LLMBadOutput(endpoint, kind, model, reason=reason)
    )


def _error_message(exc: openai.APIStatusError) -> str:
    """The server's own words: OpenAI's and Ollama's ``{"error": {"message"}}``, vLLM's flat
    ``{"message"}``, LM Studio's ``{"error": "…"}`` or a plain-text body."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str) and inner.strip():
            return inner.strip()
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return exc.message


_REASONING = re.compile(r"\A\s*<think>.*?</think>\s*", re.DOTALL)


def without_reasoning(content: str) -> str:
    """``content`` without a leading ``<think>…</think>`` block: reasoning models served
    without a separate reasoning field (through LM Studio, older Ollama, vLLM without a
    reasoning parser) put their reasoning before the answer, and it may hold JSON of its
    own that a parser reading from the first ``{`` would take for the answer."""
    return _REASONING.sub("", content, count=1)


def _retry_after(headers: object) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    raw_ms = get("retry-after-ms")
    if isinstance(raw_ms, str):
        try:
            value = float(raw_ms) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = get("retry-after")
    if not isinstance(raw, str):
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        value = (when - datetime.now(UTC)).total_seconds()
        return max(0.0, value)
    return value if math.isfinite(value) and value >= 0 else None
