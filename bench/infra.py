"""Start-up times of the local services and Kafka throughput through aiokafka.

Each figure is the median of 3 runs, on services this script starts itself (free ports, a
throw-away state folder), so nothing else on the machine is disturbed:

- Kafka cold start: fresh data dir (storage format + JVM start until metadata answers);
  the jar download is excluded (fetched once before timing).
- Kafka warm start: same data dir, JVM start until metadata answers.
- PostgreSQL start: existing data dir until a connection succeeds (initdb reported apart).
- Produce: 1 KiB incompressible records over 6 partitions, acks=all, idempotent, linger
  5 ms, 256 KiB batches; through send() (futures awaited in windows, never one by one) and
  through create_batch()/send_batch(), each with lz4 and with snappy. aiokafka compresses
  lz4 at level 9 (high compression, not configurable), which costs CPU on 2 cores.
- Consume: the first variant's records read back by a fresh consumer from offset 0.

Run: ``.venv/bin/python bench/infra.py [--records N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.partitioner import DefaultPartitioner

from tidegraph.infra import _proc, local_kafka, local_pg
from tidegraph.schemas.kafka_security import kafka_client_options

RUNS = 3
RECORD_BYTES = 1024
PARTITIONS = 6
WINDOW = 20_000
"""Outstanding send() futures before the oldest are awaited (bounds memory, keeps the pipe full)."""
KEYS = [f"realm{i}".encode() for i in range(12)]


@dataclass(frozen=True)
class Variant:
    """One way of producing: which API and which codec."""

    batches: bool
    """True: create_batch()/send_batch(); False: one send() per record."""
    compression: str
    """Producer compression_type."""

    @property
    def label(self) -> str:
        return f"produce {'batches' if self.batches else 'send()'} {self.compression}"


VARIANTS = (
    Variant(batches=False, compression="lz4"),
    Variant(batches=True, compression="lz4"),
    Variant(batches=False, compression="snappy"),
    Variant(batches=True, compression="snappy"),
)


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


def _timed(action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


# --- start-up -------------------------------------------------------------------------------


PASSWORD = local_kafka.new_password()
"""The bench broker's SCRAM password, the same across its restarts."""


def kafka_start(layout: local_kafka.KafkaLayout, runtime: local_kafka.KafkaRuntime) -> float:
    """Seconds from launch until the broker answers metadata; the broker is left running."""
    port, controller = _proc.free_port(), _proc.free_port()

    def start() -> None:
        process = local_kafka.launch(
            layout, runtime, port=port, controller_port=controller, password=PASSWORD
        )
        local_kafka.wait_ready(layout, process, timeout=120)

    return _timed(start)


def pg_start(layout: local_pg.PgLayout) -> float:
    """Seconds from launch until a connection succeeds; the server is left running."""

    def start() -> None:
        process = local_pg.launch(layout, port=_proc.free_port())
        local_pg.wait_ready(layout, process, timeout=60)

    return _timed(start)


# --- throughput -------------------------------------------------------------------------------


def _payloads(count: int) -> list[bytes]:
    pool = os.urandom(4 * 1024 * 1024)
    step = 4099  # not a divisor of the pool: every record is a different slice
    limit = len(pool) - RECORD_BYTES
    return [pool[(i * step) % limit : (i * step) % limit + RECORD_BYTES] for i in range(count)]


async def create_topic(bootstrap: str, topic: str) -> None:
    """Create the topic and wait until every partition has a leader (no NotLeader retries)."""
    admin = AIOKafkaAdminClient(**kafka_client_options(), bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        for _ in range(100):
            (described,) = await admin.describe_topics([topic])
            leaders = [p["leader"] for p in described["partitions"]]
            if len(leaders) == PARTITIONS and all(leader >= 0 for leader in leaders):
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


def _producer(bootstrap: str, compression: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        **kafka_client_options(),
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        compression_type=compression,
        linger_ms=5,
        max_batch_size=256 * 1024,
        max_request_size=4 * 1024 * 1024,
    )


async def _send_each(producer: AIOKafkaProducer, topic: str, payloads: list[bytes]) -> None:
    """The ordinary API: one send() per record, delivery futures awaited in windows."""
    pending: list[asyncio.Future[object]] = []
    for i, payload in enumerate(payloads):
        pending.append(await producer.send(topic, payload, key=KEYS[i % len(KEYS)]))
        if len(pending) >= WINDOW:
            await asyncio.gather(*pending[: WINDOW // 2])
            del pending[: WINDOW // 2]
    await asyncio.gather(*pending)


async def _send_batches(producer: AIOKafkaProducer, topic: str, payloads: list[bytes]) -> None:
    """The bulk API: records appended to per-partition batches, one future per batch."""
    partitions = sorted(await producer.partitions_for(topic))
    choose = DefaultPartitioner()
    open_batches: dict[int, Any] = {}
    pending: list[asyncio.Future[object]] = []
    for i, payload in enumerate(payloads):
        key = KEYS[i % len(KEYS)]
        partition = choose(key, partitions, partitions)
        batch = open_batches.get(partition) or producer.create_batch()
        if batch.append(key=key, value=payload, timestamp=None) is None:  # full
            batch.close()
            pending.append(await producer.send_batch(batch, topic, partition=partition))
            batch = producer.create_batch()
            batch.append(key=key, value=payload, timestamp=None)
        open_batches[partition] = batch
    for partition, batch in open_batches.items():
        batch.close()
        pending.append(await producer.send_batch(batch, topic, partition=partition))
    await asyncio.gather(*pending)


async def produce(bootstrap: str, topic: str, payloads: list[bytes], variant: Variant) -> float:
    """Seconds to send every payload and have every acknowledgement back."""
    producer = _producer(bootstrap, variant.compression)
    await producer.start()
    try:
        started = time.perf_counter()
        send = _send_batches if variant.batches else _send_each
        await send(producer, topic, payloads)
        return time.perf_counter() - started
    finally:
        await producer.stop()


async def consume(bootstrap: str, topic: str, count: int) -> float:
    """Seconds for a fresh consumer to read ``count`` records from the beginning."""
    consumer = AIOKafkaConsumer(
        topic,
        **kafka_client_options(),
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_bytes=64 * 1024 * 1024,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    try:
        seen = 0
        started = time.perf_counter()
        while seen < count:
            batches = await consumer.getmany(timeout_ms=1000, max_records=50_000)
            seen += sum(len(records) for records in batches.values())
        return time.perf_counter() - started
    finally:
        await consumer.stop()


async def throughput(
    bootstrap: str, records: int
) -> tuple[dict[Variant, list[float]], list[float]]:
    """Produce seconds per variant, and consume seconds (read back from the first variant)."""
    payloads = _payloads(records)
    produce_s: dict[Variant, list[float]] = {v: [] for v in VARIANTS}
    consume_s: list[float] = []
    for run in range(RUNS):
        for index, variant in enumerate(VARIANTS):
            topic = f"bench.{os.getpid()}.{run}.{index}"
            await create_topic(bootstrap, topic)
            produce_s[variant].append(await produce(bootstrap, topic, payloads, variant))
            if index == 0:
                consume_s.append(await consume(bootstrap, topic, records))
    return produce_s, consume_s


# --- report ----------------------------------------------------------------------------------


def _rate(label: str, records: int, seconds: list[float], target: float) -> str:
    median = _median(seconds)
    per_s = records / median
    mb_s = records * RECORD_BYTES / median / 1e6
    verdict = "ok" if per_s >= target else "BELOW TARGET"
    runs = ", ".join(f"{records / s:,.0f}" for s in seconds)
    return (
        f"{label:<26} {per_s:>10,.0f} rec/s  {mb_s:7.1f} MB/s   "
        f"(target >= {target:,.0f} rec/s: {verdict}; runs {runs})"
    )


def _secs(label: str, samples: list[float], target: float | None = None) -> str:
    runs = ", ".join(f"{s:.2f}" for s in samples)
    verdict = ""
    if target is not None:
        verdict = f"(target < {target:g} s: {'ok' if _median(samples) < target else 'ABOVE'}) "
    return f"{label:<26} {_median(samples):10.2f} s     {verdict}runs {runs}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records per run")
    args = parser.parse_args()
    os.environ.update(local_kafka.local_security(PASSWORD).env())  # the clients below log in

    runtime = local_kafka.prepare()  # fetches the jars once, outside every timing
    state = Path(tempfile.mkdtemp(prefix="tidegraph-bench-", dir=Path.cwd() / ".tidegraph"))
    kafka = local_kafka.KafkaLayout.under(state)
    pg = local_pg.PgLayout.under(state)
    try:
        cold: list[float] = []
        for _ in range(RUNS):
            shutil.rmtree(kafka.data, ignore_errors=True)
            cold.append(kafka_start(kafka, runtime))
            local_kafka.stop(kafka)
        warm: list[float] = []
        for _ in range(RUNS):
            warm.append(kafka_start(kafka, runtime))
            local_kafka.stop(kafka)

        initdb = pg_start(pg)
        local_pg.stop(pg)
        pg_warm: list[float] = []
        for _ in range(RUNS):
            pg_warm.append(pg_start(pg))
            local_pg.stop(pg)

        kafka_start(kafka, runtime)
        record = local_kafka.running(kafka)
        assert record is not None
        produce_s, consume_s = asyncio.run(throughput(record.bootstrap, args.records))
    finally:
        local_kafka.stop(kafka)
        local_pg.stop(pg)
        shutil.rmtree(state, ignore_errors=True)

    print(f"tidegraph infra bench: Kafka {runtime.version}, median of {RUNS} runs")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"  {os.cpu_count()} cores, load average {load}; {args.records:,} records per run")
    print(_secs("kafka cold start", cold))
    print(_secs("kafka warm start", warm, target=10))
    print(_secs("postgres start", pg_warm))
    print(f"{'postgres initdb+start':<26} {initdb:10.2f} s     (once)")
    for variant, seconds in produce_s.items():
        print(_rate(variant.label, args.records, seconds, 20_000))
    print(_rate(f"consume ({VARIANTS[0].compression})", args.records, consume_s, 50_000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
