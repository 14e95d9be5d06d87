"""Load benchmark: many concurrent clients against a running query service for a while.

Builds a realm (``--entities``, through the indexer's own write transaction, as
``bench/query.py`` does), starts ``tidegraph serve`` on a loopback port (a separate
process), then runs ``--clients`` concurrent clients for ``--duration`` seconds: most post
``query_data`` (modes and questions in turn), a share (``--feed-share``) follow the change
feed (``GET /changes`` pages from sequence 0 up to the head, then again from a random earlier
sequence, as new subscribers and catching-up ones do). It prints requests/s, p50/p99
latency per kind, the error count (any transport error or non-200 answer; must be 0), and
the service process's resident memory sampled every second (start, middle, end, peak), to
show memory stays flat under sustained load.

The clients run in this process on the same machine: on few cores they compete with the
service for CPU, so the figures are a floor.

Services: ``TIDEGRAPH_PG_DSN`` / ``TIDEGRAPH_KAFKA_BOOTSTRAP`` when set, else the ones
``tidegraph up`` runs (started if needed). Run:
``.venv/bin/python bench/load.py [--clients 32] [--duration 60] [--entities 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from query import _drop, load_writer, make_corpus, make_queries, service_ef, start_server
from shapes import Shape

from tidegraph.infra import services
from tidegraph.query_service.config import QuerySettings

MODES = ("mix", "local", "global", "naive")
FEED_PAGE = 100


@dataclass
class Tally:
    """Latencies (ms) and errors of one kind of request."""

    samples: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""

    def failed(self, what: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or what


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` (``VmRSS`` in ``/proc``), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


async def sample_rss(pid: int, stop: asyncio.Event, into: list[tuple[float, int]]) -> None:
    started = time.monotonic()
    while not stop.is_set():
        into.append((time.monotonic() - started, rss_kib(pid)))
        try:
            await asyncio.wait_for(stop.wait(), 1.0)
        except TimeoutError:
            pass
    into.append((time.monotonic() - started, rss_kib(pid)))


async def querier(
    client: httpx.AsyncClient,
    realm: str,
    queries: list[str],
    n: int,
    stop: asyncio.Event,
    tally: Tally,
) -> None:
    i = n
    while not stop.is_set():
        body = {"query": queries[i % len(queries)], "mode": MODES[i % len(MODES)]}
        i += 7
        t = time.perf_counter()
        try:
            r = await client.post(f"/v1/realms/{realm}/query_data", json=body)
        except httpx.HTTPError as exc:
            tally.failed(repr(exc))
            continue
        tally.samples.append((time.perf_counter() - t) * 1000)
        if r.status_code != 200:
            tally.failed(f"{r.status_code}: {r.text[:200]}")


async def follower(
    client: httpx.AsyncClient, realm: str, n: int, stop: asyncio.Event, tally: Tally
) -> None:
    rng = random.Random(n)
    after = 0
    while not stop.is_set():
        t = time.perf_counter()
        try:
            r = await client.get(
                f"/v1/realms/{realm}/changes", params={"after_seq": after, "limit": FEED_PAGE}
            )
        except httpx.HTTPError as exc:
            tally.failed(repr(exc))
            continue
        tally.samples.append((time.perf_counter() - t) * 1000)
        if r.status_code != 200:
            tally.failed(f"{r.status_code}: {r.text[:200]}")
            continue
        page = r.json()
        after = int(page["next_seq"])
        if after >= int(page["head_seq"]):  # caught up: a new reader starts further back
            after = rng.randrange(max(1, after))


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


async def run(args: argparse.Namespace) -> int:
    realm = f"bl{uuid.uuid4().hex[:8]}"
    docs = make_corpus(args.entities)
    print(f"  loading {len(docs)} documents into realm {realm}", flush=True)
    await load_writer(args.dsn, realm, docs)
    queries = make_queries(docs)
    ef = QuerySettings()
    proc, url = start_server(
        args.dsn,
        args.bootstrap,
        service_ef(
            {
                "entities": ef.ef_search,
                "relations": ef.ef_search_relations,
                "chunks": ef.ef_search_chunks,
            },
            ef.ef_search_hashing_relations,
            Shape("hashing", 384),
        ),
        "bl",
    )
    feeders = round(args.clients * args.feed_share)
    kinds = {"query_data": Tally(), "changes": Tally()}
    rss: list[tuple[float, int]] = []
    try:
        limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
            for q in queries[:20]:  # warm caches and connections
                await client.post(f"/v1/realms/{realm}/query_data", json={"query": q})
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample_rss(proc.pid, stop, rss))
            workers = [
                follower(client, realm, n, stop, kinds["changes"])
                if n < feeders
                else querier(client, realm, queries, n, stop, kinds["query_data"])
                for n in range(args.clients)
            ]
            tasks = [asyncio.create_task(w) for w in workers]
            started = time.perf_counter()
            await asyncio.sleep(args.duration)
            stop.set()
            await asyncio.gather(*tasks)
            elapsed = time.perf_counter() - started
            await sampler
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)
        if not args.keep:
            await _drop(args.dsn, realm)
    print(
        f"  {args.clients} clients ({args.clients - feeders} query_data, {feeders} change feed) "
        f"for {elapsed:.0f}s"
    )
    print(f"  {'kind':<12}{'requests':>10}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
    total = 0
    errors = 0
    for kind, tally in kinds.items():
        n = len(tally.samples)
        total += n
        errors += tally.errors
        print(
            f"  {kind:<12}{n:>10}{n / elapsed:>9.1f}{statistics.median(tally.samples or [0]):>9.1f}"
            f"{percentile(tally.samples, 0.99):>9.1f}{tally.errors:>8}"
        )
        if tally.first_error:
            print(f"    first error: {tally.first_error}")
    print(f"  {'all':<12}{total:>10}{total / elapsed:>9.1f}{'':>18}{errors:>8}")
    mid = rss[len(rss) // 2]
    print(
        f"  service RSS: start {rss[0][1] / 1024:.0f} MiB, middle ({mid[0]:.0f}s) "
        f"{mid[1] / 1024:.0f} MiB, end {rss[-1][1] / 1024:.0f} MiB, "
        f"peak {max(r for _, r in rss) / 1024:.0f} MiB ({len(rss)} samples)"
    )
    return 1 if errors else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=32, help="concurrent clients")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    p.add_argument("--feed-share", type=float, default=0.25, help="share of change-feed readers")
    p.add_argument("--entities", type=int, default=2000, help="size of the realm")
    p.add_argument("--keep", action="store_true", help="keep the bench realm")
    args = p.parse_args()
    args.bootstrap, args.dsn = services.given_or_up()
    print(
        f"load benchmark: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start",
        flush=True,
    )
    raise SystemExit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
