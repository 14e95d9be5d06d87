"""Model-bound indexing: how much of a slow model's allowed concurrency the indexer uses.

With a real model an extraction call takes seconds, so what decides how fast tidegraph
indexes is the share of the model-bound ideal it reaches: ``calls × latency / calls
allowed in flight`` is the least time the calls can take. Each shape is drained from a
backlog by a real ``tidegraph indexer`` process (the ``llm`` extractor: a first pass and
one gleaning pass per chunk; hashing embeddings) against the scripted OpenAI-compatible
endpoint in its own process, which answers every chat call after ``--latency`` seconds with
what the offline extractor finds in the chunk. The endpoint is told to allow
``--in-flight`` calls at once (``TIDEGRAPH_LLM_MAX_IN_FLIGHT``).

Shapes (``--shapes``):

- ``small``: 300 documents of about 1.5 KB (one chunk each), one realm;
- ``large``: 100 documents of about 9 KB (five to six chunks each), one realm;
- ``huge``: one document of 300 chunks;
- ``realms``: a mix of realms on two partitions — 150 small documents in one realm, 25
  large ones in the other.

For each run it prints the calls, the share of the ideal over the model span (first call
to last answer: how busy the allowed calls were while there was extraction to do) and over
the whole drain (indexer start to last document applied; the start — Python, Kafka's group
join, the first fetch — is shown on its own), the calls in flight as a histogram of the
model span and a strip over time (each character a slice of the span: its mean calls in
flight against the bound), and CPU per document of the indexer (its start included),
PostgreSQL and the scripted endpoint, with the cores those would keep busy at the ideal
rate and the machine's load average (on a shared machine the share is bounded by the CPU
left to the indexer and PostgreSQL, whatever the scheduling).

``--compare CHECKOUT`` runs every shape with the indexer of another checkout as well
(``PYTHONPATH`` set to its package folders), alternating the two ``--repeat`` times, and
prints the medians side by side: measure a change back to back with the code before it.

Services: ``TIDEGRAPH_KAFKA_BOOTSTRAP`` / ``TIDEGRAPH_PG_DSN`` when set, else the ones
``tidegraph up`` runs. Run: ``.venv/bin/python bench/model_bound.py [--shapes
small,large,huge,realms] [--latency 0.3] [--in-flight 16] [--repeat 1] [--compare DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
from backlog import document, publish, scripted_answers
from cpu import postgres_cpu, postmaster_pid, process_cpu
from progress import wait_applied
from scripted import ScriptedServer

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.indexer.extraction.chunking import chunk_document
from tidegraph.infra import services
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.topics import topic_specs

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    *("schemas", "store", "connectors", "indexer", "query_service", "infra", "client"),
    "bench",
)
"""The folders ``--compare`` puts on the other checkout's ``PYTHONPATH``."""
HUGE_CHUNKS = 300
STRIP = 60
LEVELS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Part:
    """Documents of one realm in a shape."""

    count: int
    size: int
    """Characters a document (``0``: one document of :data:`HUGE_CHUNKS` chunks)."""


SHAPES: dict[str, tuple[str, tuple[Part, ...]]] = {
    "small": ("300 documents of 1.5 KB", (Part(300, 1500),)),
    "large": ("100 documents of 9 KB", (Part(100, 9000),)),
    "huge": (f"one document of {HUGE_CHUNKS} chunks", (Part(1, 0),)),
    "realms": ("two realms: 150 × 1.5 KB and 25 × 9 KB", (Part(150, 1500), Part(25, 9000))),
}


@dataclass(frozen=True)
class Figures:
    """One drain of one shape."""

    docs: int
    chunks: int
    calls: int
    ideal: float
    """Seconds the calls take at the bound: calls × latency / in flight."""
    span: float
    """First call to last answer, seconds."""
    drain: float
    """Indexer start to last document applied, seconds."""
    start: float
    """Indexer start to first call, seconds."""
    levels: list[float]
    """Share of the span with n calls in flight, n = 0 … the bound (and above)."""
    strip: str
    cpu_indexer: float
    cpu_pg: float
    cpu_model: float
    """CPU seconds of each process over the run."""
    load: float
    """The machine's one-minute load average when the drain ended."""

    @property
    def share(self) -> float:
        return self.ideal / self.span if self.span else 0.0

    @property
    def share_drain(self) -> float:
        return self.ideal / self.drain


def huge_document(rng: random.Random, realm: str) -> DocumentVersion:
    """A document of exactly :data:`HUGE_CHUNKS` chunks (trimmed by paragraphs)."""
    doc = document(rng, realm, 0, HUGE_CHUNKS * 2000)
    paragraphs = (doc.content or "").split("\n\n")
    lo, hi = 1, len(paragraphs)
    while lo < hi:  # fewest paragraphs that make HUGE_CHUNKS chunks
        mid = (lo + hi) // 2
        if len(chunk_document("\n\n".join(paragraphs[:mid]))) < HUGE_CHUNKS:
            lo = mid + 1
        else:
            hi = mid
    text = "\n\n".join(paragraphs[:lo])
    return DocumentVersion(
        realm=realm,
        doc_key="report.md",
        op="upsert",
        content=text,
        content_hash=content_hash(text),
        title="A long report",
        order_key="000000",
        event_time=datetime.now(UTC),
    )


def corpus(shape: str, realms: list[str]) -> list[DocumentVersion]:
    rng = random.Random(35)
    docs: list[DocumentVersion] = []
    for part, realm in zip(SHAPES[shape][1], realms, strict=True):
        if part.size == 0:
            docs.append(huge_document(rng, realm))
        else:
            docs.extend(document(rng, realm, len(docs) + i, part.size) for i in range(part.count))
    return docs


def in_flight(spans: list[tuple[float, float]], bound: int) -> tuple[list[float], str]:
    """Share of the span at each count of calls in flight, and a strip over time."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    first, last = events[0][0], events[-1][0]
    total = last - first or 1.0
    shares = [0.0] * (bound + 2)
    slices = [0.0] * STRIP
    width = total / STRIP
    level, at = 0, first
    for when, step in events:
        if when > at:
            shares[min(level, bound + 1)] += (when - at) / total
            _spread(slices, at - first, when - first, width, level)
        level += step
        at = when
    strip = "".join(
        LEVELS[min(len(LEVELS) - 1, round(s / width / bound * (len(LEVELS) - 1)))] for s in slices
    )
    return shares, strip


def _spread(slices: list[float], start: float, end: float, width: float, level: int) -> None:
    """Add ``level`` calls over [start, end) to the time slices it covers."""
    i = min(len(slices) - 1, int(start / width))
    while start < end and i < len(slices):
        stop = min(end, (i + 1) * width)
        slices[i] += level * (stop - start)
        start = stop
        i += 1


async def drain(args: argparse.Namespace, shape: str, bound: int, checkout: Path | None) -> Figures:
    """Publish the shape's backlog and time a fresh indexer draining it."""
    bootstrap, dsn = services.given_or_up()
    parts = SHAPES[shape][1]
    prefix = f"mb{uuid.uuid4().hex[:8]}"
    realms = [f"mb{uuid.uuid4().hex[:8]}" for _ in parts]
    group, topic = f"mb-{uuid.uuid4().hex[:8]}", f"{prefix}.documents"
    await ensure_topic_specs(bootstrap, topic_specs(prefix, partitions=max(2, len(realms))))
    docs = corpus(shape, realms)
    chunks = sum(len(chunk_document(d.content or "")) for d in docs)
    model = ScriptedServer(args.latency, scripted_answers(docs))
    env = dict(
        os.environ,
        TIDEGRAPH_KAFKA_BOOTSTRAP=bootstrap,
        TIDEGRAPH_PG_DSN=dsn,
        TIDEGRAPH_TOPIC_PREFIX=prefix,
        TIDEGRAPH_EMBEDDER="hashing:384",
        TIDEGRAPH_EXTRACTOR="llm",
        TIDEGRAPH_LLM_BASE_URL=model.base_url,
        TIDEGRAPH_LLM_MODEL="bench-chat",
        OPENAI_API_KEY="bench",
        TIDEGRAPH_LLM_MAX_IN_FLIGHT=str(bound),
    )
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(checkout / p) for p in PACKAGES)
    try:
        await publish(bootstrap, topic, docs, partitions={r: i for i, r in enumerate(realms)})
        postmaster = await postmaster_pid(dsn)
        pg_before, model_before = postgres_cpu(postmaster), process_cpu(model.pid)
        launched = time.time()
        command = [sys.executable, "-m", "tidegraph.infra.cli", "indexer", "--group", group]
        command += ["--log-level", "WARNING"]
        if args.concurrency:
            command += ["--concurrency", str(args.concurrency)]
        if args.max_poll_records:
            command += ["--max-poll-records", str(args.max_poll_records)]
        proc = subprocess.Popen(command, env=env, cwd=REPO)
        try:
            await wait_applied(dsn, group, topic, len(docs), proc=proc)
            done = time.time()
            cpu_indexer = process_cpu(proc.pid)
            load = os.getloadavg()[0]
        finally:
            proc.terminate()
            proc.wait(30)
        cpu_pg = postgres_cpu(postmaster) - pg_before
        cpu_model = process_cpu(model.pid) - model_before
        async with httpx.AsyncClient() as client:
            spans = (await client.get(f"{model.base_url}/_scripted/spans")).json()["chat"]
    finally:
        model.stop()
    spans = [(float(a), float(b)) for a, b in spans]
    levels, strip = in_flight(spans, bound)
    first = min(a for a, _ in spans)
    return Figures(
        docs=len(docs),
        chunks=chunks,
        calls=len(spans),
        ideal=len(spans) * args.latency / bound,
        span=max(b for _, b in spans) - first,
        drain=done - launched,
        start=first - launched,
        levels=levels,
        strip=strip,
        cpu_indexer=cpu_indexer,
        cpu_pg=cpu_pg,
        cpu_model=cpu_model,
        load=load,
    )


def histogram(levels: list[float], bound: int) -> str:
    """The shares grouped in quarters of the bound, the bound itself on its own."""
    edges = sorted({0, *(max(1, bound * q // 4) for q in (1, 2, 3)), bound})
    out = [f"0 {levels[0]:.0%}"]
    low = 1
    for edge in edges[1:]:
        top = edge - 1 if edge == bound else edge
        if top >= low:
            share = sum(levels[low : top + 1])
            out.append(f"{low}–{top} {share:.0%}" if top > low else f"{low} {share:.0%}")
            low = top + 1
    out.append(f"{bound} {levels[bound]:.0%}")
    if levels[bound + 1]:
        out.append(f">{bound} {levels[bound + 1]:.0%}")
    return ", ".join(out)


def show(label: str, f: Figures, bound: int) -> None:
    print(
        f"  {label:<7} {f.calls:>5} calls, ideal {f.ideal:6.1f} s; model span {f.span:6.1f} s "
        f"= {f.share:4.0%} of the ideal; whole drain {f.drain:6.1f} s = {f.share_drain:4.0%} "
        f"(start {f.start:.1f} s, after the last answer {f.drain - f.start - f.span:.1f} s)"
    )
    print(f"          in flight: {histogram(f.levels, bound)}")
    print(f"          over time: |{f.strip}|")
    per = 1000 / f.docs
    print(
        f"          CPU per document: indexer {f.cpu_indexer * per:.1f} ms, PostgreSQL "
        f"{f.cpu_pg * per:.1f} ms, endpoint {f.cpu_model * per:.1f} ms "
        f"({f.docs} documents, {f.chunks} chunks)"
    )
    cores = (f.cpu_indexer + f.cpu_pg + f.cpu_model) / f.ideal
    print(
        f"          cores busy at the ideal rate: {cores:.2f} of {os.cpu_count()}; "
        f"load average {f.load:.1f} at the end"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="small,large,huge,realms")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per model call")
    parser.add_argument(
        "--in-flight", default="16", help="calls the endpoint allows at once (comma list)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per shape and side")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout to run too")
    parser.add_argument("--concurrency", type=int, default=None, help="the indexer's --concurrency")
    parser.add_argument(
        "--max-poll-records", type=int, default=None, help="the indexer's --max-poll-records"
    )
    args = parser.parse_args()
    sides: list[tuple[str, Path | None]] = [("this", None)]
    if args.compare is not None:
        sides.insert(0, ("other", args.compare.resolve()))
    print(
        f"scripted model: {args.latency * 1000:.0f} ms a call; sides: "
        + ", ".join(f"{name} = {path or REPO}" for name, path in sides)
    )
    for bound in (int(b) for b in args.in_flight.split(",")):
        for shape in args.shapes.split(","):
            print(f"\n{shape} ({SHAPES[shape][0]}), {bound} calls in flight")
            results: dict[str, list[Figures]] = {name: [] for name, _ in sides}
            for _ in range(args.repeat):
                for name, checkout in sides:
                    figures = await drain(args, shape, bound, checkout)
                    results[name].append(figures)
                    show(name, figures, bound)
            if args.repeat > 1 or len(sides) > 1:
                for name, runs in results.items():
                    print(
                        f"  median {name}: {statistics.median(r.share for r in runs):.0%} of the "
                        f"ideal over the model span, "
                        f"{statistics.median(r.share_drain for r in runs):.0%} over the whole "
                        f"drain ({len(runs)} runs)"
                    )


if __name__ == "__main__":
    asyncio.run(main())
