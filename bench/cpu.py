"""CPU time of the processes a benchmark measures, from ``/proc`` (Linux): what tidegraph's
own processes spent beside what PostgreSQL spent, so a figure says which side the work is
on. Wall-clock figures move with the machine's load; these do much less."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_cpu(pid: int, *, reaped: bool = False) -> float:
    """User + system CPU seconds of one process (0 when it is gone); with ``reaped``, also
    of its children that have ended and been waited for."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def postgres_cpu(postmaster: int | None) -> float:
    """CPU seconds so far of a local PostgreSQL: the postmaster with the backends and
    workers it has reaped, and those still running; 0 for a server elsewhere."""
    if postmaster is None:
        return 0.0
    return process_cpu(postmaster, reaped=True) + sum(process_cpu(c) for c in _children(postmaster))


async def postmaster_pid(dsn: str) -> int | None:
    """The server's postmaster (the parent of a backend), or ``None`` when the server is
    not on this machine."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT pg_backend_pid()")
        row = await cur.fetchone()
    assert row is not None
    fields = _stat(int(row[0]))
    return None if fields is None else int(fields[1])
