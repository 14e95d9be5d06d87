"""Connector throughput, against the real broker and server (median of 3 runs each).

    TIDEGRAPH_KAFKA_BOOTSTRAP=… TIDEGRAPH_PG_DSN=… python bench/connectors.py

1. ``publish`` of 10,000 JSONL documents of 2 KiB: documents/s and MB/s of encoded records,
   counted when Kafka acknowledged them. Target: ≥ 5,000 docs/s (10 MB/s).
2. PostgreSQL connector: a burst of row updates, changes/s from the first commit to the last
   acknowledged record; then a steady 2,000 changes/s for a few seconds, change-to-ack
   latency p50/p99 (commit time in PostgreSQL to acknowledgement). Targets: ≥ 2,000
   changes/s, p99 < 250 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

import orjson
import psycopg
from aiokafka.admin import AIOKafkaAdminClient
from psycopg import sql

from tidegraph.connectors.bulk import publish_paths
from tidegraph.connectors.postgres_cdc import CaptureSpec, PostgresCdc
from tidegraph.connectors.producer import Delivery, DocumentProducer
from tidegraph.connectors.topics import ensure_topics
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.settings import Settings, load_settings

WORDS = (
    "graph realm document version kafka partition offset temporal relation entity supersede "
    "belief valid interval chunk extract embed query retrieval community order stream change "
    "river tide harbour north engine ledger report annual revenue cash flow margin growth"
).split()


def _text(rng: random.Random, size: int) -> str:
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def _jsonl(path: Path, count: int, size: int) -> int:
    rng = random.Random(7)
    with path.open("wb") as f:
        for i in range(count):
            line = {
                "doc_key": f"bench/{i:05d}.md",
                "title": f"Doc {i}",
                "content": _text(rng, size),
            }
            f.write(orjson.dumps(line) + b"\n")
    return path.stat().st_size


async def _drop_topics(settings: Settings) -> None:
    admin = AIOKafkaAdminClient(
        **kafka_client_options(), bootstrap_servers=settings.kafka_bootstrap
    )
    await admin.start()
    try:
        names = [settings.documents_topic, settings.changes_topic, settings.dlq_topic]
        present = set(await admin.list_topics())
        await admin.delete_topics([n for n in names if n in present])
    finally:
        await admin.close()


async def _fresh(bootstrap: str) -> Settings:
    settings = load_settings(
        kafka_bootstrap=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:10]}"
    )
    await ensure_topics(bootstrap, settings)
    return settings


async def bench_publish(bootstrap: str, count: int, size: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "docs.jsonl"
        _jsonl(path, count, size)
        settings = await _fresh(bootstrap)
        try:
            async with DocumentProducer.from_settings(settings) as producer:
                # A fresh topic elects its leaders first; measure the steady state.
                await producer.publish(DocumentVersion.for_upsert("bench", "warm-up", "x"))
                report = await publish_paths(producer, [path], "bench", show_progress=False)
        finally:
            await _drop_topics(settings)
    assert report.published == count and report.ok, report.summary()
    return report.published / report.elapsed, report.bytes / report.elapsed / 1e6


class _Acks:
    """Collects acknowledgement times and change-to-ack latencies of streamed changes."""

    def __init__(self) -> None:
        self.count = 0
        self.last = 0.0
        self.latencies: list[float] = []

    def __call__(self, doc: DocumentVersion, delivery: Delivery, commit: datetime | None) -> None:
        if commit is None:
            return
        now = time.time()
        self.count += 1
        self.last = now
        self.latencies.append(now - commit.timestamp())


async def bench_postgres(
    bootstrap: str, dsn: str, rows: int, burst: int, rate: int, seconds: float
) -> tuple[float, float, float]:
    """changes/s of a burst, then p50/p99 change-to-ack latency (ms) at ``rate`` changes/s."""
    table = f"bench_cdc_{uuid.uuid4().hex[:10]}"
    slot = f"tgbench_{uuid.uuid4().hex[:10]}"
    settings = await _fresh(bootstrap)
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    ident = sql.Identifier(table)
    rng = random.Random(11)
    body = _text(rng, 1024)
    await conn.execute(
        sql.SQL("CREATE TABLE {} (id text PRIMARY KEY, body text, n int)").format(ident)
    )
    await conn.execute(
        sql.SQL("INSERT INTO {} SELECT 'row' || g, %s, 0 FROM generate_series(1, %s) g").format(
            ident
        ),
        (body, rows),
    )
    acks = _Acks()
    stop = asyncio.Event()
    spec = CaptureSpec(
        table=table, key_column="id", content_column="body", realm="bench", slot=slot
    )
    try:
        async with DocumentProducer.from_settings(settings) as producer:
            cdc = PostgresCdc(dsn, spec, producer, on_ack=acks)
            task = asyncio.create_task(cdc.run(stop))
            while not cdc.stats.streaming or cdc.stats.published < rows:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)

            # Burst: `burst` row updates in transactions of 500 rows, as fast as possible.
            update = sql.SQL("UPDATE {} SET n = n + 1, body = %s WHERE id = ANY(%s)").format(ident)
            ids = [f"row{i}" for i in range(1, rows + 1)]
            start = time.time()
            done = 0
            while done < burst:
                chunk = [ids[(done + j) % rows] for j in range(min(500, burst - done))]
                await conn.execute(update, (f"{body} {done}", chunk))
                done += len(chunk)
            while acks.count < burst:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
            throughput = burst / (acks.last - start)

            # Steady rate: `rate` changes/s in transactions every 10 ms.
            acks.latencies.clear()
            per_tick = max(1, rate // 100)
            target = acks.count + int(rate * seconds)
            tick = 0
            t0 = time.perf_counter()
            while tick * per_tick < rate * seconds:
                chunk = [ids[(tick * per_tick + j) % rows] for j in range(per_tick)]
                await conn.execute(update, (f"{body} s{tick}", chunk))
                tick += 1
                delay = t0 + tick * 0.01 - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            while acks.count < target:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
            stop.set()
            await task
            await cdc.drop()
    finally:
        await conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
        await conn.close()
        await _drop_topics(settings)
    lat = sorted(acks.latencies)
    p50 = lat[len(lat) // 2] * 1000
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
    return throughput, p50, p99


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--doc-bytes", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=1_000)
    parser.add_argument("--burst", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=2_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--only", choices=["publish", "postgres"], help="run one benchmark")
    args = parser.parse_args()
    bootstrap = os.environ.get("TIDEGRAPH_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    dsn = os.environ.get("TIDEGRAPH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

    if args.only != "postgres":
        await _publish_report(args, bootstrap)
    if args.only != "publish":
        await _postgres_report(args, bootstrap, dsn)


async def _publish_report(args: argparse.Namespace, bootstrap: str) -> None:
    publish = [await bench_publish(bootstrap, args.docs, args.doc_bytes) for _ in range(args.runs)]
    for i, (docs, mbps) in enumerate(publish, 1):
        print(f"publish run {i}: {docs:,.0f} docs/s, {mbps:.1f} MB/s")
    print(
        f"publish ({args.docs} JSONL docs of {args.doc_bytes} B), median of {args.runs}: "
        f"{statistics.median(d for d, _ in publish):,.0f} docs/s, "
        f"{statistics.median(m for _, m in publish):.1f} MB/s"
    )


async def _postgres_report(args: argparse.Namespace, bootstrap: str, dsn: str) -> None:
    pg = [
        await bench_postgres(bootstrap, dsn, args.rows, args.burst, args.rate, args.seconds)
        for _ in range(args.runs)
    ]
    for i, (cps, p50, p99) in enumerate(pg, 1):
        print(
            f"postgres run {i}: {cps:,.0f} changes/s; "
            f"at {args.rate}/s p50 {p50:.0f} ms, p99 {p99:.0f} ms"
        )
    print(
        f"postgres connector, median of {args.runs}: "
        f"{statistics.median(c for c, _, _ in pg):,.0f} changes/s (burst of {args.burst}); "
        f"change-to-ack at {args.rate} changes/s: "
        f"p50 {statistics.median(p for _, p, _ in pg):.0f} ms, "
        f"p99 {statistics.median(p for _, _, p in pg):.0f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
