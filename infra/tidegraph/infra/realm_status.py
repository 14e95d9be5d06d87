"""What `tidegraph status` says about the data: realms, their documents, indexer lag.

Best effort by design: status must answer even when a service is down, so each part reports
its own failure instead of failing the command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition
from psycopg import sql

from tidegraph.store.realms import list_realms


@dataclass(frozen=True)
class RealmRow:
    """One realm's headline figures."""

    realm: str
    documents: dict[str, int]
    """Document count by status (indexed, deleted, failed)."""
    head_seq: int
    """Latest commit sequence of the realm's change feed."""
    last_write_at: datetime | None
    embedder: str
    extractor: str


@dataclass
class DataStatus:
    """Realms and the indexer group's lag per partition."""

    realms: list[RealmRow] = field(default_factory=list)
    lag: dict[int, int] = field(default_factory=dict)
    """Partition → records between the high watermark and the applied position."""
    problems: list[str] = field(default_factory=list)


async def data_status(dsn: str, bootstrap: str, topic: str, group: str) -> DataStatus:
    out = DataStatus()
    positions: dict[int, int] = {}
    try:
        async with await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=3
        ) as conn:
            for realm, name in await list_realms(conn):
                schema = sql.Identifier(name)
                cur = await conn.execute(
                    sql.SQL("SELECT status, count(*) FROM {}.documents GROUP BY status").format(
                        schema
                    )
                )
                counts = {str(s): int(n) for s, n in await cur.fetchall()}
                cur = await conn.execute(
                    sql.SQL("SELECT seq, last_write_at, embedder, extractor FROM {}.meta").format(
                        schema
                    )
                )
                meta = await cur.fetchone()
                if meta is not None:
                    out.realms.append(
                        RealmRow(realm, counts, int(meta[0]), meta[1], str(meta[2]), str(meta[3]))
                    )
            cur = await conn.execute(
                "SELECT partition, next_offset FROM tidegraph.consumer_positions"
                " WHERE group_id = %s AND topic = %s",
                (group, topic),
            )
            positions = {int(p): int(o) for p, o in await cur.fetchall()}
    except psycopg.Error as exc:
        out.problems.append(f"PostgreSQL: {exc}")
        return out
    if not positions:
        return out
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await consumer.start()
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in positions])
        out.lag = {tp.partition: max(0, end - positions[tp.partition]) for tp, end in ends.items()}
    except Exception as exc:  # noqa: BLE001 - status reports, never fails
        out.problems.append(f"Kafka: {exc!r}")
    finally:
        await consumer.stop()
    return out


def render(status: DataStatus) -> str:
    lines = []
    if status.realms:
        lines.append("REALM  DOCUMENTS  HEAD SEQ  LAST WRITE  EMBEDDER")
        for r in status.realms:
            docs = ", ".join(f"{n} {s}" for s, n in sorted(r.documents.items())) or "none"
            when = r.last_write_at.isoformat(timespec="seconds") if r.last_write_at else "-"
            lines.append(f"{r.realm}  {docs}  {r.head_seq}  {when}  {r.embedder}")
    else:
        lines.append("no realms yet")
    if status.lag:
        total = sum(status.lag.values())
        parts = ", ".join(f"p{p}={n}" for p, n in sorted(status.lag.items()) if n)
        lines.append(f"indexer lag: {total} records" + (f" ({parts})" if parts else ""))
    lines.extend(f"unavailable: {p}" for p in status.problems)
    return "\n".join(lines)
