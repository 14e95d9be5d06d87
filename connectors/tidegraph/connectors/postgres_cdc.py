"""The PostgreSQL connector: a table's rows as documents, through logical decoding.

Setup creates a publication on the table and a replication slot using ``pgoutput``. The slot
is created on a replication connection that exports its snapshot; the existing rows are read
under exactly that snapshot, so the initial load and the change stream meet without a gap
or an overlap.

Then the slot is streamed (``START_REPLICATION``), and for each committed transaction:

1. decode its ``pgoutput`` messages and submit one document version per row change;
2. keep reading while Kafka acknowledges (many transactions are in flight at once);
3. once every record of a transaction *and of all transactions before it* is
   acknowledged, report the transaction's end as flushed — only then does the slot's
   confirmed position move past it.

A crash at any point therefore loses nothing: a restart streams again from the confirmed
position (duplicates are harmless, the indexer is idempotent). When the table is idle, the
server's keepalives let the slot move past other tables' WAL once nothing is in flight.

``TRUNCATE`` is not turned into deletes (pgoutput does not say which keys went); it is
logged. A crash during the initial load is caught by a marker: the publication's comment
records that the snapshot of this slot completed; a slot found without it is dropped and
the load redone.
"""

# Long on purpose: one class drives the replication protocol (snapshot, stream, acknowledge after
# Kafka's ack); its steps share the slot's state and read in protocol order.
from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql

from tidegraph.connectors import pgoutput
from tidegraph.connectors.errors import DeliveryError, SourceSetupError
from tidegraph.connectors.postgres_capture import (
    CaptureSpec,
    Conn,
    RowMapper,
    Table,
    default_slot_name,
    source_version,
)
from tidegraph.connectors.producer import Delivery, DocumentProducer
from tidegraph.connectors.replication import Keepalive, ReplicationLost, ReplicationStream
from tidegraph.schemas import DocumentVersion, validate_realm

__all__ = [
    "AckCallback",
    "CaptureSpec",
    "CdcStats",
    "PostgresCdc",
    "default_slot_name",
    "source_version",
]

log = logging.getLogger(__name__)

MARKER_PREFIX = "tidegraph cdc"

AckCallback = Callable[[DocumentVersion, Delivery, datetime | None], None]
"""Called per acknowledged document with the source commit time (``None`` for the load)."""


class CdcStats:
    """Counters, for progress lines and the benchmark."""

    def __init__(self) -> None:
        self.snapshot_rows = 0
        self.changes = 0
        self.published = 0
        self.refused = 0
        self.confirmed_lsn = 0
        self.streaming = False


class _Txn:
    """A transaction's records: those still waiting to be sent, and batches awaiting acks.

    It is done when nothing is waiting and every batch holding one of its records is
    acknowledged; only then may the stream be confirmed past it.
    """

    __slots__ = ("end_lsn", "docs", "unsent", "futures", "remaining", "error")

    def __init__(self) -> None:
        self.end_lsn = 0
        self.docs = 0
        self.unsent = 0
        self.futures: list[asyncio.Future[list[Delivery]]] = []
        self.remaining = 0
        self.error: BaseException | None = None

    def sent(self, count: int, future: asyncio.Future[list[Delivery]]) -> None:
        self.unsent -= count
        self.futures.append(future)
        self.remaining += 1
        future.add_done_callback(self._acked)

    def failed(self, count: int, error: BaseException) -> None:
        self.unsent -= count
        self.error = self.error or error

    def _acked(self, future: asyncio.Future[list[Delivery]]) -> None:
        self.remaining -= 1
        if self.error is None:
            cancelled = future.cancelled()
            self.error = DeliveryError("send cancelled") if cancelled else future.exception()

    def done(self) -> bool:
        return self.unsent == 0 and self.remaining == 0


class _Outbox:
    """Documents decoded and not yet handed to the producer, with their transactions."""

    def __init__(self) -> None:
        self.docs: list[DocumentVersion] = []
        self.times: list[datetime | None] = []
        self.txns: list[list[Any]] = []  # [transaction, how many of its documents]

    def add(self, doc: DocumentVersion, txn: _Txn, commit_time: datetime | None) -> None:
        self.docs.append(doc)
        self.times.append(commit_time)
        txn.docs += 1
        txn.unsent += 1
        if self.txns and self.txns[-1][0] is txn:
            self.txns[-1][1] += 1
        else:
            self.txns.append([txn, 1])

    def take(self) -> _Outbox:
        """Everything in the outbox, leaving it empty."""
        chunk = _Outbox()
        chunk.docs, chunk.times, chunk.txns = self.docs, self.times, self.txns
        self.docs, self.times, self.txns = [], [], []
        return chunk


class PostgresCdc:
    """Captures one table of one database into one realm."""

    def __init__(
        self,
        dsn: str,
        spec: CaptureSpec,
        producer: DocumentProducer,
        *,
        max_in_flight: int = 20_000,
        status_interval: float = 0.1,
        on_ack: AckCallback | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        validate_realm(spec.realm)
        self.dsn = dsn
        self.spec = spec
        self.slot = spec.slot_name
        self.producer = producer
        self.max_in_flight = max_in_flight
        self.status_interval = status_interval
        self.on_ack = on_ack
        self.on_event = on_event
        self.stats = CdcStats()
        self._mapper: RowMapper | None = None

    def _say(self, message: str) -> None:
        log.info("%s", message)
        if self.on_event is not None:
            self.on_event(message)

    def _refuse(self, key: str | None, reason: str) -> None:
        self.stats.refused += 1
        log.error("refused row %s of %s: %s", key, self.spec.table, reason)
        if self.on_event is not None:
            self.on_event(f"refused row {key!r}: {reason}")

    # ------------------------------------------------------------------ setup

    async def _connect(self) -> Conn:
        try:
            return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            raise SourceSetupError(f"cannot connect to PostgreSQL: {exc}") from exc

    async def _resolve_table(self, conn: Conn) -> Table:
        row = await (
            await conn.execute(
                "SELECT c.oid::int8, n.nspname, c.relname, c.relreplident"
                " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE c.oid = to_regclass(%s)",
                (self.spec.table,),
            )
        ).fetchone()
        if row is None:
            raise SourceSetupError(f"table {self.spec.table!r} does not exist")
        oid, schema, name, identity = row
        table = Table(int(oid), str(schema), str(name))
        cols = await (
            await conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0"
                " AND NOT attisdropped",
                (table.oid,),
            )
        ).fetchall()
        names = {str(c[0]) for c in cols}
        mapper = RowMapper(self.spec, table, self._refuse)
        wanted = [self.spec.key_column, *(c for c in mapper.value_columns if c)]
        missing = [c for c in wanted if c not in names]
        if missing:
            raise SourceSetupError(f"table {table.qualified} has no column {', '.join(missing)}")
        if identity != "f":
            flag = "indisprimary" if identity == "d" else "indisreplident"
            keys = await (
                await conn.execute(
                    sql.SQL(
                        "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
                        " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
                        " WHERE i.indrelid = %s AND i.{}"
                    ).format(sql.Identifier(flag)),
                    (table.oid,),
                )
            ).fetchall()
            if self.spec.key_column not in {str(k[0]) for k in keys}:
                raise SourceSetupError(
                    f"column {self.spec.key_column!r} is not in the replica identity of "
                    f"{table.qualified}, so deleted rows could not be named: make it the "
                    f"primary key or run ALTER TABLE {table.qualified} REPLICA IDENTITY FULL"
                )
        self._mapper = mapper
        return table

    async def _marker(self, conn: Conn) -> str | None:
        """The publication's comment, or ``None`` when there is no such publication."""
        row = await (
            await conn.execute(
                "SELECT coalesce(obj_description(oid, 'pg_publication'), '')"
                " FROM pg_publication WHERE pubname = %s",
                (self.slot,),
            )
        ).fetchone()
        return None if row is None else str(row[0])

    async def _comment(self, conn: Conn, text: str) -> None:
        await conn.execute(
            sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(
                sql.Identifier(self.slot), sql.Literal(f"{MARKER_PREFIX}: {text}")
            )
        )

    async def _slot_exists(self, conn: Conn) -> bool:
        row = await (
            await conn.execute(
                "SELECT plugin, database = current_database() FROM pg_replication_slots"
                " WHERE slot_name = %s",
                (self.slot,),
            )
        ).fetchone()
        if row is None:
            return False
        if row[0] != "pgoutput" or not row[1]:
            raise SourceSetupError(
                f"replication slot {self.slot!r} exists but is not a pgoutput slot of this "
                "database; choose another --slot"
            )
        return True

    async def setup(self) -> bool:
        """Publication and slot in place, initial load done; returns whether it loaded now."""
        conn = await self._connect()
        try:
            level = await (await conn.execute("SHOW wal_level")).fetchone()
            if level is None or level[0] != "logical":
                raise SourceSetupError("PostgreSQL needs wal_level = logical for this connector")
            table = await self._resolve_table(conn)
            marker = await self._marker(conn)
            if marker is None:
                try:
                    await conn.execute(
                        sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                            sql.Identifier(self.slot), table.ident
                        )
                    )
                except psycopg.errors.InsufficientPrivilege as exc:
                    raise SourceSetupError(
                        f"cannot publish {table.qualified}: {str(exc).splitlines()[0]}; the "
                        "connector's role needs CREATE on the database and to own the table "
                        "(ALTER TABLE … OWNER TO it, or GRANT the owner's role to it)"
                    ) from None
                await self._comment(conn, "snapshot pending")
                marker = ""
            complete = marker.startswith(f"{MARKER_PREFIX}: snapshot complete slot={self.slot} ")
            if await self._slot_exists(conn):
                if complete:
                    self._say(f"resuming from replication slot {self.slot}")
                    return False
                self._say(f"slot {self.slot} has no completed snapshot; starting again")
                await conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            await self._create_slot_and_load(conn, table)
            return True
        finally:
            await conn.close()

    async def _create_slot_and_load(self, conn: Conn, table: Table) -> None:
        """Create the slot exporting its snapshot, and publish every row seen in it."""
        assert self._mapper is not None
        repl = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, replication="database"
        )
        reader = await psycopg.AsyncConnection.connect(self.dsn)
        load, outbox = _Txn(), _Outbox()
        try:
            created = await (
                await repl.execute(
                    sql.SQL(
                        "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput (SNAPSHOT 'export')"
                    ).format(sql.Identifier(self.slot))
                )
            ).fetchone()
            assert created is not None
            consistent = pgoutput.lsn_to_int(str(created[1]))
            await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            await reader.execute(
                sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(str(created[2])))
            )
            await repl.close()  # the snapshot now lives in the reader's transaction
            self._say(
                f"created slot {self.slot} at {pgoutput.int_to_lsn(consistent)}; "
                f"loading existing rows of {table.qualified}"
            )
            version = source_version(consistent, 0)
            now = datetime.now(UTC)
            async with reader.cursor(name="tidegraph_cdc_snapshot") as cursor:
                cursor.itersize = 2000
                await cursor.execute(self._mapper.select_all())
                async for row in cursor:
                    self.stats.snapshot_rows += 1
                    # Referenced rows are read in the same snapshot.
                    doc = await self._mapper.from_row(reader, row, version, now)
                    if doc is not None:
                        outbox.add(doc, load, None)
                    if len(outbox.docs) >= 2000:
                        await self._send(outbox)
                        if load.remaining > 8:  # bound what is in flight
                            await asyncio.wait([load.futures[-8]])
            await reader.rollback()
            await self._send(outbox)
            if load.futures:
                await asyncio.wait(load.futures)
            if load.error is not None:
                raise load.error
        finally:
            await repl.close()
            await reader.close()
        await self._comment(
            conn,
            f"snapshot complete slot={self.slot} lsn={pgoutput.int_to_lsn(consistent)} "
            f"rows={self.stats.snapshot_rows}",
        )
        self.stats.confirmed_lsn = consistent
        self._say(f"initial load done: {self.stats.snapshot_rows} rows")

    # ------------------------------------------------------------- streaming

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Set up if needed, then stream changes until ``stop`` is set.

        A lost replication connection or a record Kafka did not acknowledge restarts the
        stream from the slot's confirmed position after a pause.
        """
        stop = stop or asyncio.Event()
        guard = await self._connect()
        try:
            locked = await (
                await guard.execute(
                    "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                    (f"tidegraph.cdc:{self.slot}",),
                )
            ).fetchone()
            if not locked or not locked[0]:
                raise SourceSetupError(f"another connector is already running on {self.slot}")
            await self.setup()
            while not stop.is_set():
                try:
                    await self._stream(guard, stop)
                except (ReplicationLost, DeliveryError) as exc:
                    log.warning("stream interrupted, resuming from the slot: %s", exc)
                    self._say(f"stream interrupted ({exc}); resuming")
                    await _sleep_or_stop(stop, 1.0)
        finally:
            self.stats.streaming = False
            await guard.close()

    async def _stream(self, lookups: Conn, stop: asyncio.Event) -> None:
        """One replication session: read, publish, confirm what Kafka acknowledged.

        Reading never waits for Kafka: decoded documents collect in an outbox that one
        sender task hands to the producer as whole batches, so the longer Kafka takes,
        the bigger the next batch. The stream is confirmed transaction by transaction, in
        commit order, as their batches are acknowledged.
        """
        mapper = self._mapper
        assert mapper is not None
        stream = await ReplicationStream.start(self.dsn, self.slot, self.slot)
        self.stats.streaming = True
        self._say(f"streaming changes of {self.spec.table} from slot {self.slot}")
        relations: dict[int, pgoutput.Relation] = {}
        committed: deque[_Txn] = deque()
        outbox = _Outbox()
        sender: asyncio.Task[None] | None = None
        txn: _Txn | None = None
        begin: pgoutput.Begin | None = None
        position = 0
        try:
            while not stop.is_set():
                frame = stream.next_nowait()
                if frame is None:
                    if sender is not None and sender.done():
                        sender.result()  # a failed send ends this session
                        sender = None
                    if outbox.docs and sender is None:
                        sender = asyncio.create_task(self._send(outbox))
                    while committed and committed[0].done():
                        stream.confirm(committed[0].end_lsn)
                        self._settle_one(committed)
                    await stream.report(every=self.status_interval)
                    self.stats.confirmed_lsn = stream.confirmed
                    frame = await stream.next(within=self.status_interval)
                    if frame is None:
                        continue
                if isinstance(frame, Keepalive):
                    if txn is None and not committed and not outbox.docs:
                        stream.confirm(frame.wal_end)  # everything sent so far is handled
                    await stream.report(force=frame.reply_requested, every=self.status_interval)
                    continue
                message = pgoutput.decode(frame.payload)
                if isinstance(message, pgoutput.Begin):
                    txn, begin, position = _Txn(), message, 0
                elif isinstance(message, pgoutput.Commit):
                    assert txn is not None
                    txn.end_lsn = message.end_lsn
                    committed.append(txn)
                    txn = begin = None
                elif isinstance(message, pgoutput.Relation):
                    relations[message.relid] = message
                elif isinstance(message, pgoutput.Insert | pgoutput.Update | pgoutput.Delete):
                    assert txn is not None and begin is not None
                    relation = relations[message.relid]
                    if relation.relid != mapper.table.oid:
                        continue
                    self.stats.changes += 1
                    for doc in await mapper.documents(lookups, message, relation, begin, position):
                        outbox.add(doc, txn, begin.commit_time)
                    position += 2  # room for a key change: a delete and an upsert
                    if len(outbox.docs) >= self.max_in_flight and sender is not None:
                        await asyncio.wait([sender])  # Kafka is slower than the source
                elif isinstance(message, pgoutput.Truncate):
                    log.warning("TRUNCATE of %s is not propagated as deletes", self.spec.table)
            if sender is not None:
                await sender
            await self._send(outbox)
            await self._drain(stream, committed)
        finally:
            if sender is not None and not sender.done():
                sender.cancel()
            self.stats.streaming = False
            await stream.close()

    async def _send(self, outbox: _Outbox) -> None:
        """Hand the outbox to the producer until it is empty (new documents included)."""
        while outbox.docs:
            chunk = outbox.take()
            try:
                submitted = await self.producer.submit_many(chunk.docs)
            except DeliveryError as exc:
                for txn, count in chunk.txns:
                    txn.failed(count, exc)
                raise
            for doc, too_large in submitted.refused:
                self._refuse(doc.doc_key, str(too_large))
            for txn, count in chunk.txns:
                txn.sent(count, submitted.acked)
            refused = {id(doc) for doc, _ in submitted.refused}
            times = [
                t for d, t in zip(chunk.docs, chunk.times, strict=True) if id(d) not in refused
            ]
            submitted.acked.add_done_callback(
                functools.partial(self._acked, docs=submitted.accepted, times=times)
            )

    def _acked(
        self,
        future: asyncio.Future[list[Delivery]],
        docs: list[DocumentVersion],
        times: list[datetime | None],
    ) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        deliveries = future.result()
        self.stats.published += len(deliveries)
        if self.on_ack is not None:
            for doc, delivery, when in zip(docs, deliveries, times, strict=True):
                self.on_ack(doc, delivery, when)

    @staticmethod
    def _settle_one(committed: deque[_Txn]) -> int:
        """Pop the oldest transaction once acknowledged; raise if Kafka refused a record."""
        head = committed[0]
        if head.error is not None:
            error = head.error
            raise error if isinstance(error, DeliveryError) else DeliveryError(str(error))
        committed.popleft()
        return head.docs

    async def _drain(self, stream: ReplicationStream, committed: deque[_Txn]) -> None:
        """On stop: wait (bounded) for what is in flight and confirm it."""
        try:
            async with asyncio.timeout(30):
                while committed:
                    if committed[0].futures:
                        await asyncio.wait(committed[0].futures)
                    end = committed[0].end_lsn
                    self._settle_one(committed)
                    stream.confirm(end)
        except (TimeoutError, DeliveryError) as exc:
            log.warning("stopping with unacknowledged records (they will be resent): %s", exc)
        await stream.report(force=True)
        self.stats.confirmed_lsn = stream.confirmed

    # --------------------------------------------------------------- cleanup

    async def drop(self) -> list[str]:
        """Drop the slot and the publication this connector created; returns what it dropped."""
        dropped = []
        conn = await self._connect()
        try:
            if await self._slot_exists(conn):
                await conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
                dropped.append(f"replication slot {self.slot}")
            marker = await self._marker(conn)
            if marker is not None and marker.startswith(MARKER_PREFIX):
                await conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(self.slot)))
                dropped.append(f"publication {self.slot}")
        finally:
            await conn.close()
        return dropped


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
