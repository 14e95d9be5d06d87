"""A rerank endpoint: a cross-encoder reorders an answer's passages and relations.

Rerank servers do not speak OpenAI's API, so this is plain httpx with explicit timeouts.
Two request shapes are spoken (``TIDEGRAPH_RERANK_API``):

* ``cohere`` (default) — ``{"model", "query", "documents": [str], "top_n"}`` answered by
  ``{"results": [{"index", "relevance_score"}, …]}``: Cohere's ``/v2/rerank`` (and
  ``/v1/rerank``), Jina's ``/v1/rerank`` (which also returns each document's text), vLLM's
  ``/rerank``, ``/v1/rerank`` and ``/v2/rerank``, and the servers copying them (Infinity,
  LiteLLM's proxy).
* ``tei`` — Text Embeddings Inference's own ``/rerank``: ``{"query", "texts", "truncate"}``
  answered by a bare list ``[{"index", "score"}, …]``. ``truncate`` is sent because TEI
  refuses a text longer than the model's window otherwise.

``TIDEGRAPH_RERANK_URL`` is the whole endpoint URL (path included), so any of them is one
setting. Why the answer never fails because of the reranker: reranking improves an order
that retrieval already produced. A timeout, an HTTP or connection error, or an answer that
is not the shape above (not JSON, an index out of range or repeated, a score that is not a
finite number) leaves the retrieval order in place, adds a ``warnings`` entry naming what
happened and counts ``tidegraph_rerank_fallbacks{reason}``.

Where the scores go (:func:`apply_scores`): passages by score; relations by score within
two groups — those the question's predicate focus found (channel ``predicate``) keep
leading, as they do under every other reranking — ties and unscored items keeping their
retrieval order. It runs on what retrieval returned, before synthesis applies any budget,
so a budget keeps the reranker's best items.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import httpx
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidegraph.query_service.errors import RerankerNotConfigured
from tidegraph.query_service.metrics import ServiceMetrics
from tidegraph.query_service.plans import FOCUS
from tidegraph.query_service.synthesis import render_relation
from tidegraph.schemas.api import ChunkOut, QueryDataResponse, RelationOut

RerankApi = Literal["cohere", "tei"]
FailureKind = Literal["timeout", "error", "malformed"]


class RerankSettings(BaseSettings):
    """The rerank endpoint. Environment: ``TIDEGRAPH_RERANK_*``."""

    model_config = SettingsConfigDict(env_prefix="TIDEGRAPH_RERANK_", extra="ignore", frozen=True)

    url: str | None = Field(
        None, description="The endpoint's whole URL, e.g. `http://127.0.0.1:8000/v1/rerank`."
    )
    model: str = Field("", description="Model name sent with each request (`cohere` shape).")
    key: SecretStr | None = Field(None, description="Bearer key, when the endpoint needs one.")
    timeout: float = Field(
        2.0,
        gt=0,
        le=60,
        description="Seconds one rerank may take before the answer keeps the retrieval order.",
    )
    api: RerankApi = Field("cohere", description="`cohere` (Cohere, Jina, vLLM) or `tei`.")


class RerankFailed(Exception):
    """The endpoint gave no usable ranking; ``kind`` is the metric's ``reason``."""

    def __init__(self, kind: FailureKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class Reranker(Protocol):
    """What the app is given: scores for documents against a query."""

    @property
    def model(self) -> str: ...

    async def scores(self, query: str, documents: Sequence[str]) -> list[float | None]:
        """One score per document (``None``: the endpoint left it out); raises
        :class:`RerankFailed`."""
        ...


class RerankEndpoint:
    """One rerank endpoint over one pooled httpx client; close it with :meth:`aclose`."""

    def __init__(
        self, settings: RerankSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        if not settings.url:
            raise ValueError("RerankEndpoint needs TIDEGRAPH_RERANK_URL")
        self.settings = settings
        headers = {"content-type": "application/json"}
        if settings.key is not None:
            headers["authorization"] = f"Bearer {settings.key.get_secret_value()}"
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout),
            headers=headers,
            transport=transport,
            follow_redirects=False,
        )

    @property
    def model(self) -> str:
        return self.settings.model

    async def aclose(self) -> None:
        await self._http.aclose()

    async def scores(self, query: str, documents: Sequence[str]) -> list[float | None]:
        s = self.settings
        assert s.url is not None
        body = request_body(s.api, s.model, query, documents)
        try:
            async with asyncio.timeout(s.timeout):  # httpx's timeouts are per phase
                response = await self._http.post(s.url, json=body)
                raw = await response.aread()
        except (TimeoutError, httpx.TimeoutException):
            raise RerankFailed("timeout", f"no answer within {s.timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise RerankFailed("error", f"{type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            text = raw[:200].decode("utf-8", "replace")
            raise RerankFailed("error", f"HTTP {response.status_code}: {text}")
        try:
            answer = response.json()
        except ValueError as exc:
            raise RerankFailed("malformed", f"the answer is not JSON ({exc})") from None
        return parse_scores(s.api, answer, len(documents))


def request_body(api: RerankApi, model: str, query: str, documents: Sequence[str]) -> Any:
    """The JSON request in the endpoint's shape (every score asked for)."""
    if api == "tei":
        return {"query": query, "texts": list(documents), "truncate": True}
    return {"model": model, "query": query, "documents": list(documents), "top_n": len(documents)}


def parse_scores(api: RerankApi, answer: Any, count: int) -> list[float | None]:
    """Scores by document index from an answer in the ``api`` shape; :class:`RerankFailed`
    (``malformed``) unless every entry names a distinct index below ``count`` with a finite
    number. Documents the answer leaves out score ``None``."""
    key = "score" if api == "tei" else "relevance_score"
    entries = (
        answer if api == "tei" else (answer.get("results") if isinstance(answer, dict) else None)
    )
    if not isinstance(entries, list):
        want = "a list" if api == "tei" else 'an object with a "results" list'
        raise RerankFailed("malformed", f"the answer is not {want}")
    out: list[float | None] = [None] * count
    for entry in entries:
        index = entry.get("index") if isinstance(entry, dict) else None
        score = entry.get(key) if isinstance(entry, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise RerankFailed(
                "malformed", f"an entry's index is not one of 0..{count - 1}: {entry!r:.80}"
            )
        if (
            not isinstance(score, int | float)
            or isinstance(score, bool)
            or not math.isfinite(score)
        ):
            raise RerankFailed("malformed", f"entry {index} has no finite {key}")
        if out[index] is not None:
            raise RerankFailed("malformed", f"index {index} is ranked twice")
        out[index] = float(score)
    return out


def wanted(asked: bool | None, reranker: Reranker | None) -> bool:
    """Whether a request is reranked: as asked, else whenever an endpoint is configured."""
    if asked and reranker is None:
        raise RerankerNotConfigured()
    return reranker is not None if asked is None else asked


def _order(scores: Sequence[float | None], group: Sequence[int]) -> list[int]:
    """Positions sorted by group, then score (highest first, unscored after scored), then
    the retrieval order."""
    return sorted(
        range(len(scores)),
        key=lambda i: (group[i], scores[i] is None, -(scores[i] or 0.0), i),
    )


def apply_scores(data: QueryDataResponse, scores: Sequence[float | None]) -> QueryDataResponse:
    """``data`` with passages, then relations, carrying ``scores`` (aligned with
    :func:`documents`) and reordered by them (module docstring)."""
    n = len(data.chunks)
    chunk_scores, relation_scores = scores[:n], scores[n:]
    chunks: list[ChunkOut] = _reordered(data.chunks, chunk_scores, [0] * n)
    groups = [0 if FOCUS in r.channels else 1 for r in data.relations]
    relations: list[RelationOut] = _reordered(data.relations, relation_scores, groups)
    return data.model_copy(update={"chunks": chunks, "relations": relations})


def _reordered(items: Sequence[Any], scores: Sequence[float | None], group: list[int]) -> list[Any]:
    return [items[i].model_copy(update={"rerank_score": scores[i]}) for i in _order(scores, group)]


def documents(data: QueryDataResponse) -> list[str]:
    """What the endpoint ranks: each passage's text, then each relation as the synthesis
    prompt renders it."""
    return [c.text for c in data.chunks] + [render_relation(r) for r in data.relations]


async def rerank_answer(
    reranker: Reranker, query: str, data: QueryDataResponse, metrics: ServiceMetrics
) -> QueryDataResponse:
    """``data`` reranked, or in its retrieval order with a warning when the endpoint fails;
    ``stats.rerank_endpoint`` says which, with the time it took."""
    texts = documents(data)
    if not texts:
        return data
    started = time.perf_counter()
    outcome: FailureKind | Literal["reranked"]
    try:
        scores = await reranker.scores(query, texts)
    except RerankFailed as exc:
        out, outcome = data.model_copy(), exc.kind
        metrics.rerank_fallbacks.labels(outcome).inc()
        warning = f"rerank endpoint {_FAILED[outcome]} ({exc}); {_KEPT}"
        out.stats = {**data.stats, "warnings": [*data.stats.get("warnings", []), warning]}
    else:
        out, outcome = apply_scores(data, scores), "reranked"
        out.stats = dict(data.stats)
    elapsed = time.perf_counter() - started
    metrics.rerank_seconds.labels("reranked" if outcome == "reranked" else "fallback").observe(
        elapsed
    )
    out.stats["rerank_endpoint"] = {
        "model": reranker.model,
        "documents": len(texts),
        "outcome": outcome,
        "ms": round(elapsed * 1000, 3),
    }
    return out


_FAILED: dict[FailureKind, str] = {
    "timeout": "timed out",
    "error": "failed",
    "malformed": "gave a malformed answer",
}
_KEPT = "passages and relations keep the retrieval order"
