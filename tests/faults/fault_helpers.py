"""What every fault case shares: private services it may kill, processes it may kill, HTTP
writers that remember what was acknowledged, and the invariants every case ends with.

The invariants: every acknowledged version is indexed exactly once with its hash (one
``document_*`` change per acknowledged document, the stored hash equal to the acknowledged
one), each realm's outbox sequence has no gap and no repeat, and the changes topic — filled
by a change publisher running as ``tidegraph serve`` beside every case — holds each outbox
change of the realm exactly once, in sequence order, with no gap.
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
from collections.abc import AsyncIterator, Collection, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import psycopg
from aiokafka import AIOKafkaConsumer
from psycopg import sql

from tidegraph.infra import _proc, services
from tidegraph.schemas.changes import change_id
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.kafka_security import ENV_KEYS as KAFKA_SECURITY_KEYS
from tidegraph.schemas.kafka_security import kafka_client_options

from indexer_helpers import Topics, outbox
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
    advertised_port: int | None = None
    """Where the broker sends clients after bootstrap (a proxy in front of it), if not its
    own port."""

    def start(self, which: Collection[str]) -> services.ServiceStatus:
        for attempt in range(20):  # a killed server's port or memory may linger a moment
            try:
                return services.up(
                    self.state,
                    services=which,
                    kafka_port=self.kafka_port,
                    kafka_controller_port=self.controller_port,
                    pg_port=self.pg_port,
                    kafka_advertised_port=self.advertised_port,
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
def private_services(
    which: Collection[str], *, kafka_port: int | None = None, advertised_port: int | None = None
) -> Iterator[PrivateServices]:
    own = PrivateServices(
        REPO / ".tidegraph" / f"test-faults-{uuid.uuid4().hex[:8]}",
        kafka_port=kafka_port or _proc.free_port(),
        advertised_port=advertised_port,
    )
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
    ack_times: list[float] = field(default_factory=list)
    """``time.monotonic()`` of every 202, in order."""
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
                        self.ack_times.append(time.monotonic())
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


async def check_invariants(
    pg_dsn: str, realm: str, acknowledged: Mapping[str, str], topics: Topics
) -> int:
    """Every acknowledged document stored with its hash and indexed once (one document
    change each), the outbox sequence gapless, the changes topic holding the outbox once
    (:func:`check_changes`); returns how many were duplicated (0)."""
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
    await check_changes(topics, pg_dsn, realm)
    return duplicated


# --- the changes topic ---------------------------------------------------------------------


@asynccontextmanager
async def running_publisher(
    topics: Topics, pg_dsn: str, realms: Sequence[str], *, env: Mapping[str, str] | None = None
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``tidegraph serve`` publishing ``realms`` onto ``<prefix>.changes``, as deployed (a
    process of its own, so the faults a case injects reach it too)."""
    args = [
        "serve", "--port", str(_proc.free_port()), "--pg-dsn", pg_dsn,
        "--bootstrap", topics.bootstrap, "--topic-prefix", topics.prefix,
    ]  # fmt: skip
    for realm in realms:
        args += ["--publish-realm", realm]
    proc = cli(*args, env=env or {}, name=f"publisher-{topics.prefix}")
    try:
        yield proc
    finally:
        stop(proc)


async def published_seq(pg_dsn: str, realm: str) -> int:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT published_seq FROM tidegraph.publisher_positions WHERE realm = %s", (realm,)
        )
        row = await cur.fetchone()
    return 0 if row is None else int(row[0])


async def changes_on_topic(topics: Topics, realm: str) -> list[tuple[str, int]]:
    """``(id, seq)`` of every record of ``realm`` on the changes topic, in log order, read
    from the beginning to the end offsets of the moment."""
    consumer = AIOKafkaConsumer(
        **kafka_client_options(),
        bootstrap_servers=topics.bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    found: list[tuple[str, int]] = []
    try:
        consumer.subscribe([topics.changes])  # without a group: every partition is ours
        for _ in range(100):
            if partitions := sorted(consumer.assignment()):
                break
            await consumer.getmany(timeout_ms=100)
        assert partitions, f"no partitions of {topics.changes}"
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        left = {tp for tp in partitions if ends[tp] > 0}
        deadline = time.monotonic() + 60
        while left and time.monotonic() < deadline:
            batch = await consumer.getmany(*left, timeout_ms=500)
            for tp, messages in batch.items():
                for m in messages:
                    if m.key == realm.encode():
                        body = orjson.loads(m.value or b"null")
                        found.append((str(body["id"]), int(body["seq"])))
                if await consumer.position(tp) >= ends[tp]:
                    left.discard(tp)
        assert not left, f"could not read the changes topic to its end: {left}"
    finally:
        await consumer.stop()
    return found


def assert_changes_complete(
    realm: str, outbox_ids: Sequence[tuple[int, int]], records: Sequence[tuple[str, int]]
) -> None:
    """The changes topic's records of ``realm`` are its outbox, each change once: ids unique,
    every outbox ``(seq, idx)`` present and nothing else, sequence numbers contiguous from 1
    and never going back (a reader never sees n+1 before n)."""
    ids = Counter(i for i, _ in records)
    repeated = sorted(i for i, n in ids.items() if n > 1)
    assert not repeated, f"{len(repeated)} changes on the topic more than once: {repeated[:5]}"
    expected = {change_id(realm, s, i) for s, i in outbox_ids}
    missing = sorted(expected - set(ids))
    assert not missing, f"{len(missing)} outbox changes missing on the topic: {missing[:5]}"
    extra = sorted(set(ids) - expected)
    assert not extra, f"{len(extra)} changes on the topic not in the outbox: {extra[:5]}"
    seqs = [s for _, s in records]
    assert sorted(set(seqs)) == list(range(1, len(set(seqs)) + 1)), "topic sequence has a gap"
    assert seqs == sorted(seqs), "the topic goes back in sequence"


async def check_changes(topics: Topics, pg_dsn: str, realm: str, limit: float = 120.0) -> int:
    """Wait until the publisher recorded the realm's last outbox commit, then check the
    changes topic against the outbox; returns how many changes it holds."""
    rows = await outbox(pg_dsn, realm)
    last = max((s for s, _, _ in rows), default=0)
    deadline = time.monotonic() + limit
    while (at := await published_seq(pg_dsn, realm)) < last:
        assert time.monotonic() < deadline, f"published up to {at} of {last} within {limit}s"
        await asyncio.sleep(0.2)
    records = await changes_on_topic(topics, realm)
    assert_changes_complete(realm, [(s, i) for s, i, _ in rows], records)
    return len(records)
