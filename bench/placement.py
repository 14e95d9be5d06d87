"""Realms placed on two PostgreSQL servers: what each server spends per document and per
query, and a live move of a 10,000-entity realm under continuous ingest.

Two embedded servers of its own (``main`` and ``b``, free ports, a throw-away folder) and
the Kafka broker ``tidegraph up`` runs (or ``TIDEGRAPH_KAFKA_BOOTSTRAP``):

1. **Per-server cost.** Four realms, two on each server, receive ``--documents`` documents
   of about 3 KB through Kafka and one real ``tidegraph indexer`` process (one consumer
   group for both servers). Printed per server: documents, PostgreSQL CPU per document;
   and the indexer's CPU per document. Then ``--queries`` ``query_data`` requests (mode
   ``mix``) per realm through the query service (in process, over ASGI): PostgreSQL CPU per
   query per server, and the p50/p99 latency. On one 2-core machine both servers share the
   same cores, so these are CPU costs, not a speed-up; the capacity model at the end turns
   them into documents/s and queries/s per PostgreSQL core and per indexer process.
2. **A move.** A realm of about 10,000 entities (from ``--names`` names, of which the
   rules extractor finds about 70%) is written on ``main`` through the indexer from
   Kafka, then fed new documents through Kafka at ``--ingest-rate`` documents/s while
   ``RealmMove`` copies it to ``b`` (logical replication), pauses its writes, switches and
   drops the old copy. Printed: how long
   writes waited (the pause, with its steps), the whole move, and the documents published
   meanwhile — all applied once on ``b`` at the end.

Run: ``.venv/bin/python bench/placement.py [--documents 400] [--queries 100]
[--names 14000] [--ingest-rate 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaProducer
from cpu import postgres_cpu, postmaster_pid, process_cpu
from psycopg import sql
from query import DIM, make_corpus
from replay import publish

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.infra import _proc, local_pg, services
from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.kafka_security import producer_options
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.schemas.servers import MAIN, Servers
from tidegraph.schemas.topics import topic_specs
from tidegraph.store.cluster import Cluster
from tidegraph.store.move import RealmMove
from tidegraph.store.placement import place_realm

REPO = Path(__file__).resolve().parents[1]
EMBEDDER = f"hashing:{DIM}"
FIRST = ["Ada", "Alan", "Grace", "Emmy", "Kurt", "John", "Marie", "Niels", "Lise", "Paul"]
LAST = ["Lovelace", "Turing", "Hopper", "Noether", "Goedel", "Neumann", "Curie", "Bohr"]
VERBS = ["worked with", "corresponded with", "studied with", "mentored"]


def _text(rng: random.Random, size: int) -> str:
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) < size:
        a = f"{rng.choice(FIRST)}{rng.randrange(400)} {rng.choice(LAST)}"
        b = f"{rng.choice(FIRST)}{rng.randrange(400)} {rng.choice(LAST)}"
        parts.append(f"{a} {rng.choice(VERBS)} {b} at the institute for several years.")
    return " ".join(parts)


def _version(realm: str, key: str, text: str, n: int) -> DocumentVersion:
    return DocumentVersion(
        realm=realm,
        doc_key=key,
        op="upsert",
        content=text,
        content_hash=content_hash(text),
        order_key=f"{n:08d}",
        event_time=datetime.now(UTC),
    )


def _start_server(root: Path) -> local_pg.PgProcess:
    layout = local_pg.PgLayout.under(root)
    process = local_pg.launch(layout, port=_proc.free_port())
    local_pg.wait_ready(layout, process, timeout=60)
    local_pg.ensure_vector(process.dsn)
    return process


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _applied(cluster: Cluster, server: str, realm: str) -> int:
    """Documents applied: indexed, or failed (a document the rules extractor reads nothing
    in is stored as failed, with the reason)."""
    async with cluster.connection(server) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE status IN ('indexed', 'failed')").format(
                sql.Identifier(f"realm_{realm}", "documents")
            )
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _wait_indexed(
    cluster: Cluster, where: dict[str, str], expected: dict[str, int], proc: Any, limit: float
) -> float:
    started = time.perf_counter()
    while True:
        counts = {r: await _applied(cluster, where[r], r) for r in expected}
        if all(counts[r] >= expected[r] for r in expected):
            return time.perf_counter() - started
        if proc.poll() is not None:
            raise RuntimeError(f"the indexer exited with {proc.returncode}")
        if time.perf_counter() - started > limit:
            raise RuntimeError(f"not applied within {limit:.0f}s: {counts} of {expected}")
        await asyncio.sleep(0.2)


def _indexer(env: dict[str, str], group: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tidegraph.infra.cli", "indexer", "--group", group]
    return subprocess.Popen([*command, "--log-level", "WARNING"], env=env, cwd=REPO)


async def per_server_cost(
    args: argparse.Namespace, cluster: Cluster, bootstrap: str, env: dict[str, str]
) -> None:
    realms = {f"pl{uuid.uuid4().hex[:8]}": server for server in (MAIN, "b", MAIN, "b")}
    for realm, server in realms.items():
        await place_realm(cluster, realm, RealmConfig(embedder=EMBEDDER), server)
    rng = random.Random(5)
    names = list(realms)
    docs = [
        _version(names[i % 4], f"d{i:05d}.md", _text(rng, args.size), i)
        for i in range(args.documents)
    ]
    await publish(bootstrap, env["TIDEGRAPH_TOPIC_PREFIX"] + ".documents", docs)
    pms = {s: await postmaster_pid(cluster.servers.dsn(s)) for s in (MAIN, "b")}
    before = {s: postgres_cpu(pm) for s, pm in pms.items()}
    proc = _indexer(env, f"pl-{uuid.uuid4().hex[:8]}")
    try:
        expected = {r: sum(1 for d in docs if d.realm == r) for r in realms}
        elapsed = await _wait_indexed(cluster, realms, expected, proc, 1800)
        indexer_cpu = process_cpu(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    spent = {s: postgres_cpu(pm) - before[s] for s, pm in pms.items()}
    print(f"indexing: {len(docs)} documents of ~{args.size} chars in {elapsed:.1f}s")
    for server in (MAIN, "b"):
        n = sum(expected[r] for r, s in realms.items() if s == server)
        print(
            f"  server {server:<4}: {n} documents, PostgreSQL CPU {spent[server]:.1f}s"
            f" = {spent[server] / n * 1000:.1f} ms per document"
        )
    print(f"  indexer process: {indexer_cpu / len(docs) * 1000:.1f} ms CPU per document")
    await _queries(args, cluster, realms, pms, spent, indexer_cpu / len(docs), rng)


async def _queries(
    args: argparse.Namespace,
    cluster: Cluster,
    realms: dict[str, str],
    pms: dict[str, int | None],
    indexing: dict[str, float],
    indexer_per_doc: float,
    rng: random.Random,
) -> None:
    app = create_app(
        QuerySettings(),
        Deps(pool=cluster.main, embedders=lambda r, p: HashingEmbedder(DIM), cluster=cluster),
    )
    latencies: dict[str, list[float]] = {MAIN: [], "b": []}
    pg: dict[str, float] = {MAIN: 0.0, "b": 0.0}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://placement.bench") as c:
        for realm, server in realms.items():
            for _ in range(args.queries):
                person = f"{rng.choice(FIRST)}{rng.randrange(400)} {rng.choice(LAST)}"
                body = {"query": f"Who worked with {person}?", "mode": "mix"}
                cpu = postgres_cpu(pms[server])
                started = time.perf_counter()
                response = await c.post(f"/v1/realms/{realm}/query_data", json=body)
                latencies[server].append(time.perf_counter() - started)
                pg[server] += postgres_cpu(pms[server]) - cpu
                response.raise_for_status()
    await app.state.database_gates.aclose()
    await app.state.database_gate.aclose()
    print(f"queries: {args.queries} query_data (mix) per realm, one client")
    for server in (MAIN, "b"):
        lat = latencies[server]
        print(
            f"  server {server:<4}: p50 {_pct(lat, 0.5) * 1000:.0f} ms, p99"
            f" {_pct(lat, 0.99) * 1000:.0f} ms, PostgreSQL CPU {pg[server] / len(lat) * 1000:.1f}"
            " ms per query"
        )
    per_doc = sum(indexing.values()) / args.documents
    per_query = sum(pg.values()) / sum(len(v) for v in latencies.values())
    print("capacity model (CPU-bound, per core, from the figures above):")
    print(f"  documents/s per PostgreSQL core: {1 / per_doc:.0f}")
    print(f"  queries/s per PostgreSQL core:   {1 / per_query:.0f} (mix)")
    print(f"  documents/s per indexer process (one core): {1 / indexer_per_doc:.0f}")


async def a_move(
    args: argparse.Namespace, cluster: Cluster, bootstrap: str, env: dict[str, str]
) -> None:
    realm = f"mv{uuid.uuid4().hex[:8]}"
    corpus = make_corpus(args.names)
    await place_realm(cluster, realm, RealmConfig(embedder=EMBEDDER), MAIN)
    topic = env["TIDEGRAPH_TOPIC_PREFIX"] + ".documents"
    first = [_version(realm, doc.key, doc.text, n) for n, doc in enumerate(corpus)]
    await publish(bootstrap, topic, first)
    started = time.perf_counter()
    proc = _indexer(env, f"mv-{uuid.uuid4().hex[:8]}")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **producer_options())
    await producer.start()
    rng, published, stop = random.Random(9), 0, asyncio.Event()

    async def feed() -> None:
        nonlocal published
        while not stop.is_set():
            n = len(first) + published
            doc = _version(realm, f"live/{published:06d}.md", _text(rng, 1500), n)
            await producer.send_and_wait(topic, doc.to_json(), key=realm.encode())
            published += 1
            await asyncio.sleep(1 / args.ingest_rate)

    await _wait_indexed(cluster, {realm: MAIN}, {realm: len(first)}, proc, 1800)
    async with cluster.connection() as conn:
        cur = await conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(f"realm_{realm}", "entities"))
        )
        entities = int((await cur.fetchone() or (0,))[0])
    print(
        f"move: a realm of {entities} entities from {len(first)} documents, indexed on main in"
        f" {time.perf_counter() - started:.0f}s"
    )
    ingest = asyncio.create_task(feed())
    try:
        await asyncio.sleep(5)  # ingest under way before the move starts
        before = published
        outcome = await RealmMove(cluster, realm, "b", grace=2.0, say=_said).run()
        during = published - before
        stop.set()
        await ingest
        await _wait_indexed(cluster, {realm: "b"}, {realm: len(first) + published}, proc, 600)
    finally:
        stop.set()
        await producer.stop()
        proc.terminate()
        proc.wait(30)
    print(
        f"  writes waited {outcome.pause_seconds:.2f}s; the whole move took"
        f" {outcome.total_seconds:.1f}s; {during} documents published during it, all"
        f" {len(first) + published} applied on b"
    )


def _said(line: str) -> None:
    print(f"  | {line}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--size", type=int, default=3000, help="characters per document")
    parser.add_argument("--queries", type=int, default=100, help="per realm")
    parser.add_argument(
        "--names",
        type=int,
        default=14000,
        help="names in the moved realm's corpus (the rules extractor finds about 70%%)",
    )
    parser.add_argument("--ingest-rate", type=float, default=20.0, help="documents/s")
    parser.add_argument("--skip-cost", action="store_true", help="only the move")
    args = parser.parse_args()
    bootstrap, _ = services.given_or_up()
    with tempfile.TemporaryDirectory(prefix="placement-", dir=REPO / ".tidegraph") as root:
        main_pg = _start_server(Path(root) / "main")
        b_pg = _start_server(Path(root) / "b")
        try:
            servers = Servers.of(main_pg.dsn, {"b": b_pg.dsn})
            cluster = Cluster(servers, lambda _, dsn: make_pool(dsn, min_size=1, max_size=8))
            await cluster.open()
            prefix = f"placement{uuid.uuid4().hex[:8]}"
            await ensure_topic_specs(bootstrap, topic_specs(prefix, partitions=4))
            env = dict(
                os.environ,
                TIDEGRAPH_KAFKA_BOOTSTRAP=bootstrap,
                TIDEGRAPH_PG_DSN=main_pg.dsn,
                TIDEGRAPH_PG_SERVERS=f"b={b_pg.dsn}",
                TIDEGRAPH_TOPIC_PREFIX=prefix,
                TIDEGRAPH_EMBEDDER=EMBEDDER,
                TIDEGRAPH_EXTRACTOR="rules",
            )
            try:
                if args.skip_cost:
                    print("per-server cost: skipped (--skip-cost)")
                else:
                    await per_server_cost(args, cluster, bootstrap, env)
                await a_move(args, cluster, bootstrap, env)
            finally:
                await cluster.close()
        finally:
            for sub in ("main", "b"):
                local_pg.stop(local_pg.PgLayout.under(Path(root) / sub))
    print(f"load average: {os.getloadavg()[0]:.1f} (2-core machine: figures move with it)")


if __name__ == "__main__":
    asyncio.run(main())
