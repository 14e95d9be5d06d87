"""How far an indexer group has come, for the benchmarks that drive a real indexer process:
read from the positions it stores, the one account of what was applied."""

from __future__ import annotations

import asyncio
import subprocess
import time

import psycopg

from tidegraph.store import positions


async def applied(dsn: str, group: str, topic: str) -> int:
    """Records the group has applied on the topic."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return await positions.applied(conn, group, topic)


async def wait_applied(
    dsn: str,
    group: str,
    topic: str,
    target: int,
    *,
    limit: float = 3600,
    proc: subprocess.Popen[bytes] | None = None,
) -> float:
    """Seconds until the group has applied ``target`` records; fails fast when the indexer
    process (``proc``) exits first or ``limit`` seconds pass. Polls on one connection, so
    the database's share of a benchmark's CPU is not its logins."""
    start = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while await positions.applied(conn, group, topic) < target:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the indexer exited with {proc.returncode}")
            if time.perf_counter() - start > limit:
                raise RuntimeError(
                    f"the indexer did not apply {target} records within {limit:.0f} s"
                )
            await asyncio.sleep(0.05)
    return time.perf_counter() - start
