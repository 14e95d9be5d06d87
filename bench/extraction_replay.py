"""Re-indexing throughput when the extraction cache in PostgreSQL answers most chunks.

Question answered: when documents come back with only their tail changed, how fast does
the indexer apply them, and what does it still pay the model? Through the whole path:
Kafka, a real ``tidegraph indexer`` process (model extractor behind the realm's
``extraction_cache`` table, model embedder), the scripted OpenAI-compatible server of the
test suite in its own process with ``--latency`` seconds per call, PostgreSQL.

Three phases over the same ``--documents`` documents of ``--chunks`` chunks each (one
paragraph per chunk at the default 2,000-character chunk budget), one realm:

1. ``cold``: every chunk is extracted by the model (a first pass and one gleaning pass)
   and its answer stored in the cache; the document is embedded in one call.
2. ``tail changed``: every document re-published with one sentence appended to its last
   paragraph. Only the last chunk's text changes, and the chunks before it keep their text
   and their document context, so they are answered by the cache (a PostgreSQL read each);
   the last chunk costs its two model calls and the document its embedding call.
3. ``unchanged``: every document re-sent as it is: a no-op by content hash, no model call
   of any kind.

For each phase: wall-clock time from the first record published to the last position
stored (the indexer is running and warmed up beforehand), documents/s, chunks, model calls
(chat and embeddings, counted by the server), and cache hits/misses (the indexer's own
Prometheus counters). The phases differ only in how many model calls they make, so the
cold/tail-changed ratio is what the cache saves when the endpoint is the bottleneck.

Services: ``TIDEGRAPH_KAFKA_BOOTSTRAP`` / ``TIDEGRAPH_PG_DSN`` when set, else the ones
``tidegraph up`` runs (started if needed).

    .venv/bin/python bench/extraction_replay.py [--documents 48] [--chunks 5]
        [--latency 0.3] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaProducer
from progress import wait_applied
from prometheus_client.parser import text_string_to_metric_families
from scripted import ScriptedServer

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.indexer.extraction.chunking import chunk_document
from tidegraph.infra import services
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.topics import topic_specs

REPO = Path(__file__).resolve().parents[1]
CHUNK_BUDGET = 2000
"""The indexer's default chunk budget (``PipelineConfig.chunk_chars``)."""
EMBED_DIM = 64
FIRST = ["Mara", "Tobias", "Henrik", "Ada", "Lena", "Corin", "Ivo", "Selma"]
LAST = ["Ellison", "Rook", "Vale", "Quill", "Marsh", "Doyle", "Farrow", "Lindqvist"]
SHIP_A = ["Swift", "Grey", "Northern", "Silver", "Bold", "Quiet", "Red", "Far"]
SHIP_B = ["Kestrel", "Heron", "Osprey", "Petrel", "Tern", "Curlew", "Plover", "Merlin"]
YARDS = ["Wrenfield Shipyard", "Rookwater Yard", "Alder Dock Company", "Northgate Works"]
FILLER = [
    "The yard books of the period record the timber bought for each hull and its price.",
    "Crews were signed on at the harbour office and paid off at the end of each voyage.",
    "Letters from the owners discuss insurance, cargo rates and the state of the quays.",
    "Much of the surviving material concerns repairs carried out over the winter months.",
    "The shipping registers list tonnage, rig and master for every vessel launched.",
    "Contemporary newspapers reported launches, trials and the occasional collision.",
]


def _tag(d: int) -> str:
    return f"bench-doc-{d:04d}"


def _names(d: int) -> tuple[str, str, str]:
    person = f"{FIRST[d % len(FIRST)]} {LAST[(d // len(FIRST)) % len(LAST)]}"
    ship = f"{SHIP_A[d % len(SHIP_A)]} {SHIP_B[(d // len(SHIP_A)) % len(SHIP_B)]}"
    return person, ship, YARDS[d % len(YARDS)]


def _paragraph(d: int, p: int, size: int) -> str:
    person, ship, yard = _names(d)
    words = [f"{_tag(d)} part {p}: {person} designed the {ship}, which {yard} built."]
    i = d + p
    while sum(len(w) + 1 for w in words) < size:
        words.append(FILLER[i % len(FILLER)])
        i += 1
    return " ".join(words)


def document(d: int, chunks: int, revision: int) -> str:
    """``chunks`` paragraphs of about 1,700 characters; revision 2 adds a last sentence."""
    paragraphs = [_paragraph(d, p, 1700) for p in range(chunks)]
    if revision > 1:
        paragraphs[-1] += f" A note added in revision {revision} corrects the launch date."
    return "\n\n".join(paragraphs)


def fixture(d: int) -> dict[str, Any]:
    person, ship, yard = _names(d)
    output = {
        "entities": [
            {"name": person, "type": "Person", "description": "Naval architect.", "aliases": []},
            {"name": ship, "type": "Artifact", "description": "A clipper.", "aliases": []},
            {"name": yard, "type": "Organization", "description": "A shipyard.", "aliases": []},
        ],
        "relations": [
            {"subject": person, "predicate": "designed", "object": ship, "description": "",
             "negated": False, "confidence": 1.0, "valid_from": None, "valid_to": None},
            {"subject": yard, "predicate": "built", "object": ship, "description": "",
             "negated": False, "confidence": 1.0, "valid_from": None, "valid_to": None},
        ],
    }  # fmt: skip
    return {"match": _tag(d), "output": output}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Counts:
    """What the endpoint and the indexer counted so far."""

    chat: int
    embed: int
    hits: float
    misses: float
    prepare_seconds: float
    """Sum over documents of chunking, extraction and embedding time."""
    write_seconds: float
    """Sum over records of their write transactions."""

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.chat - other.chat, self.embed - other.embed,
            self.hits - other.hits, self.misses - other.misses,
            self.prepare_seconds - other.prepare_seconds,
            self.write_seconds - other.write_seconds,
        )  # fmt: skip


def counts(server: ScriptedServer, metrics_port: int, realm: str) -> Counts:
    calls = server.stats()["calls"]
    values: dict[str, float] = {}
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("realm", realm) == realm:
                values[s.name] = s.value
    return Counts(
        int(calls.get("chat", 0)),
        int(calls.get("embed", 0)),
        values.get("tidegraph_extraction_cache_hits_total", 0.0),
        values.get("tidegraph_extraction_cache_misses_total", 0.0),
        values.get("tidegraph_indexer_prepare_seconds_sum", 0.0),
        values.get("tidegraph_indexer_apply_seconds_sum", 0.0),
    )


def upsert(realm: str, doc_key: str, content: str) -> DocumentVersion:
    return DocumentVersion(
        realm=realm, doc_key=doc_key, op="upsert", content=content,
        content_hash=content_hash(content), title="Yard records", event_time=datetime.now(UTC),
    )  # fmt: skip


async def publish(bootstrap: str, topic: str, docs: list[DocumentVersion]) -> None:
    producer = AIOKafkaProducer(
        **kafka_client_options(),
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
    )
    await producer.start()
    try:
        futures = [await producer.send(topic, d.to_json(), key=d.realm.encode()) for d in docs]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def start_indexer(
    env: dict[str, str], group: str, concurrency: int, metrics_port: int, log: Path
) -> subprocess.Popen[bytes]:
    """``tidegraph indexer`` as production runs it, its log in ``log``."""
    with open(log, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tidegraph.infra.cli", "indexer", "--group", group,
             "--concurrency", str(concurrency), "--metrics-port", str(metrics_port),
             "--log-level", "WARNING"],
            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


async def run(args: argparse.Namespace) -> int:
    bootstrap, dsn = services.given_or_up()
    n, c = args.documents, args.chunks
    first, changed = document(0, c, 1), document(0, c, 2)
    old = [ch.text for ch in chunk_document(first, CHUNK_BUDGET, 200)]
    new = [ch.text for ch in chunk_document(changed, CHUNK_BUDGET, 200)]
    if len(old) != c or old[:-1] != new[:-1] or old[-1] == new[-1]:
        raise RuntimeError("the revision must change only the last of the document's chunks")

    prefix = f"bench{uuid.uuid4().hex[:8]}"
    realm = f"bench{uuid.uuid4().hex[:8]}"
    group = f"bench-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.documents"
    await ensure_topic_specs(bootstrap, topic_specs(prefix, partitions=1))
    tmp = tempfile.TemporaryDirectory()
    server = ScriptedServer(args.latency, [fixture(d) for d in range(n + 1)], embed_dim=EMBED_DIM)
    metrics_port = _free_port()
    env = dict(
        os.environ, TIDEGRAPH_KAFKA_BOOTSTRAP=bootstrap, TIDEGRAPH_PG_DSN=dsn,
        TIDEGRAPH_TOPIC_PREFIX=prefix, TIDEGRAPH_EXTRACTOR="llm",
        TIDEGRAPH_EMBEDDER=f"llm:bench-embed:{EMBED_DIM}", TIDEGRAPH_LLM_BASE_URL=server.base_url,
        TIDEGRAPH_LLM_MODEL="bench-chat", TIDEGRAPH_EMBED_MODEL="bench-embed",
        OPENAI_API_KEY="bench", TIDEGRAPH_LLM_MAX_IN_FLIGHT=str(args.in_flight),
    )  # fmt: skip
    log = Path(tmp.name) / "indexer.log"
    proc = start_indexer(env, group, args.concurrency, metrics_port, log)
    print(
        f"{n} documents x {c} chunks (~{len(first) / 1000:.1f} KB), scripted endpoint "
        f"{args.latency * 1000:.0f} ms per call, {args.in_flight} calls in flight, "
        f"{args.concurrency} documents prepared at once, gleaning 1, realm {realm}"
    )
    header = (
        f"{'phase':<13} {'docs':>5} {'seconds':>8} {'docs/s':>7} {'chat':>6} {'embed':>6} "
        f"{'cache hits':>10} {'misses':>7} {'prepare ms/doc':>14} {'write ms/doc':>12}"
    )
    rows: dict[str, float] = {}
    try:
        # Warm up outside the measurement: group join, realm creation, connections.
        await publish(bootstrap, topic, [upsert(realm, "warm.md", document(n, c, 1))])
        await wait_applied(dsn, group, topic, 1, proc=proc, limit=120)
        print(header)
        print("-" * len(header))
        applied = 1
        phases = [("cold", 1), ("tail changed", 2), ("unchanged", 2)]
        for name, revision in phases:
            docs = [upsert(realm, f"doc-{d:04d}.md", document(d, c, revision)) for d in range(n)]
            before = counts(server, metrics_port, realm)
            started = time.perf_counter()
            await publish(bootstrap, topic, docs)
            applied += n
            await wait_applied(dsn, group, topic, applied, proc=proc, limit=args.timeout)
            seconds = time.perf_counter() - started
            spent = counts(server, metrics_port, realm) - before
            rows[name] = n / seconds
            print(
                f"{name:<13} {n:>5} {seconds:>8.2f} {n / seconds:>7.1f} {spent.chat:>6} "
                f"{spent.embed:>6} {spent.hits:>10.0f} {spent.misses:>7.0f} "
                f"{spent.prepare_seconds / n * 1000:>14.0f} {spent.write_seconds / n * 1000:>12.0f}"
            )
        print(
            f"tail changed: {(c - 1) / c:.0%} of chunks answered from the PostgreSQL cache, "
            f"{rows['tail changed'] / rows['cold']:.1f}x the cold rate; unchanged: "
            f"{rows['unchanged'] / rows['cold']:.0f}x (no-op by hash, no model call)"
        )
    except BaseException:
        print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        server.stop()
        tmp.cleanup()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=48, help="documents per phase")
    parser.add_argument("--chunks", type=int, default=5, help="chunks per document")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per model call")
    parser.add_argument("--concurrency", type=int, default=8, help="documents prepared at once")
    parser.add_argument("--in-flight", type=int, default=16, help="model calls in flight")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per phase, at most")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
