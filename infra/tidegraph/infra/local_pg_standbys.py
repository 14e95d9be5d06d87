"""Streaming standbys of the local PostgreSQL servers (`tidegraph up --replicas N`), and
promotion of one to primary (`tidegraph pg promote SERVER/NAME`).

Standby ``s<i>`` of server ``S`` lives in ``<state>/standby-S-s<i>/`` and is made once by
the embedded distribution's ``pg_basebackup`` from the server's current primary, through a
physical replication slot of its own on that primary (``standby_S_s<i>``: the primary
keeps the WAL a stopped standby still needs). It is closed like the primary — loopback
only, the same ``pg_hba.conf``, the same roles and passwords (they are the primary's
data) — and follows it over streaming replication as ``tidegraph_cdc``, the replication
role the local server already has. That role's password reaches ``pg_basebackup`` and the
standby's WAL receiver through the environment (``PGPASSWORD``), never a file or a command
line: ``primary_conninfo`` and ``primary_slot_name`` are passed as settings at each start.
Replication is asynchronous, as PostgreSQL's default is: a commit is acknowledged by the
primary alone, so the last commits before a primary dies may be missing on a standby.

A standby listens on a free port chosen when it is first started and kept in its folder,
so its DSN stays the same across `down` and `up`; each one's ``application_name`` is
``S/s<i>``, as ``pg_stat_replication`` shows it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
from psycopg import sql

from tidegraph.infra import _proc, local_pg, local_pg_servers, local_pg_topology
from tidegraph.infra.errors import ServiceStartError, StateDirError
from tidegraph.schemas import MAIN, split_standby

_NAME = re.compile(r"s([1-9][0-9]{0,5})")
PORT_FILE = "port"
"""The standby's port, chosen once (its record goes when it stops): its DSN stays put."""


@dataclass(frozen=True)
class LocalStandby:
    """A standby of a local server, as found under the state folder."""

    server: str
    """The server it follows."""
    name: str
    """Its name within the server (``s1``)."""
    layout: local_pg.PgLayout
    """Its folder."""

    @property
    def label(self) -> str:
        """``server/name``."""
        return f"{self.server}/{self.name}"

    @property
    def slot(self) -> str:
        """Its physical replication slot on the primary."""
        return f"standby_{self.server}_{self.name}"


def standby(state: Path, server: str, name: str) -> LocalStandby:
    folder = local_pg_topology.standby_folder(server, name)
    return LocalStandby(server, name, local_pg.PgLayout(state.resolve() / folder))


def servers(state: Path) -> list[str]:
    """The local servers: ``main`` and the extra ones."""
    return [MAIN, *local_pg_servers.known(state)]


def known(state: Path, server: str) -> list[LocalStandby]:
    """``server``'s standbys with a folder under ``state``, in order (a promoted one is a
    primary now, not a standby)."""
    prefix = local_pg_topology.standby_folder(server, "")
    primary = local_pg_topology.primary_folder(state, server)
    found = []
    for path in state.glob(f"{prefix}*"):
        name = path.name.removeprefix(prefix)
        if path.is_dir() and _NAME.fullmatch(name) and path.name != primary:
            if path.name not in local_pg_topology.retired(state, server):
                found.append(standby(state, server, name))
    return sorted(found, key=lambda s: int(s.name[1:]))


def next_name(state: Path, server: str) -> str:
    """The first ``s<i>`` no folder has ever used (a promoted standby keeps its folder)."""
    prefix = local_pg_topology.standby_folder(server, "")
    used = {p.name.removeprefix(prefix) for p in state.glob(f"{prefix}*")}
    index = 1
    while f"s{index}" in used:
        index += 1
    return f"s{index}"


def _settings(target: LocalStandby, primary_port: int) -> tuple[str, ...]:
    conninfo = (
        f"host={_proc.LOOPBACK} port={primary_port} user={local_pg.REPLICATION_ROLE} "
        f"application_name={target.label}"
    )
    return (
        f"primary_conninfo={conninfo}",
        f"primary_slot_name={target.slot}",
        "hot_standby=on",
        "hot_standby_feedback=on",
    )


def _env(credentials: local_pg.PgCredentials) -> dict[str, str]:
    return {"PGPASSWORD": credentials.replication}


def make(
    state: Path,
    target: LocalStandby,
    primary: local_pg.PgProcess,
    credentials: local_pg.PgCredentials,
) -> None:
    """Copy the primary into ``target``'s fresh folder (``pg_basebackup``, creating its
    slot) and mark it a standby."""
    run_as = local_pg.system_account()
    local_pg.prepare_root(target.layout, run_as)
    binaries = local_pg.server_bin_dir(state.resolve(), run_as)
    with psycopg.connect(primary.dsn, autocommit=True) as conn:  # left by an earlier attempt
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s AND NOT active",
            (target.slot,),
        )
    local_pg.run_tool(
        [str(binaries / "pg_basebackup"), "-D", str(target.layout.data), "-h", _proc.LOOPBACK,
         "-p", str(primary.port), "-U", local_pg.REPLICATION_ROLE, "-X", "stream",
         "-c", "fast", "-C", "-S", target.slot, "--no-password"],
        cwd=target.layout.root, run_as=run_as, env=_env(credentials),
    )  # fmt: skip
    (target.layout.data / "standby.signal").touch()


def launch(
    state: Path,
    target: LocalStandby,
    primary: local_pg.PgProcess,
    credentials: local_pg.PgCredentials,
    *,
    port: int | None = None,
) -> local_pg.PgProcess:
    """Start ``target`` following ``primary`` (made first when its folder is fresh), on
    ``port``, else its recorded port, else a free one."""
    if not (target.layout.data / "PG_VERSION").is_file():
        make(state, target, primary, credentials)
    kept = target.layout.root / PORT_FILE
    try:
        port = port or int(kept.read_text())
    except (OSError, ValueError):
        port = _proc.free_port()
    _proc.ensure_port_free(f"PostgreSQL standby {target.label}", port)
    kept.write_text(f"{port}\n")
    return local_pg.start_postmaster(
        target.layout,
        port=port,
        credentials=credentials,
        settings=_settings(target, primary.port),
        env=_env(credentials),
    )


def start(
    state: Path,
    replicas: int,
    credentials: local_pg.PgCredentials,
    wait: float,
    progress: Callable[[str], None],
) -> list[str]:
    """Make sure every standby made earlier runs, and at least ``replicas`` of every running
    local server (new ones made as needed); returns the labels started now."""
    started = []
    for server in servers(state):
        primary = local_pg.running(local_pg_topology.primary_layout(state, server))
        if primary is None:
            continue
        primary = replace(primary, credentials=credentials)
        existing = known(state, server)
        for _ in range(len(existing), replicas):
            existing.append(standby(state, server, next_name(state, server)))
            existing[-1].layout.root.mkdir(parents=True, exist_ok=True)
        for target in existing:
            if local_pg.running(target.layout) is not None:
                continue
            progress(f"postgres: starting standby {target.label} of {server}")
            process = launch(state, target, primary, credentials)
            local_pg.wait_ready(target.layout, process, timeout=wait)
            started.append(target.label)
    return started


def processes(state: Path) -> dict[str, local_pg.PgProcess]:
    """``server/name`` → process of the standbys that run."""
    out = {}
    for server in servers(state):
        for target in known(state, server):
            process = local_pg.running(target.layout)
            if process is not None:
                out[target.label] = process
    return out


def running(state: Path, credentials: local_pg.PgCredentials | None) -> dict[str, str]:
    """``server/name`` → superuser DSN of the standbys that run."""
    return {
        label: replace(process, credentials=credentials).dsn
        for label, process in processes(state).items()
    }


def standbys_entry(dsns: dict[str, str]) -> str:
    """``TIDEGRAPH_PG_STANDBYS``' value for ``dsns``."""
    return ";".join(f"{label}={dsn}" for label, dsn in dsns.items())


def stop(state: Path, label: str, *, timeout: float = 30.0) -> int | None:
    """Stop one standby (fast shutdown); its pid when it ran."""
    server, name = split_standby(label)
    return local_pg.stop(standby(state, server, name).layout, timeout=timeout)


def stop_all(state: Path) -> list[tuple[str, int]]:
    """Stop every standby; (label, pid) of those that ran."""
    stopped = []
    for server in servers(state):
        for target in known(state, server):
            pid = local_pg.stop(target.layout)
            if pid is not None:
                stopped.append((target.label, pid))
    return stopped


def replay_lsn(dsn: str) -> str | None:
    """The last WAL position ``dsn`` (a standby) has replayed."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT pg_last_wal_replay_lsn()::text").fetchone()
    return str(row[0]) if row and row[0] is not None else None


def wait_replayed(dsn: str, lsn: str, *, timeout: float = 30.0) -> None:
    """Block until the standby at ``dsn`` has replayed up to ``lsn`` (``pg_lsn`` text, as
    ``pg_current_wal_lsn()`` gives it on the primary), or raise."""
    deadline = time.monotonic() + timeout
    query = sql.SQL("SELECT pg_last_wal_replay_lsn() >= {}::pg_lsn").format(sql.Literal(lsn))
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        while True:
            row = conn.execute(query).fetchone()
            if row and row[0]:
                return
            if time.monotonic() >= deadline:
                raise ServiceStartError(
                    "postgres", f"standby did not replay up to {lsn} within {timeout:g}s"
                )
            time.sleep(0.02)


def find(state: Path, label: str) -> LocalStandby:
    """The local standby ``server/name``, or an error naming the ones there are."""
    server, name = split_standby(label)
    for target in known(state, server):
        if target.name == name:
            return target
    there = [t.label for s in servers(state) for t in known(state, s)]
    raise StateDirError(
        f"no local standby {label} under {state} (there are: {', '.join(there) or 'none'})"
    )
