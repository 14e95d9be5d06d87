"""Process and port plumbing shared by the local broker and the local database.

Services are started detached (their own session, parented to init) so they outlive the
`tidegraph up` that started them, and so a long-lived caller such as a test session never
holds them as unreaped children. Liveness is judged by pid *and* command line, so a pid
reused by an unrelated process is never taken for ours, let alone signalled.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidegraph.infra.errors import PortInUseError

LOOPBACK = "127.0.0.1"

# The shell backgrounds the service with its output in the log, prints its pid and exits:
# the service is then a child of init, not of us.
_LAUNCH = 'log=$1; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'


@dataclass(frozen=True)
class RunAs:
    """A system account to run a service as (PostgreSQL refuses to run as root)."""

    user: str
    """Login name."""
    uid: int
    """Numeric user id."""
    gid: int
    """Primary group id."""


def spawn_detached(
    argv: Sequence[str],
    *,
    log: Path,
    cwd: Path,
    run_as: RunAs | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Start ``argv`` in the background, output appended to ``log``; return its pid."""
    done = subprocess.run(
        ["/bin/sh", "-c", _LAUNCH, "sh", str(log), *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        start_new_session=True,
        timeout=30,
        user=run_as.uid if run_as else None,
        group=run_as.gid if run_as else None,
        extra_groups=[] if run_as else None,
    )
    return int(done.stdout.strip())


def _reap(pid: int) -> None:
    """Collect ``pid`` if it happens to be our own exited child, so it is not a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: kill(0) is all we can know
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def command_line(pid: int) -> str:
    """The process's command line joined by spaces, or "" when unknown."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            done = subprocess.run(
                ["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, timeout=5
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip()
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def is_ours(pid: int, marker: str) -> bool:
    """True when ``pid`` runs and its command line contains ``marker`` (our config path)."""
    return is_alive(pid) and marker in command_line(pid)


def terminate(pid: int, sig: signal.Signals, *, timeout: float) -> bool:
    """Send ``sig`` and wait; escalate to SIGKILL after ``timeout``. True if it was running."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    if wait_for(lambda: not is_alive(pid), timeout):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not is_alive(pid), 10.0)
    return True


def wait_for(condition: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes; return whether it held."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def port_answers(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def ensure_port_free(service: str, port: int, host: str = LOOPBACK, *, option: str = "") -> None:
    """Raise :class:`PortInUseError` naming the holder when ``host:port`` cannot be bound
    (``option``: the flag that chooses another port, named in the message)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Servers set SO_REUSEADDR too; without it a socket in TIME_WAIT would look busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise
            raise PortInUseError(service, port, port_holder(port), option=option) from exc


def free_port(host: str = LOOPBACK) -> int:
    """A port the kernel considers free right now (for tests and benchmarks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _socket_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            # 06 is TIME_WAIT: no process holds it.
            if int(local.rsplit(":", 1)[1], 16) == port and state != "06" and inode != "0":
                inodes.add(inode)
    return inodes


def port_holder(port: int) -> str | None:
    """Describe the process bound to ``port`` ("pid 42: java …"), when procfs tells."""
    inodes = _socket_inodes(port)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target in wanted:
                cmd = command_line(int(proc.name))
                short = cmd if len(cmd) <= 80 else cmd[:77] + "..."
                return f"pid {proc.name} ({short})"
    return None


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file, or "" when it does not exist yet."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
