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

A crash during the initial load is caught by a marker: the publication's comment records
that the snapshot of this slot completed; a slot found without it is dropped and the load
redone.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
from psycopg import sql

from tidegraph.connectors import pgoutput
from tidegraph.connectors.errors import DeliveryError, DocumentTooLargeError, SourceSetupError
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
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.names import validate_realm

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
    """A transaction's records, counted down as Kafka acknowledges them."""

    __slots__ = ("end_lsn", "futures", "remaining", "error")

    def __init__(self) -> None:
        self.end_lsn = 0
        self.futures: list[asyncio.Future[Delivery]] = []
        self.remaining = 0
        self.error: BaseException | None = None

    def add(self, future: asyncio.Future[Delivery]) -> None:
        self.futures.append(future)
        self.remaining += 1
        future.add_done_callback(self._one_done)

    def _one_done(self, future: asyncio.Future[Delivery]) -> None:
        self.remaining -= 1
        if self.error is None:
            if future.cancelled():
                self.error = DeliveryError("send cancelled")
            else:
                self.error = future.exception()

    def done(self) -> bool:
        return self.remaining == 0

    def failure(self) -> BaseException | None:
        return self.error


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
        wanted = [self.spec.key_column, *(c for c in self.spec.value_columns if c)]
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
        self._mapper = RowMapper(self.spec, table, self._refuse)
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
                await conn.execute(
                    sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                        sql.Identifier(self.slot), table.ident
                    )
                )
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
        pending: deque[tuple[DocumentVersion, asyncio.Future[Delivery]]] = deque()
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
                async for key, content, title, order in cursor:
                    self.stats.snapshot_rows += 1
                    doc = self._mapper.upsert(key, (content, title, order), version, now)
                    if doc is not None:
                        future = await self._submit(doc, None)
                        if future is not None:
                            pending.append((doc, future))
                    while len(pending) > self.max_in_flight:
                        await pending.popleft()[1]
            await reader.rollback()
            while pending:
                await pending.popleft()[1]
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

    async def _submit(
        self, doc: DocumentVersion, commit_time: datetime | None
    ) -> asyncio.Future[Delivery] | None:
        """Buffer ``doc``; count and report it when acknowledged. ``None`` if refused."""
        try:
            future = await self.producer.submit(doc)
        except DocumentTooLargeError as exc:
            self._refuse(doc.doc_key, str(exc))
            return None

        def acked(f: asyncio.Future[Delivery]) -> None:
            if f.cancelled() or f.exception() is not None:
                return
            self.stats.published += 1
            if self.on_ack is not None:
                self.on_ack(doc, f.result(), commit_time)

        future.add_done_callback(acked)
        return future

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
        """One replication session: read, publish, confirm what Kafka acknowledged."""
        mapper = self._mapper
        assert mapper is not None
        stream = await ReplicationStream.start(self.dsn, self.slot, self.slot)
        self.stats.streaming = True
        self._say(f"streaming changes of {self.spec.table} from slot {self.slot}")
        relations: dict[int, pgoutput.Relation] = {}
        committed: deque[_Txn] = deque()
        in_flight = 0
        txn: _Txn | None = None
        begin: pgoutput.Begin | None = None
        position = 0
        try:
            while not stop.is_set():
                frame = await stream.next(within=self.status_interval)
                reply = False
                idle_at = 0
                if isinstance(frame, Keepalive):
                    reply = frame.reply_requested
                    if txn is None and not committed:
                        idle_at = frame.wal_end  # everything sent is handled
                elif frame is not None:
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
                        for doc in await mapper.documents(
                            lookups, message, relation, begin, position
                        ):
                            future = await self._submit(doc, begin.commit_time)
                            if future is not None:
                                txn.add(future)
                                in_flight += 1
                        position += 2  # room for a key change: a delete and an upsert
                    elif isinstance(message, pgoutput.Truncate):
                        log.warning("TRUNCATE of %s is not propagated as deletes", self.spec.table)
                while in_flight > self.max_in_flight and committed:
                    await _all_done(committed[0].futures)
                    stream.confirm(committed[0].end_lsn)
                    in_flight -= self._settle_one(committed)
                while committed and committed[0].done():
                    stream.confirm(committed[0].end_lsn)
                    in_flight -= self._settle_one(committed)
                if idle_at:
                    stream.confirm(idle_at)
                await stream.report(force=reply, every=self.status_interval)
                self.stats.confirmed_lsn = stream.confirmed
            await self._drain(stream, committed)
        finally:
            self.stats.streaming = False
            await stream.close()

    @staticmethod
    def _settle_one(committed: deque[_Txn]) -> int:
        """Pop the oldest transaction once acknowledged; raise if Kafka refused a record."""
        head = committed[0]
        failure = head.failure()
        if failure is not None:
            raise failure if isinstance(failure, DeliveryError) else DeliveryError(str(failure))
        committed.popleft()
        return len(head.futures)

    async def _drain(self, stream: ReplicationStream, committed: deque[_Txn]) -> None:
        """On stop: wait (bounded) for what is in flight and confirm it."""
        try:
            async with asyncio.timeout(30):
                while committed:
                    await _all_done(committed[0].futures)
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


async def _all_done(futures: list[asyncio.Future[Delivery]]) -> None:
    if futures:
        await asyncio.wait(futures)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
