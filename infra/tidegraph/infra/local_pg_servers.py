"""More local PostgreSQL servers for trying realms across servers on one machine
(`tidegraph up --pg-servers N`).

Server ``main`` is the one `up` always runs; the others are named ``pg2`` … ``pgN``, each
an embedded server of its own under ``<state>/postgres-<name>/`` on the port after the
previous one, closed like ``main`` (the same generated passwords, loopback only). `up`
writes them into the env file as ``TIDEGRAPH_PG_SERVERS``, which every command reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tidegraph.infra import _proc, local_pg, local_pg_topology

PREFIX = local_pg_topology.SERVER_PREFIX


def name_of(index: int) -> str:
    """The name of the ``index``-th server (2 → ``pg2``)."""
    return f"pg{index}"


def layout(state: Path, name: str) -> local_pg.PgLayout:
    """Where server ``name``'s primary lives (a promoted standby's folder after a failover)."""
    return local_pg_topology.primary_layout(state, name)


def known(state: Path) -> list[str]:
    """Names of the extra servers with a folder under ``state``, in order."""
    found = [p.name.removeprefix(PREFIX) for p in state.glob(f"{PREFIX}*") if p.is_dir()]
    return sorted(found, key=lambda n: int(n.removeprefix("pg")) if n[2:].isdigit() else 0)


def start(
    state: Path,
    count: int,
    main_port: int,
    credentials: local_pg.PgCredentials | None,
    wait: float,
    progress: Callable[[str], None],
) -> list[str]:
    """Make sure servers ``pg2`` … ``pg<count>`` run (started on ``main_port`` + 1 …
    when not); returns the names started now."""
    started = []
    for index in range(2, count + 1):
        name = name_of(index)
        where = layout(state, name)
        if local_pg.running(where) is not None:
            continue
        record = local_pg.read_record(where)
        port = record.port if record else main_port + index - 1
        _proc.ensure_port_free(f"PostgreSQL server {name}", port)
        progress(f"postgres: starting server {name} on 127.0.0.1:{port}")
        process = local_pg.launch(where, port=port, credentials=credentials)
        local_pg.wait_ready(where, process, timeout=wait)
        local_pg.ensure_vector(process.dsn)
        started.append(name)
    return started


def processes(state: Path) -> dict[str, local_pg.PgProcess]:
    """Name → process of the extra servers that run."""
    out = {}
    for name in known(state):
        process = local_pg.running(layout(state, name))
        if process is not None:
            out[name] = process
    return out


def running(state: Path, credentials: local_pg.PgCredentials | None) -> dict[str, str]:
    """Name → DSN of the extra servers that run."""
    return {
        name: replace(process, credentials=credentials).dsn
        for name, process in processes(state).items()
    }


def servers_entry(dsns: dict[str, str]) -> str:
    """``TIDEGRAPH_PG_SERVERS``' value for ``dsns``."""
    return ";".join(f"{name}={dsn}" for name, dsn in dsns.items())


def stop_all(state: Path) -> list[tuple[str, int]]:
    """Stop every extra server; (name, pid) of those that ran."""
    stopped = []
    for name in known(state):
        pid = local_pg.stop(layout(state, name))
        if pid is not None:
            stopped.append((name, pid))
    return stopped
