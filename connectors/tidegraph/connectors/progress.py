"""A one-line progress display on stderr: count, rate and throughput, at most ten updates/s.

On a terminal the line redraws in place; otherwise a line is written every few seconds from
the start, so logs of a long run still show it advancing and a quick run shows only its
final line.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts published and refused documents and shows the rate while they go."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
    ) -> None:
        self.label = label
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = 0
        self.refused = 0
        self.bytes = 0
        self.started = time.perf_counter()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0

    def advance(self, count: int = 1, size: int = 0) -> None:
        self.done += count
        self.bytes += size
        self._maybe_show()

    def refuse(self, count: int = 1) -> None:
        self.refused += count
        self._maybe_show()

    @property
    def elapsed(self) -> float:
        return max(time.perf_counter() - self.started, 1e-9)

    def line(self) -> str:
        of = f"/{self.total}" if self.total is not None else ""
        rate = self.done / self.elapsed
        mbps = self.bytes / self.elapsed / 1e6
        refused = f", {self.refused} refused" if self.refused else ""
        return (
            f"{self.label}: {self.done}{of} ({rate:,.0f} docs/s, {mbps:.1f} MB/s{refused}) "
            f"{self.elapsed:.1f}s"
        )

    def _maybe_show(self) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - max(self._last, self.started) < (0.1 if self._tty else 5.0):
            return
        self._last = now
        self._write(final=False)

    def finish(self) -> None:
        if self.enabled:
            self._write(final=True)

    def _write(self, *, final: bool) -> None:
        if self._tty:
            self.stream.write("\r\x1b[K" + self.line() + ("\n" if final else ""))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
