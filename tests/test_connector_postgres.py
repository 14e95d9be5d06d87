"""PostgreSQL connector on a real server and broker: load, changes, crash safety, cleanup."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import psycopg
import pytest
from psycopg import sql

from tidegraph.connectors import pgoutput
from tidegraph.connectors.errors import SourceSetupError
from tidegraph.connectors.postgres_cdc import CaptureSpec, PostgresCdc, source_version
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.schemas.documents import DocumentVersion, compare_source_versions
from tidegraph.schemas.settings import Settings

from connector_helpers import fresh_settings, read_topic, validated  # type: ignore[import-not-found]

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def test_source_versions_order_as_integers_and_strings() -> None:
    a, b = source_version(2**40, 3), source_version(2**40 + 1, 1)
    assert len(a) == len(b) == 30 and a < b and compare_source_versions(a, b) == -1
    assert source_version(7, 0) < source_version(7, 1)


def test_lsn_text_round_trip() -> None:
    assert pgoutput.lsn_to_int("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert pgoutput.int_to_lsn(pgoutput.lsn_to_int("0/44ED3D0")) == "0/44ED3D0"


@dataclass
class Source:
    dsn: str
    table: str
    slot: str
    realm: str
    settings: Settings
    conn: psycopg.AsyncConnection[tuple[object, ...]]
    extra: list[str] = field(default_factory=list)

    async def sql(self, query: str, *params: object) -> None:
        await self.conn.execute(
            sql.SQL(query).format(t=sql.Identifier(self.table)),  # type: ignore[arg-type]
            params or None,
        )

    def spec(self, **overrides: object) -> CaptureSpec:
        fields: dict[str, object] = {
            "table": self.table,
            "key_column": "id",
            "content_column": "body",
            "title_column": "title",
            "realm": self.realm,
            "slot": self.slot,
        }
        fields.update(overrides)
        return CaptureSpec(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def source(
    pg_dsn: str, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> AsyncIterator[Source]:
    conn = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    src = Source(
        dsn=pg_dsn,
        table=unique_name("cdc_"),
        slot=unique_name("tgslot_"),
        realm=unique_name("r"),
        settings=await fresh_settings(kafka_bootstrap, unique_name("tp")),
        conn=conn,
    )
    await src.sql("CREATE TABLE {t} (id text PRIMARY KEY, body text, title text, n int)")
    yield src
    await conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
        " WHERE slot_name = %s AND NOT active",
        (src.slot,),
    )
    await conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(src.slot)))
    await src.sql("DROP TABLE IF EXISTS {t}")
    await conn.close()


async def _documents(src: Source, expected: int) -> list[DocumentVersion]:
    records = await read_topic(
        src.settings.kafka_bootstrap, src.settings.documents_topic, expected=expected
    )
    return [validated(r) for r in records]


async def _run_until(cdc: PostgresCdc, done: Callable[[], bool]) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(cdc.run(stop))
    try:
        for _ in range(600):
            if done() or task.done():
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_load_then_changes(source: Source) -> None:
    await source.sql("INSERT INTO {t} VALUES ('a', 'alpha', 'A', 1), ('b', 'beta', NULL, 2)")
    async with DocumentProducer.from_settings(source.settings) as producer:
        cdc = PostgresCdc(source.dsn, source.spec(), producer)
        stop = asyncio.Event()
        task = asyncio.create_task(cdc.run(stop))
        while cdc.stats.snapshot_rows < 2 or not cdc.stats.streaming:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.05)
        big = "x" * 300_000  # stored out of line (TOAST)
        await source.sql("UPDATE {t} SET body = %s WHERE id = 'a'", big)
        await source.sql("UPDATE {t} SET n = 5 WHERE id = 'a'")  # body unchanged: not sent
        await source.sql("UPDATE {t} SET id = 'c' WHERE id = 'b'")  # key change
        await source.sql("DELETE FROM {t} WHERE id = 'c'")
        while cdc.stats.published < 2 + 5:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(task, 30)

    docs = await _documents(source, 7)
    assert [(d.doc_key, d.op) for d in docs] == [
        ("a", "upsert"), ("b", "upsert"),  # initial load
        ("a", "upsert"), ("a", "upsert"),  # big body, then an update that left it out
        ("b", "delete"), ("c", "upsert"),  # the key change
        ("c", "delete"),
    ]  # fmt: skip
    assert docs[0].title == "A" and docs[1].title is None
    assert docs[2].content == big and docs[3].content == big
    assert all(d.source == "postgres" and d.realm == source.realm for d in docs)
    versions = [d.source_version or "" for d in docs]
    assert versions[0] == versions[1]  # the snapshot's consistent point
    assert all(
        compare_source_versions(x, y) < 0 for x, y in zip(versions[1:-1], versions[2:], strict=True)
    )


async def test_restart_resumes_without_reloading(source: Source) -> None:
    await source.sql("INSERT INTO {t} VALUES ('a', 'one', NULL, 1)")
    async with DocumentProducer.from_settings(source.settings) as producer:
        first = PostgresCdc(source.dsn, source.spec(), producer)
        await _run_until(first, lambda: first.stats.published >= 1)
        await source.sql("UPDATE {t} SET body = 'two' WHERE id = 'a'")
        second = PostgresCdc(source.dsn, source.spec(), producer)
        await _run_until(second, lambda: second.stats.published >= 1)
        assert second.stats.snapshot_rows == 0
    assert [d.content for d in await _documents(source, 2)] == ["one", "two"]


async def test_interrupted_initial_load_is_redone(source: Source) -> None:
    await source.sql("INSERT INTO {t} VALUES ('a', 'one', NULL, 1)")
    async with DocumentProducer.from_settings(source.settings) as producer:
        first = PostgresCdc(source.dsn, source.spec(), producer)
        assert await first.setup() is True
        # As if the process died before the load completed: the marker says pending.
        await source.conn.execute(
            sql.SQL("COMMENT ON PUBLICATION {} IS 'tidegraph cdc: snapshot pending'").format(
                sql.Identifier(source.slot)
            )
        )
        events: list[str] = []
        again = PostgresCdc(source.dsn, source.spec(), producer, on_event=events.append)
        assert await again.setup() is True
        assert any("no completed snapshot" in e for e in events)
        assert await PostgresCdc(source.dsn, source.spec(), producer).setup() is False
    assert [d.doc_key for d in await _documents(source, 2)] == ["a", "a"]


async def test_key_outside_replica_identity_is_refused(source: Source) -> None:
    async with DocumentProducer.from_settings(source.settings) as producer:
        cdc = PostgresCdc(source.dsn, source.spec(key_column="title"), producer)
        with pytest.raises(SourceSetupError, match="REPLICA IDENTITY FULL"):
            await cdc.setup()
        with pytest.raises(SourceSetupError, match="no column nope"):
            await PostgresCdc(source.dsn, source.spec(content_column="nope"), producer).setup()


# ----------------------------------------------------------------- crash safety

CHANGES = 1000
KEYS = 20


def _command(src: Source, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "tidegraph.infra.cli", "connect", "postgres",
        "--dsn", src.dsn, "--table", src.table, "--key-column", "id",
        "--content-column", "body", "--realm", src.realm, "--slot", src.slot,
        "--topic-prefix", src.settings.topic_prefix, *extra,
    ]  # fmt: skip


async def _start(src: Source) -> tuple[asyncio.subprocess.Process, list[str]]:
    env = {**os.environ, "TIDEGRAPH_KAFKA_BOOTSTRAP": src.settings.kafka_bootstrap}
    proc = await asyncio.create_subprocess_exec(
        *_command(src), env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    lines: list[str] = []
    assert proc.stderr is not None
    stderr = proc.stderr

    async def drain() -> None:
        while line := await stderr.readline():
            lines.append(line.decode())

    asyncio.create_task(drain())  # noqa: RUF006 - ends with the process
    for _ in range(600):
        if any("streaming changes" in line for line in lines):
            return proc, lines
        if proc.returncode is not None:
            break
        await asyncio.sleep(0.05)
    raise AssertionError("connector did not start:\n" + "".join(lines))


@pytest.mark.slow
async def test_sigkill_mid_stream_loses_nothing(source: Source) -> None:
    expected: dict[str, list[str | None]] = {f"k{i:02d}": [] for i in range(KEYS)}
    for key in expected:
        await source.sql("INSERT INTO {t} (id, body) VALUES (%s, %s)", key, f"{key} v0")
        expected[key].append(f"{key} v0")
    proc, _ = await _start(source)
    killed_at = CHANGES // 3
    alive: dict[str, bool] = dict.fromkeys(expected, True)
    for n in range(1, CHANGES + 1):
        key = f"k{n % KEYS:02d}"
        if n % 50 == 0 and alive[key]:
            await source.sql("DELETE FROM {t} WHERE id = %s", key)
            expected[key].append(None)
            alive[key] = False
        elif not alive[key]:
            await source.sql("INSERT INTO {t} (id, body) VALUES (%s, %s)", key, f"{key} v{n}")
            expected[key].append(f"{key} v{n}")
            alive[key] = True
        else:
            await source.sql("UPDATE {t} SET body = %s WHERE id = %s", f"{key} v{n}", key)
            expected[key].append(f"{key} v{n}")
        if n == killed_at:
            before_kill = len(await _documents(source, 0))
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        if n == 2 * CHANGES // 3:
            proc, _ = await _start(source)

    total = sum(len(v) for v in expected.values())
    seen: dict[str, list[DocumentVersion]] = {k: [] for k in expected}
    versions: set[tuple[str, str]] = set()
    for _ in range(120):
        docs = await _documents(source, total)
        seen = {k: [] for k in expected}
        versions = set()
        for doc in docs:  # first occurrence of each version, in log order
            mark = (doc.doc_key, doc.source_version or "")
            if mark not in versions:
                versions.add(mark)
                seen[doc.doc_key].append(doc)
        if sum(len(v) for v in seen.values()) >= total:
            break
        await asyncio.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.wait(), 30)
    print(f"records before the kill {before_kill}, in all {len(docs)}, distinct {len(versions)}")
    assert KEYS < before_kill < total  # it was killed mid-stream

    for key, wanted in expected.items():
        got = [d.content if d.op == "upsert" else None for d in seen[key]]
        assert got == wanted, f"{key}: lost or reordered changes"
        order = [d.source_version or "" for d in seen[key]]
        assert all(
            compare_source_versions(a, b) < 0 for a, b in zip(order[:-1], order[1:], strict=True)
        )

    env = {**os.environ, "TIDEGRAPH_KAFKA_BOOTSTRAP": source.settings.kafka_bootstrap}
    drop = await asyncio.create_subprocess_exec(
        *_command(source, "--drop-slot"), env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(drop.communicate(), 60)
    assert drop.returncode == 0 and b"replication slot" in err and b"publication" in err
    row = await (
        await source.conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (source.slot,)
        )
    ).fetchone()
    assert row == (0,)
