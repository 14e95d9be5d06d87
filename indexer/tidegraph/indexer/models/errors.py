"""Errors of the model endpoints (chat and embeddings).

    TidegraphError
    ├── LLMError                       anything the model path raises on purpose
    │   ├── LLMRequestRejected         4xx (not 408/409/429): this request will never succeed
    │   ├── LLMEndpointMisconfigured   401/403/404: no request to this endpoint will succeed
    │   │                              (also a ConfigError)
    │   ├── LLMBadOutput               a 2xx whose body cannot be used (not JSON, no choices,
    │   │                              wrong number of vectors, NaN, zero vector)
    │   └── EmbeddingDimensionMismatch the endpoint returned vectors of another width than the
    │                                  realm's pinned dimension (also a ConfigError)
    └── TransientError                 retriable = True
        └── LLMUnavailable             connection errors, timeouts, 429, 5xx that outlasted the
                                       call's deadline or attempt budget (also an LLMError)

Why the split matters: the consumer branches on ``exc.retriable``. An outage must pause the
partition (``LLMUnavailable``) and never turn into a failed document, while a request the
endpoint will always refuse must not pause the partition forever. A misconfigured endpoint
is kept apart from a rejected request so that an extractor does not mark every chunk of
every document failed because of a wrong API key: it propagates instead of being skipped.

Every error carries where it happened: the endpoint, the call kind (``chat``/``embed``),
the model, and for calls given up the failed attempts by class and the elapsed time.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidegraph.schemas import ConfigError, TidegraphError, TransientError


class LLMError(TidegraphError):
    """Base class of the model-endpoint errors; carries the call's position."""

    endpoint: str
    """Base URL of the endpoint the call went to."""
    kind: str
    """``chat`` or ``embed``."""
    model: str
    """Model named in the request."""

    def _position(self, endpoint: str, kind: str, model: str) -> None:
        self.endpoint = endpoint
        self.kind = kind
        self.model = model


class LLMRequestRejected(LLMError):
    """The endpoint refused this request with a 4xx; sending it again cannot help."""

    def __init__(
        self, endpoint: str, kind: str, model: str, *, status_code: int, detail: str
    ) -> None:
        super().__init__(self._describe(endpoint, kind, model, status_code, detail))
        self._position(endpoint, kind, model)
        self.status_code = status_code
        self.detail = detail

    @staticmethod
    def _describe(endpoint: str, kind: str, model: str, status_code: int, detail: str) -> str:
        return (
            f"{kind} request to {endpoint} (model {model!r}) rejected with HTTP {status_code}: "
            f"{detail}"
        )


class LLMEndpointMisconfigured(LLMRequestRejected, ConfigError):
    """401/403/404: the key, the model name or the base URL is wrong for every request."""

    @staticmethod
    def _describe(endpoint: str, kind: str, model: str, status_code: int, detail: str) -> str:
        return (
            f"{kind} endpoint {endpoint} refuses model {model!r} with HTTP {status_code} "
            f"(check OPENAI_API_KEY, TIDEGRAPH_LLM_BASE_URL and the model name): {detail}"
        )


class LLMBadOutput(LLMError):
    """The endpoint answered 2xx with a body that cannot be used."""

    def __init__(self, endpoint: str, kind: str, model: str, *, reason: str) -> None:
        super().__init__(f"{kind} response from {endpoint} (model {model!r}) unusable: {reason}")
        self._position(endpoint, kind, model)
        self.reason = reason


class EmbeddingDimensionMismatch(LLMError, ConfigError):
    """Vectors of the wrong width: the realm's pinned geometry and the model disagree."""

    def __init__(self, endpoint: str, model: str, *, expected: int, got: int) -> None:
        super().__init__(
            f"embedding model {model!r} at {endpoint} returned {got}-dimensional vectors; the "
            f"realm is pinned to {expected} (a different model, or the wrong "
            "TIDEGRAPH_EMBED_MODEL; vectors of two geometries must never be mixed)"
        )
        self._position(endpoint, "embed", model)
        self.expected = expected
        self.got = got


class LLMUnavailable(LLMError, TransientError):
    """Transient failures outlasted the call's deadline or attempts; try again later."""

    retriable = True

    def __init__(
        self,
        endpoint: str,
        kind: str,
        model: str,
        *,
        failures: Mapping[str, int],
        elapsed: float,
        last_error: str,
        retry_after: float | None = None,
    ) -> None:
        attempts = sum(failures.values())
        summary = ", ".join(f"{name} ×{count}" for name, count in sorted(failures.items()))
        TransientError.__init__(
            self,
            f"{kind} endpoint {endpoint} (model {model!r}) unavailable after {attempts} "
            f"attempt(s) in {elapsed:.2f}s ({summary or 'no attempt'}); last: {last_error}",
            retry_after=retry_after,
        )
        self._position(endpoint, kind, model)
        self.failures = dict(failures)
        """Failed attempts by class (``timeout``, ``server_error``, ``rate_limited`` …)."""
        self.attempts = attempts
        self.elapsed = elapsed
        self.last_error = last_error
