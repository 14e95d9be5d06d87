"""``query_data`` latency of two builds of the query service, request by request in turn.

On a shared, loaded machine, runs measured one after the other differ more than the
builds do: what the other processes do changes from minute to minute. Here two
``tidegraph serve`` processes — this tree's and ``--baseline``'s (another checkout of the
repository, e.g. a detached worktree of the commit a branch started from) — serve the same
realm of ``bench/query.py`` (its cached 10,000-entity realm by default, built there first),
and every question is asked of both, in alternating order, one client at a time, so each
pair of requests meets the same load. It prints, per mode, the p50 and p99 of each build,
the ratio of the p50s and the median of the per-question ratios, and the CPU per request
of each server.

Run: ``.venv/bin/python bench/ab.py --baseline /work/base-checkout [--size 10000]
[--modes mix,local] [--requests 400]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from cpu import process_cpu
from query import (
    cached_realm,
    make_corpus,
    make_queries,
    service_ef,
    start_server,
)
from shapes import Shape

from tidegraph.infra import services
from tidegraph.query_service.config import QuerySettings

FOLDERS = ("schemas", "store", "connectors", "indexer", "query_service", "infra", "client")


def _serve(tree: Path | None, dsn: str, bootstrap: str, ef: dict[str, int]) -> tuple[Any, str]:
    """A server of ``tree``'s packages (``None``: this one's)."""
    saved = os.environ.get("PYTHONPATH")
    if tree is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join(str(tree / f) for f in FOLDERS)
    try:
        return start_server(dsn, bootstrap, ef, "ab")
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


async def _ask(client: httpx.AsyncClient, url: str, realm: str, body: dict[str, str]) -> float:
    t = time.perf_counter()
    r = await client.post(f"{url}/v1/realms/{realm}/query_data", json=body)
    ms = (time.perf_counter() - t) * 1000
    if r.status_code != 200:
        raise RuntimeError(f"{url}: {r.status_code} {r.text[:200]}")
    return ms


def _pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * q))]


async def main(args: argparse.Namespace) -> None:
    bootstrap, dsn = services.given_or_up()
    shape = Shape.parse("hashing-384")
    realm = args.realm or cached_realm(args.size, shape, "writer")
    queries = make_queries(make_corpus(args.size))
    d = QuerySettings()
    ef = service_ef(
        {"entities": d.ef_search, "relations": d.ef_search_relations, "chunks": d.ef_search_chunks},
        d.ef_search_hashing_relations,
        shape,
    )
    base, base_url = _serve(Path(args.baseline), dsn, bootstrap, ef)
    new, new_url = _serve(None, dsn, bootstrap, ef)
    procs = {"baseline": base, "this tree": new}
    urls = {"baseline": base_url, "this tree": new_url}
    print(f"realm {realm}, {args.requests} questions per mode, each asked of both builds")
    print(
        f"  {'mode':<7}{'build':<11}{'p50 ms':>9}{'p99 ms':>9}{'CPU ms/req':>12}"
        f"{'p50 ratio':>11}{'median of ratios':>18}   load"
    )
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            for mode in args.modes.split(","):
                for q in queries[:20]:  # warm both
                    for url in urls.values():
                        await _ask(client, url, realm, {"query": q, "mode": mode})
                samples: dict[str, list[float]] = {k: [] for k in urls}
                cpu = {k: process_cpu(p.pid) for k, p in procs.items()}
                for n in range(args.requests):
                    body = {"query": queries[(n * 7) % len(queries)], "mode": mode}
                    order = list(urls) if n % 2 == 0 else list(reversed(urls))
                    for k in order:
                        samples[k].append(await _ask(client, urls[k], realm, body))
                ratios = [
                    b / a for a, b in zip(samples["baseline"], samples["this tree"], strict=True)
                ]
                p50 = {k: _pct(v, 0.5) for k, v in samples.items()}
                for k, v in samples.items():
                    used = (process_cpu(procs[k].pid) - cpu[k]) * 1000 / len(v)
                    extra = (
                        f"{p50[k] / p50['baseline']:>11.2f}{statistics.median(ratios):>18.2f}"
                        if k == "this tree"
                        else f"{'':>29}"
                    )
                    print(
                        f"  {mode:<7}{k:<11}{p50[k]:>9.1f}{_pct(v, 0.99):>9.1f}{used:>12.1f}"
                        f"{extra}   {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(30)


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--baseline", required=True, help="a checkout of the repository to compare")
    p.add_argument("--size", type=int, default=10_000)
    p.add_argument("--realm", help="a loaded realm (default: bench/query.py's cached one)")
    p.add_argument("--modes", default="mix,local")
    p.add_argument("--requests", type=int, default=400)
    asyncio.run(main(p.parse_args()))


if __name__ == "__main__":
    cli()
