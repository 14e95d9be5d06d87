"""Run the real indexer against the real broker and server, for end-to-end tests.

Each test gets its own topic prefix (so its own three topics) and its own realm names;
indexers run in-process (an asyncio task) or as ``tidegraph indexer`` subprocesses when a
test needs to SIGKILL them.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from psycopg import sql

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.indexer.consumer.indexer import Indexer, IndexerConfig
from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.infra.composition import ModelRegistry
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.schemas.topics import topic_specs
from tidegraph.store import positions

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Topics:
    prefix: str
    bootstrap: str

    @property
    def documents(self) -> str:
        return f"{self.prefix}.documents"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.documents.dlq"

    @property
    def changes(self) -> str:
        return f"{self.prefix}.changes"


async def make_topics(bootstrap: str, prefix: str, partitions: int = 3) -> Topics:
    await ensure_topic_specs(bootstrap, topic_specs(prefix, partitions=partitions))
    return Topics(prefix, bootstrap)


def upsert(
    realm: str,
    doc_key: str,
    content: str,
    *,
    order_key: str | None = None,
    source_version: str | None = None,
    space: str = "default",
    title: str | None = None,
) -> DocumentVersion:
    return DocumentVersion(
        realm=realm,
        space=space,
        doc_key=doc_key,
        op="upsert",
        content=content,
        content_hash=content_hash(content),
        order_key=order_key,
        source_version=source_version,
        title=title,
        event_time=datetime.now(UTC),
    )


def delete(
    realm: str, doc_key: str, *, space: str = "default", source_version: str | None = None
) -> DocumentVersion:
    return DocumentVersion(
        realm=realm,
        space=space,
        doc_key=doc_key,
        op="delete",
        source_version=source_version,
        event_time=datetime.now(UTC),
    )


async def publish(topics: Topics, records: Sequence[DocumentVersion | tuple[bytes, bytes]]) -> None:
    """Publish in order (key = realm); raw (key, value) pairs go through unchanged."""
    producer = AIOKafkaProducer(
        **kafka_client_options(),
        bootstrap_servers=topics.bootstrap,
        acks="all",
        enable_idempotence=True,
        compression_type="lz4",
        linger_ms=2,
    )
    await producer.start()
    try:
        futures = []
        for rec in records:
            if isinstance(rec, DocumentVersion):
                key, value = rec.realm.encode(), rec.to_json()
            else:
                key, value = rec
            futures.append(await producer.send(topics.documents, value, key=key))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def indexer_config(topics: Topics, pg_dsn: str, group: str, **kw: Any) -> IndexerConfig:
    return IndexerConfig(
        bootstrap=topics.bootstrap,
        pg_dsn=pg_dsn,
        topic=topics.documents,
        dlq_topic=topics.dlq,
        group_id=group,
        default_realm=kw.pop("default_realm", RealmConfig(embedder="hashing:64")),
        **kw,
    )


@asynccontextmanager
async def running_indexer(
    topics: Topics,
    pg_dsn: str,
    group: str,
    *,
    indexer_class: type[Indexer] = Indexer,
    **kw: Any,
) -> AsyncIterator[Indexer]:
    registry = ModelRegistry()
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
    indexer = indexer_class(
        indexer_config(topics, pg_dsn, group, **kw), pipeline.prepare, registry.embedder_for
    )
    task = asyncio.create_task(indexer.run())
    try:
        yield indexer
    finally:
        indexer.stop()
        await asyncio.wait_for(task, 60)


def indexer_log(group: str) -> Path:
    """Where the indexer processes of ``group`` write their log (INFO and up)."""
    log_dir = Path(tempfile.gettempdir()) / "tidegraph-test-logs"
    log_dir.mkdir(exist_ok=True)
    return log_dir / f"indexer-{group}.log"


def spawn_indexer(
    topics: Topics,
    pg_dsn: str,
    group: str,
    *extra: str,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """A ``tidegraph indexer`` process of ``group``; ``env`` adds to its environment."""
    environ = dict(os.environ)
    environ.update(
        TIDEGRAPH_KAFKA_BOOTSTRAP=topics.bootstrap,
        TIDEGRAPH_PG_DSN=pg_dsn,
        TIDEGRAPH_TOPIC_PREFIX=topics.prefix,
        TIDEGRAPH_EMBEDDER="hashing:64",
        **(env or {}),
    )
    with open(indexer_log(group), "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tidegraph.infra.cli",
                "indexer",
                "--group",
                group,
                "--log-level",
                "INFO",
                *extra,
            ],
            env=environ,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


async def wait_for(
    predicate: Callable[[], Awaitable[bool]],
    limit: float = 60,
    what: str = "condition",
    *,
    interval: float = 0.1,
) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {limit}s waiting for {what}")


async def stored_position(pg_dsn: str, group: str, topic: str) -> int:
    """Sum of next offsets over the group's partitions: records applied so far."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        return await positions.applied(conn, group, topic)


async def realm_snapshot(pg_dsn: str, realm: str) -> dict[str, Any]:
    """The realm's graph by names (ids differ between runs): what must match across orders."""
    schema = sql.Identifier(f"realm_{realm}")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:

        async def rows(q: sql.Composable) -> list[tuple[Any, ...]]:
            cur = await conn.execute(q)
            return sorted(tuple(r) for r in await cur.fetchall())

        return {
            "documents": await rows(
                sql.SQL("SELECT space, doc_key, status, content_hash FROM {}.documents").format(
                    schema
                )
            ),
            "entities": await rows(
                sql.SQL(
                    "SELECT space, name, type, description, aliases, dormant_since IS NOT NULL"
                    " FROM {}.entities"
                ).format(schema)
            ),
            "relations": await rows(
                sql.SQL(
                    "SELECT r.space, es.name, r.predicate, eo.name, r.negated, r.status, r.weight,"
                    " r.valid_from, r.valid_to, (SELECT x.predicate FROM {s}.relations x"
                    "  WHERE x.id = r.superseded_by)"
                    " FROM {s}.relations r JOIN {s}.entities es ON es.id = r.subject_id"
                    " JOIN {s}.entities eo ON eo.id = r.object_id"
                ).format(s=schema)
            ),
            "live_chunks": await rows(
                sql.SQL(
                    "SELECT space, doc_key, ordinal, text FROM {}.chunks WHERE t_expired IS NULL"
                ).format(schema)
            ),
        }


async def believed_at(pg_dsn: str, realm: str, t: datetime) -> list[tuple[Any, ...]]:
    schema = sql.Identifier(f"realm_{realm}")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.negated, h.state"
                " FROM {s}.relation_history h"
                " JOIN {s}.relations r ON r.id = h.relation_id"
                " JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id"
                " WHERE h.t_created <= %s AND (h.t_expired IS NULL OR h.t_expired > %s)"
            ).format(s=schema),
            (t, t),
        )
        return sorted(tuple(r) for r in await cur.fetchall())


async def outbox(pg_dsn: str, realm: str) -> list[tuple[int, int, str]]:
    schema = sql.Identifier(f"realm_{realm}")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT seq, idx, kind FROM {}.outbox ORDER BY seq, idx").format(schema)
        )
        return [(int(a), int(b), str(c)) for a, b, c in await cur.fetchall()]


async def dead_letters(topics: Topics, n: int) -> list[tuple[bytes | None, dict[str, bytes]]]:
    """The first ``n`` records of the DLQ (fewer if they do not come within ~10 s): value
    and headers."""
    consumer = AIOKafkaConsumer(
        topics.dlq,
        **kafka_client_options(),
        bootstrap_servers=topics.bootstrap,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    out: list[tuple[bytes | None, dict[str, bytes]]] = []
    try:
        for _ in range(50):
            batch = await consumer.getmany(timeout_ms=200)
            for msgs in batch.values():
                out.extend((m.value, dict(m.headers)) for m in msgs)
            if len(out) >= n:
                break
    finally:
        await consumer.stop()
    return out
