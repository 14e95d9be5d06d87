"""What `tidegraph status` says about the data: realms, their documents, indexer lag.

Best effort by design: status must answer even when a service is down, so each part reports
its own failure instead of failing the command.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition
from psycopg_pool import PoolTimeout

from tidegraph.infra.local_kafka import brokers_answering
from tidegraph.infra.placed import servers_for, small_pool
from tidegraph.infra.reach import CONNECT_TIMEOUT
from tidegraph.infra.tables import aligned
from tidegraph.schemas import ConfigError, Servers, kafka_client_options
from tidegraph.store import (
    NO_REALM,
    Cluster,
    Hold,
    RealmFigures,
    control_exists,
    figures_everywhere,
    holds,
    key_realm,
    positions,
    replay_lag,
)

SCAN_LIMIT = 10_000
"""Records read per partition, at most, to find whose records wait (status stays quick)."""


@dataclass(frozen=True)
class StandbyLag:
    """How far one streaming standby's replay is behind its primary."""

    label: str
    """``server/standby``."""
    lag: float | None
    """Seconds; ``None`` when it does not answer or follows no primary (promoted)."""
    problem: str | None = None
    """Why it was not measured, when it was not."""


@dataclass
class DataStatus:
    """Realms, where each stands, and the indexer group's lag per partition."""

    realms: list[RealmFigures] = field(default_factory=list)
    lag: dict[int, int] = field(default_factory=dict)
    """Partition → records between the high watermark and the group's cursor."""
    problems: list[str] = field(default_factory=list)
    waiting: list[Hold] = field(default_factory=list)
    """Records the indexer group stopped at, and why."""
    behind: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    """(partition, held realm) → the partition's other realms whose own position lies past
    the held record (they went on)."""
    held_up: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    """(partition, realm of the record a paused partition waits at) → the other realms
    with records waiting behind it on that partition."""
    unsettled: dict[int, Counter[str]] = field(default_factory=dict)
    """Partition → realm → records not yet settled (read up to :data:`SCAN_LIMIT`)."""
    scan_cut: set[int] = field(default_factory=set)
    """Partitions whose unsettled records were not all read (counts are lower bounds)."""
    standbys: list[StandbyLag] = field(default_factory=list)
    """Each named standby's replay lag (the query service's reads skip laggards)."""

    def realm_lag(self, realm: str) -> int:
        """Records of ``realm`` in the log not yet applied (a lower bound when cut)."""
        return sum(counts[realm] for counts in self.unsettled.values())

    def stands(self, topic: str) -> dict[int, dict[str, int]]:
        """Partition → realm → where the realm stands on it (its own position)."""
        out: dict[int, dict[str, int]] = {}
        for r in self.realms:
            for (t, p), offset in r.positions.items():
                if t == topic:
                    out.setdefault(p, {})[r.realm] = offset
        return out


async def data_status(dsn: str, bootstrap: str, topic: str, group: str) -> DataStatus:
    out = DataStatus()
    cursors: dict[int, int] = {}
    try:
        cluster = Cluster(servers_for(dsn), small_pool)
    except ConfigError as exc:
        out.problems.append(f"PostgreSQL servers: {exc}")
        return out
    try:
        await cluster.open(wait=5)
        async with cluster.connection() as conn:
            if not await control_exists(conn):
                return out  # a fresh server: no realm, no indexer has run yet
            cursors = await positions.read_group(conn, group, topic)
            out.waiting = [h for h in await holds.listed(conn, group) if h.topic == topic]
        out.realms, problems = await figures_everywhere(cluster)
        out.problems += [f"PostgreSQL: {p}" for p in problems]
        out.standbys = await standby_lags(cluster.servers)
    except (psycopg.Error, PoolTimeout) as exc:
        out.problems.append(f"PostgreSQL: {exc}")
        return out
    finally:
        await cluster.close()
    stands = out.stands(topic)
    for h in out.waiting:
        if h.kind == "held":
            on = stands.get(h.partition, {})
            out.behind[(h.partition, h.realm)] = sorted(
                r for r, at in on.items() if r != h.realm and at > h.offset
            )
    partitions = set(cursors) | set(stands)
    if not partitions:
        return out
    if not await asyncio.to_thread(brokers_answering, bootstrap, timeout=5.0):
        out.problems.append(f"Kafka at {bootstrap} does not answer")
        return out
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        request_timeout_ms=5000,
        enable_auto_commit=False,
        **kafka_client_options(),
    )
    try:
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        ends = {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
        out.lag = {p: max(0, ends[p] - c) for p, c in cursors.items() if p in ends}
        await _scan_unsettled(consumer, topic, stands, cursors, ends, out)
    except Exception as exc:  # noqa: BLE001 - status reports, never fails
        out.problems.append(f"Kafka: {exc!r}")
    finally:
        await consumer.stop()
    for h in out.waiting:
        if h.kind == "paused":
            waiting = out.unsettled.get(h.partition, Counter())
            out.held_up[(h.partition, h.realm)] = sorted(r for r in waiting if r != h.realm)
    return out


async def _scan_unsettled(
    consumer: AIOKafkaConsumer,
    topic: str,
    stands: dict[int, dict[str, int]],
    cursors: dict[int, int],
    ends: dict[int, int],
    out: DataStatus,
) -> None:
    """Count, per partition and realm, the records not yet settled: those at or past the
    realm's own position (a realm that holds none on the partition yet stands at the
    group's cursor). Reads from the lowest of them, at most :data:`SCAN_LIMIT` records a
    partition."""
    starts = {p: min([*stands.get(p, {}).values(), cursors.get(p, end)]) for p, end in ends.items()}
    todo = {p: (starts[p], min(end, starts[p] + SCAN_LIMIT)) for p, end in ends.items()}
    todo = {p: span for p, span in todo.items() if span[0] < span[1]}
    out.scan_cut = {p for p, (_, stop) in todo.items() if stop < ends[p]}
    if not todo:
        return
    consumer.assign([TopicPartition(topic, p) for p in todo])
    for p, (start, _) in todo.items():
        consumer.seek(TopicPartition(topic, p), start)
    while todo:
        batch = await consumer.getmany(timeout_ms=1000)
        if not batch:
            break  # nothing more within a second: report what was read
        for tp, records in batch.items():
            if tp.partition not in todo:
                continue
            stop = todo[tp.partition][1]
            on = stands.get(tp.partition, {})
            floor = cursors.get(tp.partition, 0)
            counts = out.unsettled.setdefault(tp.partition, Counter())
            for record in records:
                if record.offset >= stop:
                    break
                realm = key_realm(record.key)
                if realm != NO_REALM and record.offset >= on.get(realm, floor):
                    counts[realm] += 1
            if records[-1].offset + 1 >= stop:
                del todo[tp.partition]


async def standby_lags(servers: Servers) -> list[StandbyLag]:
    """Every named standby's replay lag, each on a connection of its own (one that does
    not answer within the connect timeout is reported, not waited on)."""
    out = []
    for server in servers.names:
        for standby in servers.standbys(server):
            try:
                async with await psycopg.AsyncConnection.connect(
                    standby.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT
                ) as conn:
                    lag = await replay_lag(conn)
            except (psycopg.Error, OSError) as exc:
                out.append(StandbyLag(standby.label, None, _first_line(exc)))
                continue
            problem = None if lag is not None else "not in recovery: follows no primary"
            out.append(StandbyLag(standby.label, lag, problem))
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _lag_text(s: StandbyLag) -> str:
    if s.lag is None:
        return f"- ({s.problem})"
    return "none" if s.lag == 0 else f"{s.lag:.3f}s"


def render(status: DataStatus) -> str:
    lines = []
    if status.realms:
        rows = [("REALM", "SERVER", "DOCUMENTS", "HEAD SEQ", "LAST WRITE", "EMBEDDER")]
        for r in status.realms:
            docs = ", ".join(f"{n} {s}" for s, n in sorted(r.documents.items())) or "none"
            if r.refused_facts:
                docs += f" ({r.refused_facts} with refused facts)"
            when = r.last_write_at.isoformat(timespec="seconds") if r.last_write_at else "-"
            rows.append((r.realm, r.server, docs, str(r.head_seq), when, r.embedder))
        lines.extend(aligned(rows))
    else:
        lines.append("no realms yet")
    if status.standbys:
        lags = [("STANDBY", "REPLAY LAG"), *((s.label, _lag_text(s)) for s in status.standbys)]
        lines.extend(aligned(lags))
    if status.lag:
        total = sum(status.lag.values())
        parts = ", ".join(f"p{p}={n}" for p, n in sorted(status.lag.items()) if n)
        lines.append(f"indexer lag: {total} records" + (f" ({parts})" if parts else ""))
    for h in status.waiting:
        doc = f", doc_key {h.doc_key!r}" if h.doc_key is not None else ""
        since = h.since.isoformat(timespec="seconds")
        retry = f"; retried at {h.retry_at.isoformat(timespec='seconds')}" if h.retry_at else ""
        if h.error_class == "ServerUnavailable":
            lines.append(
                f"indexer: realm {h.realm} waits at partition {h.partition} offset {h.offset}"
                f" since {since}: {h.error} — the partition's other realms go on{retry}"
            )
        elif h.kind == "paused":
            lines.append(
                f"indexer paused partition {h.partition} at offset {h.offset} (realm {h.realm}"
                f"{doc}) since {since}: {h.error_class}: {h.error}{retry}"
            )
            others = status.held_up.get((h.partition, h.realm))
            if others:
                lines.append(f"  realms held up behind it: {', '.join(others)}")
        else:
            lines.append(
                f"indexer held realm {h.realm} at partition {h.partition} offset {h.offset}"
                f"{doc} since {since}: {h.error_class}: {h.error} — fix the cause{retry}"
            )
            others = status.behind.get((h.partition, h.realm))
            if others:
                lines.append(
                    f"  other realms of partition {h.partition} go on: {', '.join(others)}"
                )
    lines.extend(f"unavailable: {p}" for p in status.problems)
    return "\n".join(lines)


def as_json(status: DataStatus) -> dict[str, Any]:
    """What :func:`render` says, as ``status --json`` carries it."""
    return {
        "realms": {
            r.realm: {
                "server": r.server,
                "documents": r.documents,
                "refused_facts": r.refused_facts,
                "head_seq": r.head_seq,
                "last_write_at": r.last_write_at.isoformat() if r.last_write_at else None,
                "embedder": r.embedder,
                "extractor": r.extractor,
                "lag": status.realm_lag(r.realm),
            }
            for r in status.realms
        },
        "indexer_lag": {str(p): n for p, n in status.lag.items()},
        "standbys": {
            s.label: {
                "replay_lag_seconds": s.lag if s.lag is None or s.lag != float("inf") else None,
                "problem": s.problem,
            }
            for s in status.standbys
        },
        "indexer_waiting": [
            {
                "kind": h.kind,
                "realm": h.realm,
                "topic": h.topic,
                "partition": h.partition,
                "offset": h.offset,
                "doc_key": h.doc_key,
                "error_class": h.error_class,
                "error": h.error,
                "since": h.since.isoformat(),
                "retry_at": h.retry_at.isoformat() if h.retry_at else None,
                "other_realms_going_on": status.behind.get((h.partition, h.realm), []),
                "realms_held_up_behind": status.held_up.get((h.partition, h.realm), []),
            }
            for h in status.waiting
        ],
        "problems": status.problems,
    }
