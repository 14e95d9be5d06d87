"""What the change publisher's standby fence adds to the feed's latency: a local primary
and one standby (`up --replicas 1` in a state folder of its own), a commit on the primary,
then the time until the standby has replayed past the fence read after it — the wait the
publisher adds before sending a page (tidegraph.store.standby_fence): reading the fence
(a synchronous commit, so the WAL below it is flushed), then waiting for the standby; and
the check alone when the standby is already there.

    .venv/bin/python bench/standby_fence.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import psycopg

from tidegraph.infra import _proc, local_pg, services
from tidegraph.schemas.servers import MAIN, load_servers
from tidegraph.store.standby_fence import StandbyFence, read_fence

WARM_UP = 5


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(primary: str, standby_dsn: str, rounds: int) -> dict[str, list[float]]:
    servers = load_servers(primary, {"TIDEGRAPH_PG_STANDBYS": f"{MAIN}/s1={standby_dsn}"})
    standbys = servers.standbys(MAIN)
    fence = StandbyFence(poll=0.0005)
    waits: list[float] = []
    checks: list[float] = []
    reads: list[float] = []
    async with await psycopg.AsyncConnection.connect(primary, autocommit=True) as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS bench_fence (n int, body text)")
        try:
            for n in range(rounds + WARM_UP):
                await conn.execute("INSERT INTO bench_fence VALUES (%s, repeat('x', 2000))", (n,))
                start = time.perf_counter()
                mark = await read_fence(conn)
                reads.append(time.perf_counter() - start)
                start = time.perf_counter()
                lagging = await fence.wait(standbys, mark, 10.0)
                waits.append(time.perf_counter() - start)
                assert not lagging, lagging
                start = time.perf_counter()
                assert not await fence.behind(standbys, mark)
                checks.append(time.perf_counter() - start)
        finally:
            await conn.execute("DROP TABLE IF EXISTS bench_fence")
            await fence.close()
    # the first rounds connect to the standby and wait for it to replay the table's creation
    return {"read": reads[WARM_UP:], "wait": waits[WARM_UP:], "check": checks[WARM_UP:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="tidegraph-bench-fence-"))
    try:
        status = services.up(
            state, services=[services.POSTGRES], pg_port=_proc.free_port(), replicas=1
        )
        written = services.read_env_file(state)
        standby_dsn = written["TIDEGRAPH_PG_STANDBYS"].split("=", 1)[1]
        found = asyncio.run(measure(status.pg_dsn, standby_dsn, args.rounds))
    finally:
        services.down(state)
        shutil.rmtree(state, ignore_errors=True)
    print(f"standby fence, {args.rounds} commits of one 2 kB row, one local standby")
    for name, label in (("read", "reading the fence (a synchronous commit)"),
                        ("wait", "then until the standby replayed past it"),
                        ("check", "fence check, standby already there")):  # fmt: skip
        values = found[name]
        print(
            f"  {label:42s} p50 {_ms(values, 0.5):6.2f} ms  p99 {_ms(values, 0.99):6.2f} ms"
            f"  mean {1000 * statistics.fmean(values):6.2f} ms  max {1000 * max(values):7.1f} ms"
        )
    print(f"  server: {local_pg.redact(status.pg_dsn)}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
