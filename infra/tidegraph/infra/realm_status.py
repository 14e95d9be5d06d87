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

from tidegraph.store import holds, positions
from tidegraph.store.holds import Hold
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
    waiting: list[Hold] = field(default_factory=list)
    """Records the indexer group stopped at, and why."""
    behind: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    """(partition, held realm) → the partition's other realms whose records lie past the
    held record (they go on; their position is kept per realm)."""


async def data_status(dsn: str, bootstrap: str, topic: str, group: str) -> DataStatus:
    out = DataStatus()
    positions_at: dict[int, int] = {}
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
            group_positions = await positions.read_group(conn, group, topic)
            positions_at = {p: pos.next_offset for p, pos in group_positions.items()}
            out.waiting = [h for h in await holds.listed(conn, group) if h.topic == topic]
            for h in out.waiting:
                if h.kind == "held" and h.partition in group_positions:
                    ahead = group_positions[h.partition].ahead
                    out.behind[(h.partition, h.realm)] = sorted(r for r in ahead if r != h.realm)
    except psycopg.Error as exc:
        out.problems.append(f"PostgreSQL: {exc}")
        return out
    if not positions_at:
        return out
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await consumer.start()
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in positions_at])
        out.lag = {
            tp.partition: max(0, end - positions_at[tp.partition]) for tp, end in ends.items()
        }
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
    for h in status.waiting:
        what = "held (fix the cause; retried periodically)" if h.kind == "held" else "paused"
        doc = f" doc_key {h.doc_key!r}" if h.doc_key is not None else ""
        lines.append(
            f"indexer {what}: realm {h.realm} at partition {h.partition} offset {h.offset}"
            f"{doc} since {h.since.isoformat(timespec='seconds')}: {h.error_class}: {h.error}"
        )
        others = status.behind.get((h.partition, h.realm))
        if others:
            lines.append(f"  other realms of partition {h.partition} go on: {', '.join(others)}")
    lines.extend(f"unavailable: {p}" for p in status.problems)
    return "\n".join(lines)
