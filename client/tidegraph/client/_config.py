"""Where the client connects and with which key: arguments first, then the environment
(``TIDEGRAPH_URL``, ``TIDEGRAPH_API_KEY``), then the service's default address. Read when
a client is built, never at import time."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tidegraph.schemas import ConfigError

DEFAULT_URL = "http://127.0.0.1:8080"
"""Where ``tidegraph serve`` listens unless told otherwise."""


@dataclass(frozen=True)
class ClientConfig:
    """Resolved connection settings of one client."""

    base_url: str
    """Service root, without a trailing slash."""
    api_key: str | None = field(default=None, repr=False)
    """Bearer key; ``None`` for a service without keys (loopback only)."""
    timeout: float = 30.0
    """Seconds per request."""
    retries: int = 3
    """How often a 503 answer is retried (nothing else is)."""
    backoff: float = 0.5
    """First wait after a 503 in seconds; doubles each time, capped at 10 seconds."""

    @classmethod
    def resolve(
        cls,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
    ) -> ClientConfig:
        url = base_url or os.environ.get("TIDEGRAPH_URL") or DEFAULT_URL
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"TIDEGRAPH_URL / base_url {url!r} must start with http(s)://")
        key = api_key if api_key is not None else os.environ.get("TIDEGRAPH_API_KEY") or None
        if retries < 0 or backoff < 0:
            raise ConfigError("retries and backoff must not be negative")
        return cls(url.rstrip("/"), key, timeout, retries, backoff)

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "tidegraph-client"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def delay(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before retry ``attempt`` (0-based); a ``Retry-After`` in seconds
        wins when the service sends one."""
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), 60.0)
            except ValueError:
                pass
        return float(min(self.backoff * (2**attempt), 10.0))
