"""A scripted OpenAI-compatible HTTP server, so tests exercise the real ``openai`` client,
its HTTP stack, and our retries and deadlines — not a mock of them.

It answers ``POST /v1/chat/completions`` and ``POST /v1/embeddings`` on a free loopback
port, one thread per request (so concurrency is real and measurable):

- Chat: the chunk is read from between ``<chunk>`` and ``</chunk>`` in the last user
  message (the layout of ``tidegraph.indexer.extraction.prompts``); the fixture whose ``match``
  substring occurs in it — the longest such match — supplies the answer: its ``output``
  for a first pass, its ``glean`` (default: empty lists) when the prompt carries
  ``<already_extracted>``. No fixture matches → empty lists, or with ``rules`` on, what
  the offline rules extractor reads in the chunk given the prompt's document context (the
  known names it lists): a model whose naming follows the context it is given, for
  measuring what a context costs or buys; gleaning passes then add nothing.
- Embeddings: a deterministic vector per input text (sha256-based, not normalised) of the
  requested ``dimensions`` or the server's ``embed_dim``; ``float`` or ``base64`` encoding.
- Usage tokens in every answer (about four characters per token).

Failure injection: :meth:`enqueue` faults consumed one request each (a status with an
optional ``Retry-After``, a hang that never answers, replaced content — truncated or
malformed JSON, prose, fences — or a raw broken body); :meth:`outage` answers a status
to everything for a while; ``latency`` delays every answer; ``reject_json_schema``
answers 400 to any ``json_schema`` response format; ``content_template`` wraps every chat
answer (prose, code fences, trailing junk).

Local servers (``flavour``, or each knob alone): how Ollama, vLLM and LM Studio differ from
OpenAI's API, as :data:`FLAVOURS` sets them — the error body's shape (``error_style``:
OpenAI's nested object, vLLM's flat object, a bare string, plain text), whether answers
carry ``usage``, what ``dimensions`` does to an embedding (honoured, ignored, refused with
a 400), a reasoning block before the answer (``think``), and the models served
(``models``: any other is a 404 in the server's words, such as Ollama's "try pulling it
first").

Observation: ``calls`` per path, ``chunk_calls`` per fixture match, ``gleaning_calls``,
``max_concurrent`` requests, every request body in ``requests``, and when each chat
request arrived and was answered (wall-clock seconds, ``chat_spans``); over HTTP, the
counters at ``GET /v1/_scripted/stats`` and the spans at ``GET /v1/_scripted/spans``.

- Contradiction questions (``tidegraph.indexer.extraction.contradiction_prompt``,
  recognised by its system prompt): ``{"contradicts": true}`` when a rule added with
  :meth:`add_contradiction` matches both statements (one substring each, either way
  round), else ``false``; each question is counted in ``contradiction_calls`` and kept in
  ``contradiction_questions``.
- Synthesis (the query service's ``/query``, recognised by its system prompt): a short
  answer in prose that cites the first passage of the evidence, e.g. ``From the passages:
  Ada Lovelace worked with Charles Babbage [1].``

Run as a program (``python tests/llm_server.py --latency 0.3``) it serves in its own
process, prints its base URL on the first line of stdout and stops when stdin closes: the
benchmark uses that so the endpoint does not compete with the pipeline for the GIL. With
``--port P`` it listens on that port and runs until SIGTERM or SIGINT whatever stdin does,
so it can be left running in the background (``nohup … &``) to try the model path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Literal

from scripted_http import ScriptedHTTP

FIXTURES_DIR = Path(__file__).parent / "fixtures" / "llm"

Route = Literal["chat", "embed"]
_PATHS: dict[str, Route] = {"/v1/chat/completions": "chat", "/v1/embeddings": "embed"}

EMPTY_OUTPUT: dict[str, Any] = {"entities": [], "relations": []}


@dataclass(frozen=True)
class Fault:
    """One injected misbehaviour, consumed by the next request it applies to."""

    kind: Literal["ok", "status", "hang", "content", "body"]
    route: Route | None = None
    """``chat``, ``embed``, or ``None`` for whichever request comes first."""
    status: int = 500
    retry_after: str | None = None
    content: str | None = None
    """For ``content``: the assistant message text to send instead of the fixture's."""
    body: bytes = b""
    """For ``body``: the raw HTTP body sent with status 200."""

    @classmethod
    def ok(cls, route: Route | None = None) -> Fault:
        """No fault: answer normally (to aim a later fault at a later request)."""
        return cls("ok", route)

    @classmethod
    def http(cls, status: int, route: Route | None = None) -> Fault:
        return cls("status", route, status=status)

    @classmethod
    def rate_limited(cls, retry_after: float | str, route: Route | None = None) -> Fault:
        return cls("status", route, status=429, retry_after=str(retry_after))

    @classmethod
    def hang(cls, route: Route | None = None) -> Fault:
        """Accept the request and never answer (until the server stops)."""
        return cls("hang", route)

    @classmethod
    def reply(cls, content: str) -> Fault:
        """A chat answer with this text in place of the fixture's output."""
        return cls("content", "chat", content=content)

    @classmethod
    def truncated(cls) -> Fault:
        return cls.reply('{"entities": [{"name": "Mara Ellison", "type": "Per')

    @classmethod
    def malformed(cls) -> Fault:
        return cls.reply("{entities: [{name: 'Mara Ellison'}], relations: [}")

    @classmethod
    def raw_body(cls, body: bytes, route: Route | None = None) -> Fault:
        """A 200 whose body is ``body`` verbatim (e.g. cut-off JSON)."""
        return cls("body", route, body=body)


ErrorStyle = Literal["openai", "flat", "string", "text"]
Dimensions = Literal["honour", "ignore", "reject"]


@dataclass(frozen=True)
class Flavour:
    """How a local server's OpenAI-compatible API differs from OpenAI's."""

    error_style: ErrorStyle = "openai"
    """``openai``: ``{"error": {"message", "type", …}}`` (OpenAI, Ollama, newer vLLM);
    ``flat``: ``{"object": "error", "message", "type", "code"}`` (vLLM before its nested
    errors); ``string``: ``{"error": "<message>"}`` (LM Studio); ``text``: the message as
    plain text."""
    usage: bool = True
    """Whether answers carry ``usage``."""
    dimensions: Dimensions = "honour"
    """``honour``: vectors of the width asked; ``ignore``: the model's own width whatever
    is asked (LM Studio, older Ollama); ``reject``: a 400 when ``dimensions`` is sent (vLLM
    with a model that cannot shorten its vectors)."""
    think: bool = False
    """Chat answers start with a ``<think>…</think>`` reasoning block (reasoning models
    served without a separate reasoning field)."""
    not_found: str = "The model `{model}` does not exist."
    """The message of the 404 for a model the server does not serve."""


FLAVOURS: dict[str, Flavour] = {
    "openai": Flavour(),
    "ollama": Flavour(not_found='model "{model}" not found, try pulling it first'),
    "vllm": Flavour(error_style="flat", dimensions="reject"),
    "lmstudio": Flavour(
        error_style="string",
        usage=False,
        dimensions="ignore",
        think=True,
        not_found='Model "{model}" not found. Please load it first.',
    ),
}


@dataclass(frozen=True)
class ExtractionFixture:
    """A scripted answer for every chunk containing ``match``."""

    match: str
    output: dict[str, Any]
    glean: dict[str, Any] = field(default_factory=lambda: dict(EMPTY_OUTPUT))
    doc_key: str = ""


def load_fixtures(directory: Path = FIXTURES_DIR / "extractions") -> list[ExtractionFixture]:
    """Every ``*.json`` extraction fixture under ``directory`` (recursively); a file holds
    one fixture, or a list of them."""
    fixtures = []
    for path in sorted(directory.rglob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        for one in raw if isinstance(raw, list) else [raw]:
            fixtures.append(
                ExtractionFixture(
                    match=one["match"],
                    output=one["output"],
                    glean=one.get("glean", dict(EMPTY_OUTPUT)),
                    doc_key=one.get("doc_key", ""),
                )
            )
    return fixtures


def fake_embedding(text: str, dim: int) -> list[float]:
    """Deterministic, not normalised, values in [-1, 1): the same text, the same vector."""
    values: list[float] = []
    block = 0
    while len(values) < dim:
        digest = hashlib.sha256(f"{block}:{text}".encode()).digest()
        values.extend((b - 128) / 128.0 for b in digest)
        block += 1
    return values[:dim]


def _between(text: str, start: str, end: str) -> str:
    head, _, rest = text.partition(start)
    return rest.partition(end)[0]


def rules_answer(chunk: str, prompt: str) -> dict[str, Any]:
    """What the offline rules extractor reads in ``chunk`` knowing the names the prompt's
    ``<known_entities>`` lists."""
    from tidegraph.indexer.extraction.interfaces import DocumentContext
    from tidegraph.indexer.extraction.rules import RulesExtractor

    block = _between(prompt, "<known_entities>", "</known_entities>")
    known = tuple(line[2:] for line in block.splitlines() if line.startswith("- "))
    output = RulesExtractor().extract_text(chunk, DocumentContext(known_names=known))
    return output.model_dump(mode="json")


def _chunk_of(prompt: str) -> str:
    start = prompt.find("<chunk>\n")
    end = prompt.rfind("\n</chunk>")
    if start == -1 or end < start:
        return prompt
    return prompt[start + len("<chunk>\n") : end]


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class ScriptedLLMServer(ScriptedHTTP):
    """The server and its controls; :meth:`start` binds a free loopback port."""

    def __init__(
        self,
        fixtures: Iterable[ExtractionFixture] = (),
        *,
        embed_dim: int = 16,
        latency: float = 0.0,
        port: int = 0,
        flavour: Flavour | str = "openai",
        models: Iterable[str] | None = None,
        rules: bool = False,
    ) -> None:
        super().__init__(port)
        self.rules = rules
        """Answer chunks no fixture matches with the rules extractor (see the module)."""
        self.fixtures: list[ExtractionFixture] = []
        self._whole: dict[str, ExtractionFixture] = {}
        """Fixtures by ``match``: one that is a chunk's whole text is its longest match, found
        without scanning every fixture (a benchmark scripts one per chunk, thousands)."""
        for fixture in fixtures:
            self._add(fixture)
        self.contradiction_rules: list[tuple[str, str]] = []
        """(substring of one statement, substring of the other) that contradict."""
        self.embed_dim = embed_dim
        self.latency = latency
        self.reject_json_schema = False
        self.content_template = "{content}"
        self.flavour = FLAVOURS[flavour] if isinstance(flavour, str) else flavour
        self.models: frozenset[str] | None = None if models is None else frozenset(models)
        """The models served (chat and embeddings); ``None``: any name."""
        """How chat content is wrapped, e.g. in prose and code fences (``{content}``)."""
        self._faults: list[Fault] = []
        self._outage_until = 0.0
        self._outage_status = 503
        self.reset()

    # -- lifecycle -------------------------------------------------------------------

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _Handler

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- controls --------------------------------------------------------------------

    def reset(self) -> None:
        """Forget faults, outages and observations (fixtures and settings stay)."""
        with self._lock:
            self._faults.clear()
            self._outage_until = 0.0
            self.calls: Counter[str] = Counter()
            self.chunk_calls: Counter[str] = Counter()
            self.gleaning_calls = 0
            self.contradiction_calls = 0
            self.contradiction_questions: list[tuple[str, str]] = []
            self.unmatched_chunks: list[str] = []
            self.requests: list[tuple[Route, dict[str, Any]]] = []
            self.in_flight = 0
            self.max_concurrent = 0
            self.chat_spans: list[tuple[float, float]] = []
            """(arrived, answered) of every chat request, wall-clock seconds."""

    def enqueue(self, *faults: Fault) -> None:
        """Faults for the next requests, in order, each consumed by one request."""
        with self._lock:
            self._faults.extend(faults)

    def fail_next(self, n: int, status: int = 500, route: Route | None = None) -> None:
        self.enqueue(*(Fault.http(status, route) for _ in range(n)))

    def outage(self, seconds: float, status: int = 503) -> None:
        """Answer ``status`` to every request for the next ``seconds``."""
        with self._lock:
            self._outage_until = time.monotonic() + seconds
            self._outage_status = status

    def end_outage(self) -> None:
        with self._lock:
            self._outage_until = 0.0

    def add_fixture(
        self, match: str, output: dict[str, Any], glean: dict[str, Any] | None = None
    ) -> None:
        self._add(ExtractionFixture(match, output, glean or dict(EMPTY_OUTPUT)))

    def _add(self, fixture: ExtractionFixture) -> None:
        self.fixtures.append(fixture)
        self._whole.setdefault(fixture.match, fixture)

    def add_contradiction(self, one: str, other: str) -> None:
        """Answer yes to a question whose statements contain ``one`` and ``other``."""
        self.contradiction_rules.append((one, other))

    def _contradicts(self, first: str, second: str) -> bool:
        return any(
            (a in first and b in second) or (a in second and b in first)
            for a, b in self.contradiction_rules
        )

    def calls_for(self, match: str) -> int:
        """Chat requests (first passes and gleaning) whose chunk matched ``match``."""
        return self.chunk_calls[match]

    # -- request handling (called from handler threads) ------------------------------

    def _begin(self, route: Route, body: dict[str, Any]) -> Fault | None:
        with self._lock:
            self.calls[route] += 1
            self.requests.append((route, body))
            self.in_flight += 1
            self.max_concurrent = max(self.max_concurrent, self.in_flight)
            if time.monotonic() < self._outage_until:
                return Fault.http(self._outage_status)
            for index, fault in enumerate(self._faults):
                if fault.route is None or fault.route == route:
                    return self._faults.pop(index)
        return None

    def _end(self, route: Route, arrived: float) -> None:
        with self._lock:
            self.in_flight -= 1
            if route == "chat":
                self.chat_spans.append((arrived, time.time()))

    def stats(self) -> dict[str, Any]:
        """The counters, as ``GET /v1/_scripted/stats`` serves them."""
        with self._lock:
            return {
                "calls": dict(self.calls),
                "gleaning_calls": self.gleaning_calls,
                "contradiction_calls": self.contradiction_calls,
                "max_concurrent": self.max_concurrent,
                "unmatched_chunks": len(self.unmatched_chunks),
            }

    def _chat(self, body: dict[str, Any]) -> tuple[str, int, int]:
        """The assistant text for a chat request, and its usage (prompt, completion)."""
        messages = body.get("messages") or []
        user = [m for m in messages if m.get("role") == "user"]
        prompt = user[-1].get("content", "") if user else ""
        if not isinstance(prompt, str):
            prompt = " ".join(part.get("text", "") for part in prompt if isinstance(part, dict))
        system = " ".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
        if system.startswith(SYNTHESIS_MARK):
            content = synthesis_answer(prompt)
            all_text = "".join(str(m.get("content", "")) for m in messages)
            return content, _tokens(all_text), _tokens(content)
        if system.startswith(CONTRADICTION_MARK):
            first = _between(prompt, "<first>", "</first>")
            second = _between(prompt, "<second>", "</second>")
            with self._lock:
                self.contradiction_calls += 1
                self.contradiction_questions.append((first, second))
            content = json.dumps({"contradicts": self._contradicts(first, second)})
            return content, _tokens(system + prompt), _tokens(content)
        chunk = _chunk_of(prompt)
        gleaning = "<already_extracted>" in prompt
        fixture = self._whole.get(chunk)
        if fixture is None:
            hits = [f for f in self.fixtures if f.match in chunk]
            fixture = max(hits, key=lambda f: len(f.match)) if hits else None
        with self._lock:
            if gleaning:
                self.gleaning_calls += 1
            if fixture is not None:
                self.chunk_calls[fixture.match] += 1
            else:
                self.unmatched_chunks.append(chunk)
        if fixture is not None:
            output = fixture.glean if gleaning else fixture.output
        elif self.rules and not gleaning:
            output = rules_answer(chunk, prompt)
        else:
            output = EMPTY_OUTPUT
        content = json.dumps(output, ensure_ascii=False)
        all_text = "".join(str(m.get("content", "")) for m in messages)
        return content, _tokens(all_text), _tokens(content)

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        raw = body.get("input", [])
        texts = [raw] if isinstance(raw, str) else [str(t) for t in raw]
        dim = self.embed_dim
        if body.get("dimensions") and self.flavour.dimensions == "honour":
            dim = int(body["dimensions"])
        data = []
        for index, text in enumerate(texts):
            vector = fake_embedding(text, dim)
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                packed = struct.pack(f"<{dim}f", *vector)
                embedding = base64.b64encode(packed).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(_tokens(t) for t in texts)
        answer = {"object": "list", "data": data, "model": body.get("model", "")}
        if self.flavour.usage:
            answer["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
        return answer

    def refusal(self, route: Route, body: dict[str, Any]) -> tuple[int, str, str] | None:
        """The error a request meets before any answer, in this flavour: a model not
        served, ``dimensions`` refused."""
        model = str(body.get("model", ""))
        if self.models is not None and model not in self.models:
            return 404, self.flavour.not_found.format(model=model), "not_found_error"
        if route == "embed" and body.get("dimensions") and self.flavour.dimensions == "reject":
            message = (
                f'Model "{model}" does not support matryoshka representation, changing'
                " output dimensions will lead to poor results."
            )
            return 400, message, "BadRequestError"
        return None

    def error_body(self, status: int, message: str, kind: str) -> tuple[bytes, str]:
        """An error answer's body and content type, in this flavour's style."""
        style = self.flavour.error_style
        if style == "text":
            return message.encode(), "text/plain; charset=utf-8"
        payload: Any
        if style == "flat":
            payload = {"object": "error", "message": message, "type": kind, "code": status}
        elif style == "string":
            payload = {"error": message}
        else:
            payload = {"error": {"message": message, "type": kind, "param": None, "code": None}}
        return json.dumps(payload).encode(), "application/json"


class _Handler(BaseHTTPRequestHandler):
    scripted: ScriptedLLMServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/v1/_scripted/stats":
            self._json(200, self.scripted.stats())
        elif self.path == "/v1/_scripted/spans":
            with self.scripted._lock:
                spans = list(self.scripted.chat_spans)
            self._json(200, {"chat": spans})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        route = _PATHS.get(self.path.split("?", 1)[0])
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if route is None:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._json(400, {"error": {"message": "body is not JSON", "type": "invalid_request"}})
            return
        server = self.scripted
        arrived = time.time()
        fault = server._begin(route, body)
        try:
            self._answer(route, body, fault)
        finally:
            server._end(route, arrived)

    def _answer(self, route: Route, body: dict[str, Any], fault: Fault | None) -> None:
        server = self.scripted
        if fault is not None and fault.kind == "hang":
            server._stop.wait()
            self.close_connection = True
            return
        if server.latency and server._stop.wait(server.latency):
            return
        if fault is not None and fault.kind == "status":
            headers = {"retry-after": fault.retry_after} if fault.retry_after else {}
            self._error(fault.status, f"scripted HTTP {fault.status}", "scripted_error", headers)
            return
        refused = server.refusal(route, body)
        if refused is not None:
            self._error(*refused)
            return
        if fault is not None and fault.kind == "body":
            self._send(200, fault.body, {"content-type": "application/json"})
            return
        if route == "embed":
            self._json(200, server._embeddings(body))
            return
        response_format = body.get("response_format") or {}
        if server.reject_json_schema and response_format.get("type") == "json_schema":
            message = "response_format json_schema is not supported by this server"
            self._error(400, message, "invalid_request_error")
            return
        content, prompt_tokens, completion_tokens = server._chat(body)
        content = server.content_template.replace("{content}", content)
        if server.flavour.think:
            content = THINKING + content
        if fault is not None and fault.kind == "content" and fault.content is not None:
            content = fault.content
            completion_tokens = _tokens(content)
        answer = _completion(body.get("model", ""), content, prompt_tokens, completion_tokens)
        if not server.flavour.usage:
            del answer["usage"]
        self._json(200, answer)

    def _error(
        self, status: int, message: str, kind: str, headers: dict[str, str] | None = None
    ) -> None:
        data, content_type = self.scripted.error_body(status, message, kind)
        self._send(status, data, {"content-type": content_type, **(headers or {})})

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self._send(status, data, {"content-type": "application/json", **(headers or {})})

    def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        try:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def _completion(model: str, content: str, prompt_tokens: int, completion_tokens: int) -> Any:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


THINKING = (
    "<think>The user wants entities and relations. Something like"
    ' {"entities": [{"name": "draft", "type": "Thought"}]} but let me check the text.'
    "</think>\n"
)
"""The reasoning block of a ``think`` flavour: it holds a JSON object of its own, so an
answer parsed from the first ``{`` would read the draft, not the answer."""

SYNTHESIS_MARK = "You answer questions from the evidence"
CONTRADICTION_MARK = "You decide whether two statements from a knowledge graph contradict"
"""How the query service's synthesis system prompt begins."""
_PASSAGE = re.compile(
    r"^\[(\d+)\] \([^)\n]*\)(?: \[[^\]\n]*\])*\n(.+?)(?:\n\n|\n## |\Z)", re.M | re.S
)
"""A passage of the synthesis prompt: ``[n] (citation)``, any bracketed notes the prompt
adds after it (``[stated 1842]``), then its text."""


def synthesis_answer(prompt: str) -> str:
    """Prose citing the first passage of the evidence: its first sentence, numbered."""
    found = _PASSAGE.search(prompt)
    if found is None:
        return "The evidence given does not answer the question."
    text = " ".join(found.group(2).split())
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].rstrip(".!?")
    return f"From the passages: {sentence} [{found.group(1)}]."


def main() -> None:
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(description="Scripted OpenAI-compatible server.")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="listen on this port and run until SIGTERM/SIGINT (default: a free port,"
        " until stdin closes)",
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    parser.add_argument("--embed-dim", type=int, default=16)
    parser.add_argument(
        "--flavour", choices=sorted(FLAVOURS), default="openai", help="local server to imitate"
    )
    parser.add_argument(
        "--rules", action="store_true", help="answer unmatched chunks with the rules extractor"
    )
    parser.add_argument(
        "--fixtures", type=Path, default=FIXTURES_DIR / "extractions", help="fixture folder"
    )
    args = parser.parse_args()
    server = ScriptedLLMServer(
        load_fixtures(args.fixtures),
        embed_dim=args.embed_dim,
        latency=args.latency,
        port=args.port or 0,
        flavour=args.flavour,
        rules=args.rules,
    )
    with server:
        print(server.base_url, flush=True)
        if args.port is None:
            sys.stdin.read()
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()


if __name__ == "__main__":
    main()
