"""`tidegraph up --replicas 1`: a streaming standby of each local server, closed like the
primary, named in the env file, reused by `up`, listed by `status`, stopped by `down`."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tidegraph.infra import local_pg, local_pg_standbys, services
from tidegraph.schemas.servers import MAIN, load_servers
from tidegraph.store.errors import DatabaseUnavailable, classify_db_error, is_transient
from tidegraph.store.standby_fence import StandbyFence, read_fence

from local_services import REPO, env_without_settings, free_port_run, run_cli

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@dataclass
class Topology:
    state: Path
    env: dict[str, str]
    written: dict[str, str]


@pytest.fixture(scope="module")
def topology() -> Iterator[Topology]:
    """Two local servers with one standby each, started by the command line."""
    state = REPO / ".tidegraph" / f"test-standbys-{uuid.uuid4().hex[:8]}"
    env = env_without_settings(TIDEGRAPH_STATE_DIR=str(state))
    port = str(free_port_run(2))  # main, then pg2 on the next port
    args = ["up", "--only", "postgres", "--pg-servers", "2", "--replicas", "1", "--pg-port", port]
    try:
        up = run_cli(args, env)
        assert up.returncode == 0, up.stderr
        assert "standby main/s1 of main" in up.stderr and "standby pg2/s1 of pg2" in up.stderr
        yield Topology(state, env, services.read_env_file(state))
    finally:
        down = run_cli(["down"], env)
        shutil.rmtree(state, ignore_errors=True)
    assert down.returncode == 0, down.stderr
    assert "stopped postgres main/s1" in down.stdout and "stopped postgres pg2/s1" in down.stdout


def test_each_server_has_a_standby_named_in_the_env_file(topology: Topology) -> None:
    servers = load_servers(topology.written["TIDEGRAPH_PG_DSN"], topology.written)
    for server in (MAIN, "pg2"):
        (standby,) = servers.standbys(server)
        assert standby.label == f"{server}/s1"
        lsn = _write_on(servers.dsn(server), f"t_{server}")
        local_pg_standbys.wait_replayed(standby.dsn, lsn, timeout=30)
        with psycopg.connect(standby.dsn) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
            assert conn.execute(f"SELECT x FROM t_{server}").fetchall() == [(1,)]  # noqa: S608
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                conn.execute(f"INSERT INTO t_{server} VALUES (2)")  # noqa: S608
        with psycopg.connect(servers.dsn(server)) as conn:
            rows = conn.execute(
                "SELECT application_name, state FROM pg_stat_replication"
            ).fetchall()
        assert rows == [(f"{server}/s1", "streaming")]


def _write_on(dsn: str, table: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (x int)")
        conn.execute(f"INSERT INTO {table} VALUES (1)")  # noqa: S608
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def test_a_standby_is_closed_like_its_primary(topology: Topology) -> None:
    secret = local_pg.PgCredentials.from_env(topology.written)
    assert secret is not None
    processes = local_pg_standbys.processes(topology.state)
    assert sorted(processes) == ["main/s1", "pg2/s1"]
    for label, process in processes.items():
        target = local_pg_standbys.find(topology.state, label)
        assert target.layout.root.stat().st_mode & 0o777 == 0o700
        hba = (target.layout.data / "pg_hba.conf").read_text()
        rules = [line.split() for line in hba.splitlines() if line.strip() and line[0] != "#"]
        assert rules and all(r[-1] == "scram-sha-256" and r[-2] != "0.0.0.0/0" for r in rules)
        for user in ("postgres", "tidegraph_cdc"):
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(f"postgresql://{user}:wrong@127.0.0.1:{process.port}/postgres")
        # the replication password reaches the WAL receiver by its environment only
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert secret.replication.encode() not in cmdline
        assert secret.superuser.encode() not in cmdline
        for path in target.layout.root.rglob("*"):
            if path.is_file() and path.stat().st_size < 1 << 20 and "pg_wal" not in path.parts:
                text = path.read_bytes()
                assert secret.replication.encode() not in text, path
                assert secret.superuser.encode() not in text, path
        assert b"listen_addresses=127.0.0.1\0" in cmdline
        assert b"unix_socket_directories=\0" in cmdline


def test_status_lists_standbys_and_up_reuses_them(topology: Topology) -> None:
    before = local_pg_standbys.processes(topology.state)
    status = run_cli(["status"], topology.env)
    for label, process in before.items():
        line = next(line for line in status.stdout.splitlines() if f"postgres {label}" in line)
        assert str(process.pid) in line and f":{process.port}/" in line
        assert f"standby of {label.split('/')[0]}" in line
    listed = json.loads(run_cli(["status", "--json"], topology.env).stdout)
    assert listed["services"]["postgres"]["standbys"] == [
        {"name": label, "follows": label.split("/")[0], "port": p.port, "pid": p.pid}
        for label, p in before.items()
    ]
    again = run_cli(["up", "--only", "postgres"], topology.env)
    assert again.returncode == 0, again.stderr
    assert "starting" not in again.stderr
    assert local_pg_standbys.processes(topology.state) == before
    assert (
        services.read_env_file(topology.state)["TIDEGRAPH_PG_STANDBYS"]
        == (topology.written["TIDEGRAPH_PG_STANDBYS"])
    )


def test_a_stopped_standby_catches_up_when_up_starts_it_again(topology: Topology) -> None:
    servers = load_servers(topology.written["TIDEGRAPH_PG_DSN"], topology.written)
    local_pg_standbys.stop(topology.state, "main/s1")
    assert "main/s1" not in local_pg_standbys.processes(topology.state)
    lsn = _write_on(servers.dsn(MAIN), "t_while_stopped")  # its slot keeps the WAL
    again = run_cli(["up", "--only", "postgres"], topology.env)
    assert again.returncode == 0, again.stderr
    assert "starting standby main/s1" in again.stderr
    (standby,) = servers.standbys(MAIN)  # the same port: the same DSN
    local_pg_standbys.wait_replayed(standby.dsn, lsn, timeout=30)


def test_a_write_that_reaches_a_standby_is_retried_not_held(topology: Topology) -> None:
    """During a failover an address may reach a standby for a while: the write waits and
    is retried (the indexer's partition pauses), it is never held as the record's fault."""
    servers = load_servers(topology.written["TIDEGRAPH_PG_DSN"], topology.written)
    (standby,) = servers.standbys(MAIN)
    with psycopg.connect(standby.dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("CREATE TABLE t_refused (x int)")
    assert isinstance(classify_db_error(refused.value), DatabaseUnavailable)
    assert is_transient(refused.value)


async def test_a_fence_is_flushed_when_read_so_standbys_get_it_at_once(
    topology: Topology,
) -> None:
    """WAL another session inserted without flushing (here a logical message) lies below
    the fence: reading the fence flushes it, or the standbys would wait for the WAL writer
    to wake before they could pass it."""
    servers = load_servers(topology.written["TIDEGRAPH_PG_DSN"], topology.written)
    async with await psycopg.AsyncConnection.connect(servers.dsn(MAIN), autocommit=True) as conn:
        for _ in range(20):
            await conn.execute("SELECT pg_logical_emit_message(false, 'tidegraph-test', 'x')")
            fence = await read_fence(conn)
            cur = await conn.execute(
                "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (fence.lsn,)
            )
            assert await cur.fetchone() == (True,)
        standbys, guard = servers.standbys(MAIN), StandbyFence()
        started = time.monotonic()
        try:
            assert await guard.wait(standbys, fence, 10.0) == []
        finally:
            await guard.close()
        assert time.monotonic() - started < 2.0
