"""Export benchmark: time and peak memory of ``tidegraph export`` on large realms.

Realms of 10,000 and 100,000 entities (about as many relations) are bulk-loaded the way
``bench/query.py --load copy`` loads them, with their belief histories, and kept for later
runs (vectors of width 16: an export never reads them). Each format is then exported by
``tidegraph export`` in its own process, and its wall time and peak resident memory
(the child's ``VmHWM``) printed with the rows per second and the output's
size; also ``--as-believed-at`` the instant half the documents were written, which reads
the history tables. Finally ``tidegraph serve`` (no publisher) answers the HTTP download of
the same realm, and the service's peak memory before and after it is printed: both paths
stream, so peak memory should not grow with the realm.

Services: ``TIDEGRAPH_PG_DSN`` when set, else the PostgreSQL ``tidegraph up`` runs.
Run: ``.venv/bin/python bench/export.py [--sizes 10000,100000] [--formats graphml,csv,jsonl]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import httpx
from query import T0, build_realm, make_corpus
from shapes import Shape

from tidegraph.infra import services

SHAPE = Shape("hashing", 16)


def run_export(dsn: str, args: list[str]) -> tuple[float, float, float, int]:
    """Wall seconds of one ``tidegraph export`` process, the seconds it reports for the
    export itself (start-up and imports left out), its peak resident memory (MiB) and the
    rows (entities and relations) it wrote.

    The peak is the child's own ``VmHWM``, sampled until it exits: ``ru_maxrss`` would
    also count the pages of this process it was forked from before its ``exec``."""
    env = {**os.environ, "TIDEGRAPH_PG_DSN": dsn}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegraph.infra.cli", "export", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    peak = 0.0
    while proc.poll() is None:
        try:
            peak = max(peak, vm_hwm(proc.pid))
        except OSError:
            break
        time.sleep(0.05)
    _, err_bytes = proc.communicate()
    took = time.perf_counter() - started
    err = err_bytes.decode()
    wrote = re.search(r"wrote ([\d,]+) entities and ([\d,]+) relations .* in ([\d.]+) s", err)
    if proc.returncode != 0 or wrote is None:
        raise SystemExit(f"export failed: {err}")
    rows = int(wrote[1].replace(",", "")) + int(wrote[2].replace(",", ""))
    return took, float(wrote[3]), peak, rows


def size_of(path: Path) -> float:
    files = [path] if path.is_file() else list(path.iterdir())
    return sum(f.stat().st_size for f in files) / 2**20


def vm_hwm(pid: int) -> float:
    """Peak resident memory of a running process (MiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def download(dsn: str, realm: str, formats: list[str]) -> None:
    port = free_port()
    env = {**os.environ, "TIDEGRAPH_PG_DSN": dsn}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegraph.infra.cli", "serve", "--no-publisher",
         "--port", str(port), "--log-level", "WARNING"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            for _ in range(300):
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.2)
            for fmt in formats:
                before = vm_hwm(proc.pid)
                started = time.perf_counter()
                received = 0
                params = {"format": fmt}
                async with client.stream("GET", f"/v1/realms/{realm}/export", params=params) as r:
                    assert r.status_code == 200, await r.aread()
                    async for chunk in r.aiter_bytes():
                        received += len(chunk)
                took = time.perf_counter() - started
                print(
                    f"  HTTP {fmt:<8}{took:>8.1f} s{received / 2**20:>9.1f} MiB"
                    f"   service peak RSS {before:.0f} MiB before, {vm_hwm(proc.pid):.0f} after",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(30)


async def bench_size(dsn: str, size: int, formats: list[str]) -> None:
    docs = make_corpus(size)
    print(f"\n== {size:,} entities ==", flush=True)
    ns = argparse.Namespace(reuse=None, load="copy", cache=True, dsn=dsn)
    realm = await build_realm(ns, size, SHAPE, docs)
    half = (T0 + timedelta(seconds=len(docs) // 2)).isoformat()
    print(
        f"  {'format':<30}{'rows':>9}{'wall':>8}{'export':>8}{'rows/s':>9}{'peak RSS':>10}"
        f"{'output':>10}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(f, []) for f in formats] + [("graphml", ["--as-believed-at", half])]
        for fmt, extra in runs:
            out = Path(tmp) / f"out-{fmt}-{len(extra)}"
            wall, took, peak, rows = run_export(
                dsn, [realm, "--format", fmt, "-o", str(out), *extra]
            )
            label = fmt + (" as believed at half" if extra else "")
            print(
                f"  {label:<30}{rows:>9,}{wall:>7.1f}s{took:>7.1f}s{rows / took:>9,.0f}"
                f"{peak:>6.0f} MiB{size_of(out):>6.1f} MiB",
                flush=True,
            )
    await download(dsn, realm, formats)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--formats", default="graphml,csv,jsonl")
    args = p.parse_args()
    dsn = os.environ.get("TIDEGRAPH_PG_DSN") or services.given_or_up()[1]
    print(
        f"export benchmark: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at"
        " start; rows are the entities and relations written",
        flush=True,
    )
    for size in (int(s) for s in args.sizes.split(",")):
        asyncio.run(bench_size(dsn, size, args.formats.split(",")))


if __name__ == "__main__":
    main()
