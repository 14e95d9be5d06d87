"""`tidegraph up --pg-servers 2` and the commands that place realms across them, run as a
user runs them (their own processes, the env file `up` wrote)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidegraph.infra import local_pg, local_pg_servers, services

from local_services import env_without_settings, free_port_run, run_cli

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_up_runs_a_second_server_and_realms_are_placed_on_either(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = env_without_settings(TIDEGRAPH_STATE_DIR=str(state))
    port = free_port_run(2)  # main, then pg2 on the next port
    up = run_cli(["up", "--only", "postgres", "--pg-servers", "2", "--pg-port", str(port)], env)
    try:
        assert up.returncode == 0, up.stderr
        assert "postgres pg2" in up.stdout
        written = services.read_env_file(state)
        secret = local_pg.PgCredentials.from_env(written)
        assert secret is not None
        extra = local_pg_servers.running(state, secret)
        assert list(extra) == ["pg2"]
        assert written["TIDEGRAPH_PG_SERVERS"] == f"pg2={extra['pg2']}"
        assert (state / "postgres-pg2").stat().st_mode & 0o777 == 0o700
        # every command reads the servers from the env file
        given = {**env, **written}
        created = run_cli(["realm", "create", "north", "--server", "pg2"], given)
        assert created.returncode == 0, created.stderr
        assert "on server pg2" in created.stdout
        assert run_cli(["realm", "create", "south"], given).returncode == 0  # fewest: main
        elsewhere = run_cli(["realm", "create", "north", "--server", "main"], given)
        assert elsewhere.returncode != 0
        assert "lives on server 'pg2'" in elsewhere.stderr
        listed = run_cli(["realm", "list", "--json"], given)
        assert listed.returncode == 0, listed.stderr
        where = {r["realm"]: r["server"] for r in json.loads(listed.stdout)}
        assert where == {"north": "pg2", "south": "main"}
        status = run_cli(["status"], given)
        assert "postgres pg2" in status.stdout  # the realms need Kafka too: not shown here
        deleted = run_cli(["realm", "delete", "north", "--yes"], given)
        # no broker here: the deletion is refused before anything is dropped
        assert deleted.returncode != 0 and "Kafka" in deleted.stderr
    finally:
        down = run_cli(["down"], env)
        assert down.returncode == 0, down.stderr
    assert "stopped postgres pg2" in down.stdout
    assert local_pg_servers.processes(state) == {}
