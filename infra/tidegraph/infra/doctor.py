"""What ``tidegraph doctor`` asks each configured model endpoint, and how it says so.

Each check makes the call the pipeline makes, through the same client, so a check that
passes means the path works, not merely that a port answers:

* **chat** — one chunk extracted by the model extractor (structured output, the fallback
  to tolerant parsing when the server refuses a JSON schema, a leading reasoning block
  dropped), no gleaning;
* **embeddings** — one text embedded; the width is reported, and compared with the
  realm's pinned dimension when a realm is named (a server that ignores ``dimensions`` or
  serves another model shows here, not at the first write);
* **rerank** — two documents ranked by the rerank endpoint.

A :class:`Finding` is one part's verdict; :func:`summary` makes the one line.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tidegraph.indexer.extraction.interfaces import Chunk, DocumentContext
from tidegraph.indexer.extraction.llm import LLMExtractor
from tidegraph.indexer.models.client import LLMClient
from tidegraph.query_service.rerank_endpoint import Reranker, RerankFailed
from tidegraph.schemas.errors import TidegraphError

SAMPLE = "Ada Lovelace worked with Charles Babbage on the Analytical Engine in 1843."
"""The chunk the chat check extracts."""


@dataclass(frozen=True)
class Finding:
    """One part of the model path, as the check found it."""

    part: str
    """``chat``, ``embeddings`` or ``rerank``."""
    ok: bool | None
    """Works, fails, or ``None``: not configured (neither)."""
    text: str
    """What was found, for the line."""


def _took(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "…"


async def check_chat(client: LLMClient, model: str) -> Finding:
    """One chunk through the model extractor."""
    extractor = LLMExtractor(client, realm="doctor", model=model, gleaning=0)
    started = time.monotonic()
    try:
        found = await extractor.extract(Chunk(0, SAMPLE), DocumentContext(title="doctor"))
    except TidegraphError as exc:
        return Finding("chat", False, f"chat {model} FAILED: {_why(exc)}")
    output = (
        "structured output"
        if client.json_schema_supported(model)
        else "JSON schema refused, tolerant parsing"
    )
    return Finding(
        "chat",
        True,
        f"chat {model} ok ({output}; {_count(len(found.entities), 'entity', 'entities')} and"
        f" {_count(len(found.relations), 'relation', 'relations')} from a test sentence;"
        f" {_took(started)})",
    )


async def check_embeddings(
    client: LLMClient, model: str, pinned: int | None, realm: str | None
) -> Finding:
    """One text embedded; its width against ``pinned`` when a realm is named."""
    started = time.monotonic()
    try:
        result = await client.embed([SAMPLE], realm="doctor", model=model)
    except TidegraphError as exc:
        return Finding("embeddings", False, f"embeddings {model} FAILED: {_why(exc)}")
    width = len(result.vectors[0]) if result.vectors else 0
    if pinned is not None and width != pinned:
        return Finding(
            "embeddings",
            False,
            f"embeddings {model} return {width} dimensions but realm {realm} is pinned to"
            f" {pinned} (another model, or a server ignoring `dimensions`)",
        )
    match = f", as realm {realm} is pinned" if pinned is not None else ""
    usage = "" if result.usage.prompt_tokens else "; no token usage reported"
    return Finding(
        "embeddings",
        True,
        f"embeddings {model} ok ({width} dimensions{match}{usage}; {_took(started)})",
    )


async def check_rerank(reranker: Reranker) -> Finding:
    """Two documents ranked."""
    started = time.monotonic()
    try:
        scores = await reranker.scores("Who designed the Analytical Engine?", [SAMPLE, "Rain."])
    except RerankFailed as exc:
        return Finding("rerank", False, f"rerank {reranker.model} FAILED ({exc.kind}: {exc})")
    scored = sum(s is not None for s in scores)
    return Finding(
        "rerank",
        True,
        f"rerank {reranker.model or 'endpoint'} ok ({scored} of 2 scored; {_took(started)})",
    )


def summary(findings: Sequence[Finding]) -> str:
    """The one line: every part's finding, failures first."""
    ordered = sorted(findings, key=lambda f: {False: 0, True: 1, None: 2}[f.ok])
    return "; ".join(f.text for f in ordered)
