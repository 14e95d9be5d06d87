"""Rerank benchmark: the latency a rerank endpoint adds to ``query_data``.

A realm of 50 one-passage documents is written through the indexer's write transaction;
``query_data`` asks for 40 passages (``naive``, ``top_k`` 40) through the app in-process
(ASGI) with ``rerank`` off and on in turn, against the scripted rerank server
(``tests/rerank_server.py``) running in its own process and answering after
``--latency`` seconds (50 ms by default). It prints the p50/p99 of the whole request each
way, of the rerank step as the answer's ``stats.rerank_endpoint.ms`` reports it, and of
the step beyond the endpoint's own delay (what tidegraph adds: request building, HTTP on
loopback, parsing, reordering); then the same in ``mix`` with 40 passages and up to 40
relations.

Services: ``TIDEGRAPH_PG_DSN`` when set, else the PostgreSQL ``tidegraph up`` runs.
Run: ``.venv/bin/python bench/rerank.py [--requests 200] [--latency 0.05]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from query import DIM, _drop, load_writer, make_corpus

from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.infra import services
from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.query_service.rerank_endpoint import RerankEndpoint, RerankSettings

REPO = Path(__file__).resolve().parents[1]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_endpoint(latency: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "rerank_server.py"), "--latency", str(latency)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


async def timed(
    client: httpx.AsyncClient, realm: str, body: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    r = await client.post(f"/v1/realms/{realm}/query_data", json=body)
    elapsed = (time.perf_counter() - started) * 1000
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return elapsed, answer


async def measure(
    client: httpx.AsyncClient, realm: str, mode: str, requests: int, latency_ms: float
) -> None:
    queries = [f"passage about entity {i} and its relations" for i in range(requests)]
    off: list[float] = []
    on: list[float] = []
    step: list[float] = []
    passages = relations = 0
    for i, q in enumerate(queries):
        body = {"query": q, "mode": mode, "top_k": 40, "relation_top_k": 40}
        # alternate which goes first, so neither always meets a warmer cache
        order = (False, True) if i % 2 else (True, False)
        for rerank in order:
            ms, answer = await timed(client, realm, {**body, "rerank": rerank})
            if rerank:
                stats = answer["stats"]["rerank_endpoint"]
                assert stats["outcome"] == "reranked", stats
                on.append(ms)
                step.append(stats["ms"])
                passages, relations = len(answer["chunks"]), len(answer["relations"])
            else:
                off.append(ms)
    beyond = [s - latency_ms for s in step]
    print(
        f"  {mode:<6}{passages:>9}{relations:>10}"
        f"{pct(off, 0.5):>9.1f}{pct(off, 0.99):>8.1f}"
        f"{pct(on, 0.5):>9.1f}{pct(on, 0.99):>8.1f}"
        f"{pct(step, 0.5):>9.1f}{pct(step, 0.99):>8.1f}"
        f"{pct(beyond, 0.5):>10.1f}{pct(beyond, 0.99):>8.1f}"
        f"{statistics.mean(on) - statistics.mean(off):>11.1f}",
        flush=True,
    )


async def run(args: argparse.Namespace, dsn: str) -> None:
    realm = f"brr_{uuid.uuid4().hex[:8]}"
    docs = make_corpus(500)  # 50 documents of one passage each
    await load_writer(dsn, realm, docs)
    proc, url = start_endpoint(args.latency)
    pool = make_pool(dsn, min_size=1, max_size=2)
    await pool.open(wait=True)
    reranker = RerankEndpoint(RerankSettings(url=url, model="scripted", timeout=5.0))
    try:
        app = create_app(
            QuerySettings(),
            Deps(pool=pool, embedders=lambda r, p: HashingEmbedder(DIM), reranker=reranker),
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for _ in range(10):  # warm-up: connections, caches, the endpoint's socket
                await timed(client, realm, {"query": "warm", "mode": "naive", "top_k": 40})
            print(
                f"  {'mode':<6}{'passages':>9}{'relations':>10}"
                f"{'off p50':>9}{'p99':>8}{'on p50':>9}{'p99':>8}"
                f"{'step p50':>9}{'p99':>8}{'added p50':>10}{'p99':>8}{'mean diff':>11}"
            )
            for mode in ("naive", "mix"):
                await measure(client, realm, mode, args.requests, args.latency * 1000)
    finally:
        await reranker.aclose()
        await pool.close()
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
        await _drop(dsn, realm)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=200, help="requests each way per mode")
    p.add_argument("--latency", type=float, default=0.05, help="the endpoint's delay (s)")
    args = p.parse_args()
    dsn = os.environ.get("TIDEGRAPH_PG_DSN") or services.given_or_up()[1]
    print(
        f"rerank benchmark: scripted endpoint answering in {args.latency * 1000:.0f} ms, "
        f"{args.requests} requests each way, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at start (milliseconds below)",
        flush=True,
    )
    asyncio.run(run(args, dsn))


if __name__ == "__main__":
    main()
