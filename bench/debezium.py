"""The Debezium source's throughput and CPU per event, against the real broker.

    . .tidegraph/env   # or TIDEGRAPH_KAFKA_BOOTSTRAP and the SASL variables
    python bench/debezium.py [--events 50000] [--schemas | --no-schemas]

Debezium PostgreSQL change events (the envelope Debezium 3.6.1 writes, 1 KiB of text per
row, JSON with or without embedded schemas) are written to a topic first; then a real
`tidegraph connect debezium` process reads them into the documents topic. Measured from the
source's start to the last document acknowledged (its offsets committed): events/s, and
the source process's CPU (user + system, from /proc) per event. The Debezium connector
itself is not in the loop: this is what the source adds on top of it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from cpu import process_cpu

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.topics import TopicSpec, topic_specs

ROOT = Path(__file__).resolve().parents[1]
TEXT = ("Ada Lovelace worked with Charles Babbage on the Analytical Engine. " * 16)[:1024]


def _event(i: int, schemas: bool) -> tuple[bytes, bytes]:
    row = {"id": i, "body": f"{TEXT} {i}", "title": f"Row {i}", "published": 17956 + i % 900}
    source = {
        "version": "3.6.1.Final", "connector": "postgresql", "name": "bench",
        "ts_ms": 1_796_534_607_072 + i, "snapshot": "false", "db": "postgres",
        "sequence": f'["{25_000_000 + i * 200}","{25_000_100 + i * 200}"]',
        "schema": "public", "table": "articles", "txId": 1000 + i,
        "lsn": 25_000_100 + i * 200,
    }  # fmt: skip
    payload = {"before": None, "after": row, "source": source, "op": "c", "ts_ms": source["ts_ms"]}
    key: dict[str, object] = {"id": i}
    if schemas:
        fields = [
            {"type": "int32", "optional": False, "field": "id"},
            {"type": "string", "optional": True, "field": "body"},
            {"type": "string", "optional": True, "field": "title"},
            {"type": "int32", "optional": True, "name": "io.debezium.time.Date",
             "field": "published"},
        ]  # fmt: skip
        value_schema = {
            "type": "struct",
            "fields": [
                {"type": "struct", "fields": fields, "optional": True, "field": "before"},
                {"type": "struct", "fields": fields, "optional": True, "field": "after"},
            ],
        }
        payload = {"schema": value_schema, "payload": payload}
        key = {"schema": {"type": "struct", "fields": fields[:1]}, "payload": key}
    return orjson.dumps(key), orjson.dumps(payload)


async def _write_events(bootstrap: str, topic: str, count: int, schemas: bool) -> None:
    await ensure_topic_specs(bootstrap, [TopicSpec(topic, 1)])
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20,
        compression_type="lz4", **kafka_client_options(),
    )  # fmt: skip
    await producer.start()
    try:
        futures = []
        for i in range(count):
            key, value = _event(i, schemas)
            futures.append(await producer.send(topic, value, key=key))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _documents(consumer: AIOKafkaConsumer, topic: str) -> int:
    partitions = consumer.partitions_for_topic(topic) or {0}
    ends = await consumer.end_offsets([TopicPartition(topic, p) for p in partitions])
    return sum(ends.values())


async def run(bootstrap: str, count: int, schemas: bool) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix, events = f"benchdbz{tag}", f"benchdbz{tag}.public.articles"
    await ensure_topic_specs(bootstrap, topic_specs(prefix, partitions=1))
    await _write_events(bootstrap, events, count, schemas)
    mapping = Path(tempfile.mkdtemp()) / "mapping.yaml"
    mapping.write_text("tables:\n  public.articles: {key: id, content: body, title: title}\n")
    command = [
        sys.executable, "-m", "tidegraph.infra.cli", "connect", "debezium",
        "--topics", f"benchdbz{tag}\\..*", "--realm", f"bench{tag}",
        "--mapping", str(mapping), "--topic-prefix", prefix, "--bootstrap", bootstrap,
    ]  # fmt: skip
    watch = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, **kafka_client_options()
    )
    await watch.start()
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        while await _documents(watch, f"{prefix}.documents") < count:
            if proc.poll() is not None:
                raise SystemExit(f"the source exited with {proc.returncode}")
            await asyncio.sleep(0.1)
        elapsed = time.monotonic() - started
        cpu = process_cpu(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
        await watch.stop()
    print(
        f"schemas={'on' if schemas else 'off'} events={count} elapsed={elapsed:.1f}s "
        f"events/s={count / elapsed:,.0f} cpu={cpu:.1f}s cpu/event={cpu / count * 1e6:.0f}µs "
        f"(process start included, {os.cpu_count()} cores)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--schemas", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    bootstrap = os.environ.get("TIDEGRAPH_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    asyncio.run(run(bootstrap, args.events, args.schemas))


if __name__ == "__main__":
    main()
