"""The scripted OpenAI-compatible server of the test suite (``tests/llm_server.py``) in a
process of its own, for the benchmarks that put a model endpoint in the measured path: a
real endpoint is remote, and in-process its threads would compete with the pipeline for
the GIL."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "llm_server.py"


class ScriptedServer:
    """Answers every chunk with the fixture whose ``match`` it contains (the longest) — or,
    with ``rules``, a chunk no fixture matches with what the rules extractor reads in it
    given the prompt's known names — after ``latency`` seconds; stops when :meth:`stop`
    closes its stdin."""

    def __init__(
        self,
        latency: float,
        fixtures: Iterable[Mapping[str, Any]],
        *,
        embed_dim: int | None = None,
        rules: bool = False,
    ) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="tidegraph-scripted-")
        (Path(self._dir.name) / "fixtures.json").write_text(json.dumps(list(fixtures)))
        command = [sys.executable, str(SCRIPT), "--latency", str(latency)]
        command += ["--fixtures", self._dir.name]
        if embed_dim is not None:
            command += ["--embed-dim", str(embed_dim)]
        if rules:
            command.append("--rules")
        self._proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self._proc.stdout is not None
        self.base_url = self._proc.stdout.readline().strip()
        if not self.base_url.startswith("http"):
            self.stop()
            raise RuntimeError("the scripted server did not start")

    @property
    def pid(self) -> int:
        """The server process (its CPU is the endpoint's share of a run)."""
        return self._proc.pid

    def stats(self) -> dict[str, Any]:
        """The server's counters (``calls`` per path, ``max_concurrent``, …)."""
        return dict(httpx.get(f"{self.base_url}/_scripted/stats").json())

    def chat_calls(self) -> int:
        return int(self.stats()["calls"].get("chat", 0))

    def stop(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=10)
        self._dir.cleanup()
