"""Reads spread over a primary and its streaming standby, against the primary alone; and what
a required sequence (read-your-writes) adds to a read.

It starts its own local topology (`tidegraph up --only postgres --replicas 1` in a state
folder of its own, stopped at the end), loads a realm of ``--entities`` entities through the
indexer's write transaction (``bench/query.py``'s corpus and writer), waits for the standby
to replay it, then runs ``tidegraph serve`` (a separate process, HTTP/1.1 keep-alive) twice:

* **primary alone**: no standby named;
* **spread**: ``TIDEGRAPH_PG_STANDBYS`` names the standby, the primary taking its turn.

For each it prints, per client count, ``query_data`` throughput and p50/p99 latency, and the
CPU per request of ``tidegraph serve``, of the primary and of the standby (``/proc`` of each
postmaster with its backends). Then, against the spread service at one client with
``TIDEGRAPH_PRIMARY_READS=false`` (every read on the standby), the latency of
``GET /entities`` without and with ``X-Tidegraph-Min-Sequence`` set to the realm's head —
idle, and while a writer commits to the realm ``--write-rate`` times a second (each read
requiring the head the primary had just before it, so the standby has to catch up to it).
Before that, the latency of ``GET /changes`` with the standby not named and named: a
named standby fences every page (the node that read it gives its fence, the page waits for
the standby to pass it).

Run: ``.venv/bin/python bench/replicas.py [--entities 4000] [--clients 1,4,8]
[--requests 400]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import psycopg
from cpu import postgres_cpu, postmaster_pid, process_cpu
from query import load_writer, make_corpus, make_queries

from tidegraph.infra import _proc, local_pg_standbys, services
from tidegraph.schemas.servers import MAIN, Servers, load_servers

REPO = Path(__file__).resolve().parents[1]


def cli(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tidegraph.infra.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tidegraph {' '.join(args)}: {done.stderr[-2000:]}")


def serve(servers: Servers, standbys: bool, **settings: str) -> tuple[subprocess.Popen[bytes], str]:
    """``tidegraph serve`` over the primary, and its standby when ``standbys``."""
    port = _proc.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGRAPH_")}
    env |= {
        "TIDEGRAPH_PG_DSN": servers.dsn(MAIN),
        "TIDEGRAPH_KAFKA_BOOTSTRAP": "127.0.0.1:9",  # --no-publisher: never reached
        **{f"TIDEGRAPH_{k.upper()}": v for k, v in settings.items()},
    }
    if standbys:
        env["TIDEGRAPH_PG_STANDBYS"] = local_pg_standbys.standbys_entry(
            {s.label: s.dsn for s in servers.standbys(MAIN)}
        )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegraph.infra.cli", "serve", "--port", str(port),
         "--no-publisher", "--pool-size", "8", "--log-level", "warning"],
        env=env,
        cwd=REPO,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("tidegraph serve did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(30)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def throughput(
    url: str, realm: str, queries: list[str], clients: int, requests: int
) -> tuple[float, float, float, dict[str, int]]:
    """p50, p99 (ms), requests/s, and how many reads each node answered."""
    samples: list[float] = []
    nodes: dict[str, int] = {}
    it = iter(range(requests))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:

        async def worker(w: int) -> None:
            for n in it:
                body = {"query": queries[(n * 7 + w) % len(queries)], "mode": "local"}
                t = time.perf_counter()
                r = await client.post(f"/v1/realms/{realm}/query_data", json=body)
                samples.append((time.perf_counter() - t) * 1000)
                if r.status_code != 200:
                    raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
                node = r.headers["x-tidegraph-served-by"]
                nodes[node] = nodes.get(node, 0) + 1

        for q in queries[:20]:  # warm connections on every node
            await client.post(f"/v1/realms/{realm}/query_data", json={"query": q, "mode": "local"})
        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        elapsed = time.perf_counter() - started
    return (
        statistics.median(samples),
        percentile(samples, 0.99),
        len(samples) / elapsed,
        nodes,
    )


async def spread_table(
    servers: Servers, realm: str, queries: list[str], clients: Sequence[int], requests: int
) -> None:
    primary_pm = await postmaster_pid(servers.dsn(MAIN))
    (standby,) = servers.standbys(MAIN)
    standby_pm = await postmaster_pid(standby.dsn)
    print(
        f"  {'reads':<14}{'clients':>8}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}"
        f"   CPU ms per request: {'serve':>6}{'primary':>8}{'standby':>8}   answered by"
    )
    for label, with_standby in (("primary alone", False), ("spread", True)):
        proc, url = serve(servers, with_standby)
        try:
            for n in clients:
                before = (process_cpu(proc.pid), postgres_cpu(primary_pm), postgres_cpu(standby_pm))
                p50, p99, rps, nodes = await throughput(url, realm, queries, n, requests)
                after = (process_cpu(proc.pid), postgres_cpu(primary_pm), postgres_cpu(standby_pm))
                done = sum(nodes.values())
                ms = [(a - b) * 1000 / done for a, b in zip(after, before, strict=True)]
                who = ", ".join(f"{k} {v}" for k, v in sorted(nodes.items()))
                print(
                    f"  {label:<14}{n:>8}{rps:>8.0f}{p50:>8.1f}{p99:>8.1f}"
                    f"   {'':>20}{ms[0]:>6.1f}{ms[1]:>8.1f}{ms[2]:>8.1f}   {who}",
                    flush=True,
                )
        finally:
            stop(proc)


async def head(conn: psycopg.AsyncConnection[Any], realm: str) -> int:
    cur = await conn.execute(f'SELECT seq FROM "realm_{realm}".meta')  # noqa: S608 - bench realm
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def required_latency(servers: Servers, realm: str, requests: int, write_rate: float) -> None:
    """Entities reads on the standby with and without the realm's head required."""
    proc, url = serve(servers, True, primary_reads="false")
    print(f"  {'writes/s':<10}{'required':<10}{'p50 ms':>8}{'p99 ms':>8}   answered by")
    try:
        for rate in (0.0, write_rate):
            async with (
                await psycopg.AsyncConnection.connect(servers.dsn(MAIN), autocommit=True) as conn,
                httpx.AsyncClient(base_url=url, timeout=30) as client,
            ):
                writing = (
                    asyncio.create_task(writer(servers.dsn(MAIN), realm, rate)) if rate else None
                )
                try:
                    for required in (False, True):
                        samples: list[float] = []
                        nodes: dict[str, int] = {}
                        for _ in range(requests):
                            headers = {}
                            if required:
                                headers["X-Tidegraph-Min-Sequence"] = str(await head(conn, realm))
                            t = time.perf_counter()
                            r = await client.get(
                                f"/v1/realms/{realm}/entities",
                                params={"limit": 20},
                                headers=headers,
                            )
                            samples.append((time.perf_counter() - t) * 1000)
                            assert r.status_code == 200, r.text
                            node = r.headers["x-tidegraph-served-by"]
                            nodes[node] = nodes.get(node, 0) + 1
                        who = ", ".join(f"{k} {v}" for k, v in sorted(nodes.items()))
                        print(
                            f"  {rate:<10.0f}{'yes' if required else 'no':<10}"
                            f"{statistics.median(samples):>8.1f}"
                            f"{percentile(samples, 0.99):>8.1f}   {who}",
                            flush=True,
                        )
                finally:
                    if writing is not None:
                        writing.cancel()
                        await asyncio.gather(writing, return_exceptions=True)
    finally:
        stop(proc)


async def feed_latency(servers: Servers, realm: str, requests: int) -> None:
    """``GET /changes`` (the last 100 changes) with no standby named, and with the standby
    named: then each page waits for the standby to pass the fence of what was read."""
    async with await psycopg.AsyncConnection.connect(servers.dsn(MAIN), autocommit=True) as conn:
        after = max(0, await head(conn, realm) - 3)
    print(f"  {'standby':<16}{'p50 ms':>8}{'p99 ms':>8}   answered by")
    for label, with_standby in (("not named", False), ("named (fenced)", True)):
        proc, url = serve(servers, with_standby)
        try:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                samples: list[float] = []
                nodes: dict[str, int] = {}
                for n in range(requests + 20):
                    t = time.perf_counter()
                    r = await client.get(
                        f"/v1/realms/{realm}/changes", params={"after_seq": after, "limit": 100}
                    )
                    took = (time.perf_counter() - t) * 1000
                    assert r.status_code == 200, r.text
                    if n >= 20:  # the first ones open the connections
                        samples.append(took)
                        node = r.headers["x-tidegraph-served-by"]
                        nodes[node] = nodes.get(node, 0) + 1
            who = ", ".join(f"{k} {v}" for k, v in sorted(nodes.items()))
            print(
                f"  {label:<16}{statistics.median(samples):>8.1f}"
                f"{percentile(samples, 0.99):>8.1f}   {who}",
                flush=True,
            )
        finally:
            stop(proc)


async def writer(dsn: str, realm: str, rate: float) -> None:
    """Commits on the realm at ``rate`` a second, each advancing its head sequence (the
    smallest write there is: the bench realm goes with the topology)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as w:
        while True:
            await w.execute(f'UPDATE "realm_{realm}".meta SET seq = seq + 1')  # noqa: S608
            await asyncio.sleep(1 / rate)


async def run(args: argparse.Namespace) -> None:
    state = REPO / ".tidegraph" / f"bench-replicas-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGRAPH_")}
    env |= {"TIDEGRAPH_STATE_DIR": str(state)}
    port = str(_proc.free_port())
    print(f"topology: a primary and one standby under {state}", flush=True)
    cli(["up", "--only", "postgres", "--replicas", "1", "--pg-port", port], env)
    try:
        written = services.read_env_file(state)
        servers = load_servers(written["TIDEGRAPH_PG_DSN"], written)
        realm = f"bench_rr{uuid.uuid4().hex[:6]}"
        docs = make_corpus(args.entities)
        print(f"loading {len(docs)} documents ({args.entities} entities) into {realm}", flush=True)
        await load_writer(servers.dsn(MAIN), realm, docs)
        with psycopg.connect(servers.dsn(MAIN), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        (standby,) = servers.standbys(MAIN)
        local_pg_standbys.wait_replayed(standby.dsn, str(row[0]), timeout=120)
        queries = make_queries(docs)
        print(f"query_data (local mode), {args.requests} requests per row:", flush=True)
        await spread_table(servers, realm, queries, args.clients, args.requests)
        print("GET /changes, one client, the standby not named and named (fenced):")
        await feed_latency(servers, realm, args.requests)
        print("GET /entities on the standby, one client, without and with a required sequence:")
        await required_latency(servers, realm, args.requests, args.write_rate)
    finally:
        cli(["down"], env)
        shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entities", type=int, default=4000)
    p.add_argument("--clients", default="1,4,8")
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--write-rate", type=float, default=50.0)
    args = p.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
