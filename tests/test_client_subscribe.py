"""A subscriber process killed mid-stream and started again from its own stored position
receives every change of the realm exactly once, in order — from the HTTP feed and from
the changes topic — while documents keep being written."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from indexer_helpers import wait_for
from surface_helpers import REPO, spawn_serve

pytestmark = [pytest.mark.postgres, pytest.mark.kafka, pytest.mark.slow]


async def write_docs(pg_dsn: str, graph: GraphHarness, start: int, count: int) -> GraphHarness:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as own:
        g = dataclasses.replace(graph, conn=own)
        for i in range(start, start + count):
            await g.upsert(
                f"d{i}", [([ent(f"P{i}"), ent(f"Q{i}")], [rel(f"P{i}", "knows", f"Q{i}")])]
            )
            await asyncio.sleep(0.01)
    return dataclasses.replace(g, conn=graph.conn)


async def outbox_ids(pg_dsn: str, graph: GraphHarness) -> list[str]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT seq, idx FROM {}.outbox ORDER BY seq, idx").format(
                sql.Identifier(graph.info.schema)
            )
        )
        return [f"{graph.info.realm}:{s}:{i}" for s, i in await cur.fetchall()]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def start(
    out: Path, realm: str, url: str, kafka: tuple[str, str] | None
) -> subprocess.Popen[bytes]:
    args = [sys.executable, str(REPO / "tests" / "subscriber_proc.py"), str(out)]
    args += ["--realm", realm, "--url", url]
    if kafka is not None:
        args += ["--bootstrap", kafka[0], "--prefix", kafka[1]]
    return subprocess.Popen(args, cwd=REPO)


@pytest.mark.parametrize("source", ["http", "topic"])
async def test_killed_subscriber_resumes_without_loss_or_repeat(
    source: str,
    pg_dsn: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    realm, prefix = unique_name("s"), unique_name("sp")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        graph = await GraphHarness.create(conn, realm, RealmConfig(embedder="hashing:8"))
        graph = await write_docs(pg_dsn, graph, 0, 15)
        out = tmp_path / "received.txt"
        kafka = (kafka_bootstrap, prefix) if source == "topic" else None
        with spawn_serve(pg_dsn, kafka_bootstrap, prefix, realms=(realm,)) as url:
            first = start(out, realm, url, kafka)
            try:
                writing = asyncio.create_task(write_docs(pg_dsn, graph, 15, 15))

                async def some() -> bool:
                    return len(lines(out)) >= 25

                await wait_for(some, 60, "the subscriber to be mid-stream")
                first.send_signal(signal.SIGKILL)
                assert first.wait(10) == -signal.SIGKILL
                killed_at = len(lines(out))
                graph = await writing
            finally:
                if first.poll() is None:
                    first.kill()
            expected = await outbox_ids(pg_dsn, graph)
            assert 25 <= killed_at < len(expected), "killed before the end of the stream"
            second = start(out, realm, url, kafka)
            try:

                async def complete() -> bool:
                    return len(lines(out)) >= len(expected)

                await wait_for(complete, 60, "the restarted subscriber to catch up")
                await asyncio.sleep(0.5)  # nothing more arrives
            finally:
                second.kill()
                second.wait(10)
    assert lines(out) == expected
