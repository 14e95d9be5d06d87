"""Read-your-writes from the client's side: the highest head sequence seen per realm, sent
back as the sequence later reads of that realm require.

Every realm answer carries the realm's head sequence (``X-Tidegraph-Head-Sequence``). Sent
back as ``X-Tidegraph-Min-Sequence``, it makes a service that reads from standbys answer
from one that has applied it (or from the primary), so a client never sees the realm go
back in time between two of its reads, whichever node answers each.
"""

from __future__ import annotations

import threading

import httpx

from tidegraph.schemas import HEAD_SEQUENCE_HEADER, MIN_SEQUENCE_HEADER


class SeenSequences:
    """Realm → highest head sequence seen; thread-safe (a sync client may be shared)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        """Off: nothing is sent (reads may be answered by any standby within its lag)."""
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, realm: str) -> int | None:
        """The highest sequence seen (or required) for ``realm``."""
        with self._lock:
            return self._seen.get(realm)

    def require(self, realm: str, seq: int) -> None:
        """Make later reads of ``realm`` reflect at least ``seq`` (never lowers it)."""
        if seq < 0:
            raise ValueError(f"a commit sequence is not negative: {seq}")
        with self._lock:
            if seq > self._seen.get(realm, -1):
                self._seen[realm] = seq

    def headers(self, realm: str | None) -> dict[str, str]:
        """What a request to ``realm`` sends."""
        if not self.enabled or realm is None:
            return {}
        seq = self.get(realm)
        return {} if seq is None else {MIN_SEQUENCE_HEADER: str(seq)}

    def observe(self, realm: str | None, response: httpx.Response) -> None:
        """Note the head sequence a successful answer from ``realm`` carries."""
        if realm is None or response.status_code >= 400:
            return
        raw = response.headers.get(HEAD_SEQUENCE_HEADER)
        if raw is None:
            return
        try:
            seq = int(raw)
        except ValueError:
            return  # not ours to fail a read over; the answer itself is checked elsewhere
        if seq >= 0:
            self.require(realm, seq)
