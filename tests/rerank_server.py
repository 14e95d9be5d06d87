"""A scripted rerank server, so tests exercise the real httpx path of
``tidegraph.query_service.rerank_endpoint`` — not a mock of it.

It answers ``POST`` on any path, one thread per request, in one of the two shapes the
service speaks (``api``): ``cohere`` (``{"query", "documents", "top_n"}`` →
``{"results": [{"index", "relevance_score", "document"}]}``, best first, at most
``top_n``, as Cohere, Jina and vLLM answer) or ``tei`` (``{"query", "texts"}`` →
``[{"index", "score"}]``, best first). A request in the other shape is a 422, as a real
server refuses it.

Scores: ``rules`` (substring → score, the longest matching substring wins); a document no
rule matches scores ``default_score`` minus a thousandth per position, so without rules
the server keeps the order it was given, and with ``reverse`` set it reverses it.

Failure injection: :meth:`enqueue` faults consumed one request each — a status with an
error body, a hang that never answers, a body sent verbatim (malformed JSON, the wrong
shape, an index out of range …), a delay; ``latency`` delays every answer.

Observation: every request's path, headers and body in ``requests``.

Run as a program (``python tests/rerank_server.py --latency 0.05``) it serves in its own
process, prints its URL on the first line of stdout and stops when stdin closes: the
benchmark uses that so the endpoint does not compete with the service for the GIL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from scripted_http import ScriptedHTTP

Api = Literal["cohere", "tei"]


@dataclass(frozen=True)
class Fault:
    """One injected misbehaviour, consumed by the next request."""

    kind: Literal["status", "hang", "body", "delay"]
    status: int = 500
    body: bytes = b""
    seconds: float = 0.0

    @classmethod
    def http(cls, status: int) -> Fault:
        return cls("status", status=status)

    @classmethod
    def hang(cls) -> Fault:
        """Accept the request and never answer (until the server stops)."""
        return cls("hang")

    @classmethod
    def raw(cls, body: bytes) -> Fault:
        """A 200 whose body is ``body`` verbatim."""
        return cls("body", body=body)

    @classmethod
    def json(cls, payload: Any) -> Fault:
        """A 200 whose body is ``payload`` as JSON (a shape the client must refuse)."""
        return cls("body", body=json.dumps(payload).encode())

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Answer normally after ``seconds``."""
        return cls("delay", seconds=seconds)


class ScriptedRerankServer(ScriptedHTTP):
    """The server and its controls; :meth:`start` binds a free loopback port."""

    def __init__(self, *, api: Api = "cohere", latency: float = 0.0, port: int = 0) -> None:
        self.api: Api = api
        self.latency = latency
        self.rules: dict[str, float] = {}
        self.default_score = 0.5
        self.reverse = False
        super().__init__(port)
        self._faults: list[Fault] = []
        self.requests: list[tuple[str, dict[str, str], Any]] = []

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _Handler

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        path = "/rerank" if self.api == "tei" else "/v1/rerank"
        return f"http://127.0.0.1:{self.port}{path}"

    def enqueue(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def score(self, text: str, position: int) -> float:
        """The scripted relevance of one document."""
        hits = [s for s in self.rules if s in text]
        if hits:
            return self.rules[max(hits, key=len)]
        step = position / 1000
        return self.default_score + (step if self.reverse else -step)

    def _begin(self, path: str, headers: dict[str, str], body: Any) -> Fault | None:
        with self._lock:
            self.requests.append((path, headers, body))
            return self._faults.pop(0) if self._faults else None

    def answer(self, body: Any) -> tuple[int, Any]:
        """The status and JSON answer to a request body in this server's shape."""
        field = "texts" if self.api == "tei" else "documents"
        texts = body.get(field) if isinstance(body, dict) else None
        if not isinstance(texts, list) or not isinstance(body.get("query"), str):
            return 422, {"error": f"expected query and {field}"}
        ranked = sorted(
            ((self.score(str(t), i), i, str(t)) for i, t in enumerate(texts)),
            key=lambda x: (-x[0], x[1]),
        )
        if self.api == "tei":
            return 200, [{"index": i, "score": s} for s, i, _ in ranked]
        top_n = body.get("top_n") or len(ranked)
        results = [
            {"index": i, "relevance_score": s, "document": {"text": t}}
            for s, i, t in ranked[:top_n]
        ]
        return 200, {"model": body.get("model", ""), "results": results}


class _Handler(BaseHTTPRequestHandler):
    scripted: ScriptedRerankServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send(400, b'{"error": "body is not JSON"}')
            return
        server = self.scripted
        fault = server._begin(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        if fault is not None and fault.kind == "hang":
            server._stop.wait()
            self.close_connection = True
            return
        wait = server.latency + (fault.seconds if fault is not None else 0.0)
        if wait and server._stop.wait(wait):
            return
        if fault is not None and fault.kind == "status":
            self._send(fault.status, json.dumps({"error": f"scripted {fault.status}"}).encode())
            return
        if fault is not None and fault.kind == "body":
            self._send(200, fault.body)
            return
        status, answer = server.answer(body)
        self._send(status, json.dumps(answer).encode())

    def _send(self, status: int, data: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def main() -> None:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Scripted rerank server.")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    parser.add_argument("--api", choices=["cohere", "tei"], default="cohere")
    args = parser.parse_args()
    with ScriptedRerankServer(api=args.api, latency=args.latency) as server:
        print(server.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
