"""The change publisher against real Kafka and PostgreSQL: one publisher per realm, takeover
when the holder dies, every change published in order, duplicates only as same-id repeats."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import psycopg
import pytest
from feed_helpers import check_stream, consume
from psycopg import sql

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.query_service.publisher import ChangePublisher, KafkaChangeSink
from tidegraph.schemas.changes import GraphChange
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.schemas.topics import changes_topic
from tidegraph.store.realms import drop_realm

from graph_helpers import GraphHarness, ent, rel

pytestmark = [pytest.mark.postgres, pytest.mark.kafka]

CONFIG = RealmConfig(embedder="hashing:8")


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as c:
        yield c


async def write_some(graph: GraphHarness, start: int, count: int) -> None:
    for i in range(start, start + count):
        await graph.upsert(
            f"d{i}", [([ent(f"P{i}"), ent(f"Q{i}")], [rel(f"P{i}", "knows", f"Q{i}")])]
        )


async def write_apart(pg_dsn: str, graph: GraphHarness, start: int, count: int) -> GraphHarness:
    """Writes on a connection of its own: a pipelined write must not share its connection
    with the test's concurrent reads. Returns the harness to write on from there (its
    position has moved on)."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as own:
        moved = dataclasses.replace(graph, conn=own)
        await write_some(moved, start, count)
    return dataclasses.replace(moved, conn=graph.conn)


async def outbox_ids(conn: psycopg.AsyncConnection[Any], graph: GraphHarness) -> list[str]:
    cur = await conn.execute(
        sql.SQL("SELECT seq, idx FROM {}.outbox ORDER BY seq, idx").format(
            sql.Identifier(graph.info.schema)
        )
    )
    return [f"{graph.info.realm}:{s}:{i}" for s, i in await cur.fetchall()]


async def published_seq(conn: psycopg.AsyncConnection[Any], realm: str) -> int:
    cur = await conn.execute(
        "SELECT published_seq FROM tidegraph.publisher_positions WHERE realm = %s", (realm,)
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def head_seq(conn: psycopg.AsyncConnection[Any], graph: GraphHarness) -> int:
    cur = await conn.execute(
        sql.SQL("SELECT seq FROM {}.meta").format(sql.Identifier(graph.info.schema))
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def wait_published(conn: psycopg.AsyncConnection[Any], graph: GraphHarness) -> None:
    async with asyncio.timeout(60):
        while True:
            if await published_seq(conn, graph.info.realm) >= await head_seq(conn, graph):
                return
            await asyncio.sleep(0.05)


async def test_two_publishers_one_leader_and_takeover(
    pg_dsn: str,
    kafka_bootstrap: str,
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
) -> None:
    realm = unique_name("p")
    prefix = unique_name("tp")
    topic = changes_topic(prefix, partitions=3)
    await ensure_topic_specs(kafka_bootstrap, [topic])
    graph = await GraphHarness.create(conn, realm, CONFIG)
    await write_some(graph, 0, 20)
    sinks = [KafkaChangeSink(kafka_bootstrap, topic.name) for _ in range(2)]
    pubs = [
        ChangePublisher(pg_dsn, s, realms=[realm], poll_interval=0.05, batch_size=7) for s in sinks
    ]
    tasks = [asyncio.create_task(p.run()) for p in pubs]
    try:
        await wait_published(conn, graph)
        holders = [p for p in pubs if realm in p.held]
        assert len(holders) == 1, "exactly one publisher per realm"
        leader = holders[0]
        follower = pubs[1 - pubs.index(leader)]
        # The leader goes away (its session ends, releasing the lock); the other takes over.
        leader.stop()
        await tasks[pubs.index(leader)]
        await write_some(graph, 20, 20)
        await wait_published(conn, graph)
        assert realm in follower.held
    finally:
        for p in pubs:
            p.stop()
        await asyncio.gather(*tasks)
        for s in sinks:
            await s.stop()
    expected = await outbox_ids(conn, graph)
    received = await consume(kafka_bootstrap, topic.name, realm, len(expected))
    check_stream(received, expected)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(
    pg_dsn: str, bootstrap: str, prefix: str, realm: str, port: int
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TIDEGRAPH_PG_DSN": pg_dsn, "TIDEGRAPH_KAFKA_BOOTSTRAP": bootstrap}
    env.pop("TIDEGRAPH_API_KEYS", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidegraph.infra.cli",
            "serve",
            "--port",
            str(port),
            "--topic-prefix",
            prefix,
            "--publish-realm",
            realm,
            "--log-level",
            "warning",
            "--pool-size",
            "2",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def _wait_healthy(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            assert proc.poll() is None, (proc.stderr.read() if proc.stderr else b"").decode()
            try:
                r = await client.get(f"http://127.0.0.1:{port}/healthz")
                if r.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("serve did not become healthy")


@pytest.mark.slow
async def test_two_serve_processes_one_killed_mid_stream(
    pg_dsn: str,
    kafka_bootstrap: str,
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
) -> None:
    realm = unique_name("p")
    prefix = unique_name("tp")
    graph = await GraphHarness.create(conn, realm, CONFIG)
    await write_some(graph, 0, 30)
    first = _serve(pg_dsn, kafka_bootstrap, prefix, realm, port_a := _free_port())
    second: subprocess.Popen[bytes] | None = None
    writer: asyncio.Task[GraphHarness] | None = None
    try:
        await _wait_healthy(port_a, first)
        deadline = time.monotonic() + 30
        while await published_seq(conn, realm) == 0:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        second = _serve(pg_dsn, kafka_bootstrap, prefix, realm, port_b := _free_port())
        await _wait_healthy(port_b, second)
        started_at = await published_seq(conn, realm)
        writer = asyncio.create_task(write_apart(pg_dsn, graph, 30, 150))
        deadline = time.monotonic() + 30
        while await published_seq(conn, realm) <= started_at:  # publishing the new writes
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        killed_at = await published_seq(conn, realm)
        first.send_signal(signal.SIGKILL)  # mid-stream: writes keep landing in the outbox
        await asyncio.to_thread(first.wait, 10)
        graph = await writer
        await write_apart(pg_dsn, graph, 180, 20)  # and after the kill, however fast the above
        assert await head_seq(conn, graph) > killed_at
        await wait_published(conn, graph)
        # the survivor serves queries too
        async with httpx.AsyncClient() as client:
            r = await client.get(
                f"http://127.0.0.1:{port_b}/v1/realms/{realm}/changes", params={"limit": 5}
            )
            assert r.status_code == 200 and len(r.json()["changes"]) > 0
    finally:
        if writer is not None and not writer.done():
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
        for proc in (first, second):
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            if proc.stderr is not None:
                proc.stderr.close()
    expected = await outbox_ids(conn, graph)
    received = await consume(kafka_bootstrap, f"{prefix}.changes", realm, len(expected))
    check_stream(received, expected)
    # the command-line tail prints the same changes
    tail = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tidegraph.infra.cli",
        "changes",
        "--realm",
        realm,
        "--topic-prefix",
        prefix,
        "--bootstrap",
        kafka_bootstrap,
        "--dedupe",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(tail.communicate(), 60)
    assert tail.returncode == 0, stderr.decode()
    assert stderr.decode().startswith(f"{len(expected)} change(s)")
    lines = [GraphChange.from_json(line).id for line in stdout.splitlines() if line]
    assert lines == expected


async def test_a_realm_deleted_under_a_round_is_let_go_quietly(
    pg_dsn: str,
    kafka_bootstrap: str,
    conn: psycopg.AsyncConnection[Any],
    unique_name: Callable[[str], str],
) -> None:
    """`realm delete` while `serve` publishes: the round that listed the realm finds its
    tables gone, lets the realm go and goes on; no failed round, no traceback."""
    realm, prefix = unique_name("p"), unique_name("tp")
    topic = changes_topic(prefix, partitions=1)
    await ensure_topic_specs(kafka_bootstrap, [topic])
    graph = await GraphHarness.create(conn, realm, CONFIG)
    await write_some(graph, 0, 2)
    sink = KafkaChangeSink(kafka_bootstrap, topic.name)
    publisher = ChangePublisher(pg_dsn, sink, realms=[realm])
    try:
        assert await publisher.step() > 0 and realm in publisher.held
        await write_some(graph, 2, 1)
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as deleter:
            await deleter.execute("BEGIN")
            outbox = sql.Identifier(graph.info.schema, "outbox")
            await deleter.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(outbox))
            round_ = asyncio.create_task(publisher.step())  # lists the realm, waits on the lock
            async with asyncio.timeout(30):
                while True:
                    cur = await conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND application_name = 'tidegraph-publisher'"
                    )
                    row = await cur.fetchone()
                    if row and row[0]:
                        break
                    await asyncio.sleep(0.05)
            assert await drop_realm(deleter, realm) is not None
            await deleter.execute("COMMIT")
        assert await round_ == 0
        assert realm not in publisher.held
        assert await publisher.step() == 0  # and later rounds do not see it at all
    finally:
        publisher.stop()
        await publisher.run()  # stopped already: only closes its connection
        await sink.stop()
