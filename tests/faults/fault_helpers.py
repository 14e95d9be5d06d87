"""What every fault case shares: private services it may kill, processes it may kill, HTTP
writers that remember what was acknowledged, and the invariants every case ends with.

The invariants (issue "fault matrix"): every acknowledged version is indexed exactly once
with its hash (one ``document_*`` change per acknowledged document, the stored hash equal
to the acknowledged one), and each realm's outbox sequence has no gap and no repeat.
Services a case kills are its own (a private state folder), so the shared test broker and
server, and the sessions using them, never notice.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

from tidegraph.infra import _proc, services
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.kafka_security import ENV_KEYS as KAFKA_SECURITY_KEYS

from indexer_helpers import outbox
from local_services import REPO

LOG_DIR = Path(tempfile.gettempdir()) / "tidegraph-fault-logs"


@dataclass
class Recovery:
    """One row of the closing table: fault, seconds to recover, lost, duplicated."""

    fault: str
    recovery_s: float
    lost: int
    duplicated: int | None
    """``None`` where a case cannot count duplicates (versions folding by design)."""

    def show(self) -> None:
        print(
            f"\nFAULT | {self.fault} | recovered in {self.recovery_s:.1f}s | lost {self.lost} "
            f"| duplicated {'n/a' if self.duplicated is None else self.duplicated}"
        )


@dataclass
class PrivateServices:
    """Kafka and/or PostgreSQL from a state folder of their own, on fixed ports, so a case
    can SIGKILL them and start them again where clients expect them."""

    state: Path
    kafka_port: int = field(default_factory=_proc.free_port)
    controller_port: int = field(default_factory=_proc.free_port)
    pg_port: int = field(default_factory=_proc.free_port)

    def start(self, which: Collection[str]) -> services.ServiceStatus:
        for attempt in range(20):  # a killed server's port or memory may linger a moment
            try:
                return services.up(
                    self.state,
                    services=which,
                    kafka_port=self.kafka_port,
                    kafka_controller_port=self.controller_port,
                    pg_port=self.pg_port,
                )
            except Exception:
                if attempt == 19:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def kill(self, which: str) -> None:
        status = services.status(self.state)
        pid = (status.kafka if which == services.KAFKA else status.postgres).pid
        assert pid is not None, f"{which} is not running"
        os.kill(pid, signal.SIGKILL)
        while _proc.is_alive(pid):
            time.sleep(0.05)

    def env(self) -> dict[str, str]:
        """Variables pointing a process at these services (addresses and logins)."""
        written = services.read_env_file(self.state)
        keys = {*KAFKA_SECURITY_KEYS, "TIDEGRAPH_KAFKA_BOOTSTRAP", "TIDEGRAPH_PG_DSN"}
        return {k: v for k, v in written.items() if k in keys}


@contextmanager
def private_services(which: Collection[str]) -> Iterator[PrivateServices]:
    own = PrivateServices(REPO / ".tidegraph" / f"test-faults-{uuid.uuid4().hex[:8]}")
    try:
        own.start(which)
        yield own
    finally:
        services.down(own.state)
        shutil.rmtree(own.state, ignore_errors=True)


def cli(*args: str, env: Mapping[str, str], name: str) -> subprocess.Popen[bytes]:
    """``tidegraph ARGS`` as a child process, its log under LOG_DIR."""
    LOG_DIR.mkdir(exist_ok=True)
    with open(LOG_DIR / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tidegraph.infra.cli", *args],
            env={**os.environ, **env},
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


def sigkill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            sigkill(proc)


async def wait_http(base: str, limit: float = 60.0) -> None:
    async with httpx.AsyncClient(base_url=base) as client:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                if (await client.get("/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{base} did not answer within {limit}s")


@dataclass
class Writer:
    """HTTP ingest clients putting new documents, each remembered once acknowledged (202)."""

    base: str
    realm: str
    acknowledged: dict[str, str] = field(default_factory=dict)
    """doc_key → content_hash of every 202."""
    refused: int = 0
    errors: int = 0
    sent: int = 0

    async def run(self, stop: asyncio.Event, clients: int = 4) -> None:
        async def one(n: int) -> None:
            async with httpx.AsyncClient(base_url=self.base, timeout=15.0) as client:
                i = 0
                while not stop.is_set():
                    key = f"c{n}-{i}.md"
                    content = f"Ada Lovelace worked with Person{n}x{i} Smith."
                    i += 1
                    self.sent += 1
                    try:
                        r = await client.put(
                            f"/v1/ingest/{self.realm}/documents/{key}", json={"content": content}
                        )
                    except httpx.TransportError:
                        self.errors += 1
                        await asyncio.sleep(0.05)
                        continue
                    if r.status_code == 202:
                        self.acknowledged[key] = content_hash(content)
                    else:
                        self.refused += 1
                        await asyncio.sleep(0.05)

        await asyncio.gather(*(one(n) for n in range(clients)))


async def stored_documents(pg_dsn: str, realm: str) -> dict[str, str]:
    """doc_key → content_hash of the realm's stored documents (empty before it exists)."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        try:
            cur = await conn.execute(
                sql.SQL("SELECT doc_key, content_hash FROM {}.documents").format(
                    sql.Identifier(f"realm_{realm}")
                )
            )
        except psycopg.errors.UndefinedTable:
            return {}
        return {str(k): str(h) for k, h in await cur.fetchall()}


async def wait_indexed(pg_dsn: str, realm: str, expected: Mapping[str, str], limit: float) -> float:
    """Seconds until every expected document is stored; fails past ``limit``."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            stored = await stored_documents(pg_dsn, realm)
        except psycopg.OperationalError:
            stored = {}
        if all(stored.get(k) == h for k, h in expected.items()):
            return time.monotonic() - started
        await asyncio.sleep(0.2)
    stored = await stored_documents(pg_dsn, realm)
    missing = [k for k in expected if k not in stored]
    raise AssertionError(f"{len(missing)} acknowledged documents not indexed: {missing[:5]}")


async def check_invariants(pg_dsn: str, realm: str, acknowledged: Mapping[str, str]) -> int:
    """Every acknowledged document stored with its hash and indexed once (one document
    change each), the outbox sequence gapless; returns how many were duplicated (0)."""
    stored = await stored_documents(pg_dsn, realm)
    wrong = {k: h for k, h in acknowledged.items() if stored.get(k) != h}
    assert not wrong, f"acknowledged but not stored as acknowledged: {list(wrong)[:5]}"
    changes = await outbox(pg_dsn, realm)
    seqs = sorted({s for s, _, _ in changes})
    assert seqs == list(range(1, len(seqs) + 1)), "outbox sequence has a gap"
    per_seq = Counter(s for s, _, k in changes if k.startswith("document_"))
    assert all(n == 1 for n in per_seq.values()), "a transaction with two document changes"
    # documents are new keys written once each: one applying transaction per stored document
    duplicated = len(per_seq) - len(stored)
    assert duplicated == 0, f"{duplicated} documents indexed more than once"
    return duplicated
