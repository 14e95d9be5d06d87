"""What the model path costs and how it fails, per realm, in Prometheus form.

A run in which every model call fails has to be visible at once (paper §3.5), and token
spend has to be attributable to a realm. So every HTTP attempt is counted with its outcome,
every failed attempt by class, every response's token usage, and every extraction-cache
lookup.

    tidegraph_model_calls_total{realm,kind,outcome}            one per HTTP attempt;
                                                               outcome ok | error
    tidegraph_model_failures_total{realm,kind,error_class}     failed attempts, and calls
                                                               given up (class unavailable)
    tidegraph_model_prompt_tokens_total{realm,kind}            from the responses' usage
    tidegraph_model_completion_tokens_total{realm,kind}
    tidegraph_model_call_seconds{realm,kind}                   latency of each attempt
    tidegraph_extraction_cache_hits_total{realm}
    tidegraph_extraction_cache_misses_total{realm}

The collectors are built once per registry: :func:`model_metrics` returns the process-wide
instance on prometheus-client's default ``REGISTRY`` (what ``/metrics`` serves), and a test
or an embedding application may build a :class:`ModelMetrics` on its own registry.
"""

from __future__ import annotations

import threading
from typing import Final, Literal

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

CallKind = Literal["chat", "embed"]

ErrorClass = Literal[
    "timeout",
    "connection",
    "rate_limited",
    "server_error",
    "rejected",
    "misconfigured",
    "bad_output",
    "invalid_output",
    "dimension_mismatch",
    "unavailable",
]
"""Failure classes. ``invalid_output`` is a chat answer the extractor could not parse or
validate; ``unavailable`` counts calls given up after their deadline or attempts."""

_LATENCY_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ModelMetrics:
    """The model-path collectors, registered on one registry."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.calls = Counter(
            "tidegraph_model_calls",
            "HTTP attempts against a model endpoint, by outcome.",
            ["realm", "kind", "outcome"],
            registry=registry,
        )
        self.failures = Counter(
            "tidegraph_model_failures",
            "Failed model attempts and abandoned calls, by failure class.",
            ["realm", "kind", "error_class"],
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "tidegraph_model_prompt_tokens",
            "Prompt tokens reported by model responses.",
            ["realm", "kind"],
            registry=registry,
        )
        self.completion_tokens = Counter(
            "tidegraph_model_completion_tokens",
            "Completion tokens reported by model responses.",
            ["realm", "kind"],
            registry=registry,
        )
        self.latency = Histogram(
            "tidegraph_model_call_seconds",
            "Wall-clock time of one HTTP attempt against a model endpoint.",
            ["realm", "kind"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.cache_hits = Counter(
            "tidegraph_extraction_cache_hits",
            "Chunk extractions answered from the extraction cache (no model call).",
            ["realm"],
            registry=registry,
        )
        self.cache_misses = Counter(
            "tidegraph_extraction_cache_misses",
            "Chunk extractions that had to call the model.",
            ["realm"],
            registry=registry,
        )

    def attempt(self, realm: str, kind: CallKind, seconds: float, error: ErrorClass | None) -> None:
        """Record one HTTP attempt: its latency, and its failure class when it failed."""
        self.latency.labels(realm, kind).observe(seconds)
        self.calls.labels(realm, kind, "ok" if error is None else "error").inc()
        if error is not None:
            self.failures.labels(realm, kind, error).inc()

    def failure(self, realm: str, kind: CallKind, error: ErrorClass) -> None:
        """Record a failure that is not an HTTP attempt (a call given up, unusable output)."""
        self.failures.labels(realm, kind, error).inc()

    def tokens(self, realm: str, kind: CallKind, prompt: int, completion: int) -> None:
        """Add a response's token usage."""
        if prompt:
            self.prompt_tokens.labels(realm, kind).inc(prompt)
        if completion:
            self.completion_tokens.labels(realm, kind).inc(completion)

    def cache_hit(self, realm: str) -> None:
        self.cache_hits.labels(realm).inc()

    def cache_miss(self, realm: str) -> None:
        self.cache_misses.labels(realm).inc()


_default: ModelMetrics | None = None
_default_lock = threading.Lock()


def model_metrics() -> ModelMetrics:
    """The process-wide collectors on the default registry, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = ModelMetrics(REGISTRY)
        return _default
