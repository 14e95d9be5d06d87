"""The PostgreSQL connector: a table's rows as documents, through logical decoding.

Setup creates a publication on the table and a replication slot using ``pgoutput``. The slot
is created on a replication connection that exports its snapshot; the existing rows are read
under exactly that snapshot, so the initial load and the change stream meet without a gap
or an overlap. Rows are then streamed as document versions:

1. peek at the slot (``pg_logical_slot_peek_binary_changes``): whole transactions, in
   commit order, not consumed;
2. decode the ``pgoutput`` messages and submit one document version per row change;
3. wait until Kafka acknowledged every one of them;
4. only then advance the slot (``pg_replication_slot_advance``) past those transactions.

A crash at any point therefore loses nothing: what was not acknowledged is still in the slot
and is peeked again (duplicates are harmless, the indexer is idempotent). ``source_version``
is the commit LSN (20 digits) followed by the change's position in its transaction (10
digits), so versions order as integers and as strings; snapshot rows carry the slot's
consistent point with position 0, below every streamed change.

A crash during the initial load is caught by a marker: the publication's comment records
that the snapshot of this slot completed; a slot found without it is dropped and the load
redone. When the table is idle a transactional logical message (a heartbeat) lets the slot
advance past other tables' WAL, so decoding never re-reads an ever-growing backlog.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql

from tidegraph.connectors import pgoutput
from tidegraph.connectors.errors import DeliveryError, DocumentTooLargeError, SourceSetupError
from tidegraph.connectors.producer import Delivery, DocumentProducer
from tidegraph.schemas._validation import RecordValidationError
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.names import DEFAULT_SPACE, validate_realm

log = logging.getLogger(__name__)

SOURCE = "postgres"
HEARTBEAT_PREFIX = "tidegraph.cdc.heartbeat"
MARKER_PREFIX = "tidegraph cdc"
_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
Pending = deque[tuple[DocumentVersion, "asyncio.Future[Delivery]", datetime | None]]
"""Documents submitted and not yet acknowledged, with their source commit time."""
AckCallback = Callable[[DocumentVersion, Delivery, datetime | None], None]
"""Called per acknowledged document with the source commit time (``None`` for snapshots)."""


def source_version(lsn: int, position: int) -> str:
    """Commit LSN and position in the transaction, fixed width: orders as int and as str."""
    return f"{lsn:020d}{position:010d}"


def default_slot_name(realm: str, table: str) -> str:
    """``tidegraph_<realm>_<table>``, folded to what slot names allow (a-z, 0-9, _)."""
    base = re.sub(r"[^a-z0-9_]", "_", f"tidegraph_{realm}_{table}".lower())
    return base[:63]


@dataclass(frozen=True)
class CaptureSpec:
    """Which table to capture and how its columns map onto a document."""

    table: str
    """Table name as SQL would resolve it (``orders`` or ``sales.orders``)."""
    key_column: str
    """Its value is the ``doc_key``; must be part of the replica identity."""
    content_column: str
    realm: str
    title_column: str | None = None
    order_column: str | None = None
    """Its text value becomes ``order_key``."""
    space: str = DEFAULT_SPACE
    slot: str | None = None
    """Replication slot (and publication) name; derived from realm and table when absent."""

    @property
    def slot_name(self) -> str:
        name = self.slot or default_slot_name(self.realm, self.table)
        if not _SLOT_NAME.fullmatch(name):
            raise SourceSetupError(f"slot name {name!r} must match {_SLOT_NAME.pattern}")
        return name


@dataclass(frozen=True)
class _Table:
    oid: int
    schema: str
    name: str

    @property
    def ident(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.name)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass
class CdcStats:
    """Counters, for progress and the benchmark."""

    snapshot_rows: int = 0
    changes: int = 0
    published: int = 0
    refused: int = 0
    confirmed_lsn: int = 0


class PostgresCdc:
    """Captures one table of one database into one realm."""

    def __init__(
        self,
        dsn: str,
        spec: CaptureSpec,
        producer: DocumentProducer,
        *,
        batch_changes: int = 5000,
        poll_interval: float = 0.05,
        heartbeat_interval: float = 1.0,
        on_ack: AckCallback | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        validate_realm(spec.realm)
        self.dsn = dsn
        self.spec = spec
        self.slot = spec.slot_name
        self.producer = producer
        self.batch_changes = batch_changes
        self.poll_interval = poll_interval
        self.heartbeat_interval = heartbeat_interval
        self.on_ack = on_ack
        self.on_event = on_event
        self.stats = CdcStats()
        self._table: _Table | None = None
        self._columns: dict[str, int] = {}

    def _say(self, message: str) -> None:
        log.info("%s", message)
        if self.on_event is not None:
            self.on_event(message)

    # ------------------------------------------------------------------ setup

    async def _connect(self) -> Conn:
        try:
            return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            raise SourceSetupError(f"cannot connect to PostgreSQL: {exc}") from exc

    async def _resolve_table(self, conn: Conn) -> _Table:
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
        table = _Table(int(str(oid)), str(schema), str(name))
        cols = await (
            await conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0"
                " AND NOT attisdropped",
                (table.oid,),
            )
        ).fetchall()
        names = {str(c[0]) for c in cols}
        wanted = [self.spec.key_column, self.spec.content_column]
        wanted += [c for c in (self.spec.title_column, self.spec.order_column) if c]
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
            table = self._table = await self._resolve_table(conn)
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

    async def _comment(self, conn: Conn, text: str) -> None:
        await conn.execute(
            sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(
                sql.Identifier(self.slot), sql.Literal(f"{MARKER_PREFIX}: {text}")
            )
        )

    def _select(self, table: _Table) -> sql.Composed:
        def text(column: str | None) -> sql.Composable:
            if column is None:
                return sql.SQL("NULL::text")
            return sql.SQL("{}::text").format(sql.Identifier(column))

        return sql.SQL("SELECT {}, {}, {}, {} FROM {}").format(
            text(self.spec.key_column),
            text(self.spec.content_column),
            text(self.spec.title_column),
            text(self.spec.order_column),
            table.ident,
        )

    async def _create_slot_and_load(self, conn: Conn, table: _Table) -> None:
        """Create the slot exporting its snapshot, and publish every row seen in it."""
        repl = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, replication="database"
        )
        reader = await psycopg.AsyncConnection.connect(self.dsn)
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
            snapshot_name = str(created[2])
            await reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            await reader.execute(
                sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name))
            )
            await repl.close()  # the snapshot now lives in the reader's transaction
            self._say(
                f"created slot {self.slot} at {pgoutput.int_to_lsn(consistent)}; "
                f"loading existing rows of {table.qualified}"
            )
            version = source_version(consistent, 0)
            now = datetime.now(UTC)
            pending: Pending = deque()
            async with reader.cursor(name="tidegraph_cdc_snapshot") as cursor:
                cursor.itersize = 2000
                await cursor.execute(self._select(table))
                async for key, content, title, order in cursor:
                    self.stats.snapshot_rows += 1
                    doc = self._upsert(key, content, title, order, version, now)
                    if doc is not None:
                        await self._submit(doc, None, pending)
                    while len(pending) > 10_000:
                        await self._settle(pending.popleft())
            await reader.rollback()
            while pending:
                await self._settle(pending.popleft())
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

    # ------------------------------------------------------------- documents

    def _upsert(
        self,
        key: object,
        content: object,
        title: object,
        order: object,
        version: str,
        event_time: datetime,
    ) -> DocumentVersion | None:
        if key is None:
            self._refuse(None, "row with a NULL key column")
            return None
        fields: dict[str, object] = {
            "space": self.spec.space,
            "source": SOURCE,
            "source_version": version,
            "metadata": {"table": self._table.qualified if self._table else self.spec.table},
        }
        if title is not None:
            fields["title"] = str(title)
        if order is not None:
            fields["order_key"] = str(order)
        try:
            return DocumentVersion.for_upsert(
                self.spec.realm,
                str(key),
                "" if content is None else str(content),
                event_time=event_time,
                **fields,
            )
        except RecordValidationError as exc:
            self._refuse(str(key), str(exc))
            return None

    def _delete(self, key: object, version: str, event_time: datetime) -> DocumentVersion | None:
        if key is None:
            self._refuse(None, "deleted row without its key column")
            return None
        try:
            return DocumentVersion.for_delete(
                self.spec.realm,
                str(key),
                space=self.spec.space,
                source=SOURCE,
                source_version=version,
                event_time=event_time,
            )
        except RecordValidationError as exc:
            self._refuse(str(key), str(exc))
            return None

    def _refuse(self, key: str | None, reason: str) -> None:
        self.stats.refused += 1
        log.error("refused row %s of %s: %s", key, self.spec.table, reason)
        if self.on_event is not None:
            self.on_event(f"refused row {key!r}: {reason}")

    async def _submit(
        self, doc: DocumentVersion, commit_time: datetime | None, pending: Pending
    ) -> None:
        try:
            pending.append((doc, await self.producer.submit(doc), commit_time))
        except DocumentTooLargeError as exc:
            self._refuse(doc.doc_key, str(exc))

    async def _settle(
        self, item: tuple[DocumentVersion, asyncio.Future[Delivery], datetime | None]
    ) -> None:
        doc, future, commit_time = item
        delivery = await future
        self.stats.published += 1
        if self.on_ack is not None:
            self.on_ack(doc, delivery, commit_time)

    # ------------------------------------------------------------- streaming

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Set up if needed, then stream changes until ``stop`` is set."""
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
            conn = await self._connect()
            try:
                if self._table is None:
                    self._table = await self._resolve_table(conn)
                await self._stream(conn, stop)
            finally:
                await conn.close()
        finally:
            await guard.close()

    async def _stream(self, conn: Conn, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        last_progress = loop.time()
        relations: dict[int, pgoutput.Relation] = {}
        self._say(f"streaming changes of {self.spec.table} from slot {self.slot}")
        while not stop.is_set():
            try:
                rows = await (
                    await conn.execute(
                        "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes("
                        "%s, NULL, %s, 'proto_version', '1', 'publication_names', %s,"
                        " 'messages', 'true')",
                        (self.slot, self.batch_changes, self.slot),
                    )
                ).fetchall()
                if rows:
                    await self._apply(conn, rows, relations)
                    last_progress = loop.time()
                    continue
            except DeliveryError as exc:
                log.warning("Kafka did not acknowledge, retrying from the slot: %s", exc)
                await _sleep_or_stop(stop, 1.0)
                continue
            if loop.time() - last_progress >= self.heartbeat_interval:
                await conn.execute(
                    "SELECT pg_logical_emit_message(true, %s, %s)", (HEARTBEAT_PREFIX, self.slot)
                )
                last_progress = loop.time()
            await _sleep_or_stop(stop, self.poll_interval)

    async def _apply(
        self,
        conn: Conn,
        rows: list[tuple[object, ...]],
        relations: dict[int, pgoutput.Relation],
    ) -> None:
        """Publish a peeked batch, wait for every ack, then advance the slot past it."""
        pending: Pending = deque()
        begin: pgoutput.Begin | None = None
        position = 0
        advance_to = 0
        for _, data in rows:
            message = pgoutput.decode(data)  # type: ignore[arg-type]
            if isinstance(message, pgoutput.Begin):
                begin, position = message, 0
            elif isinstance(message, pgoutput.Commit):
                advance_to = max(advance_to, message.end_lsn)
                begin = None
            elif isinstance(message, pgoutput.Relation):
                relations[message.relid] = message
            elif isinstance(message, pgoutput.Insert | pgoutput.Update | pgoutput.Delete):
                assert begin is not None, "row change outside a transaction"
                self.stats.changes += 1
                for doc in await self._documents(conn, message, relations, begin, position):
                    await self._submit(doc, begin.commit_time, pending)
                position += 2  # room for a key change: a delete and an upsert
            elif isinstance(message, pgoutput.Truncate):
                log.warning("TRUNCATE of %s is not propagated as deletes", self.spec.table)
        while pending:
            await self._settle(pending.popleft())
        if advance_to > self.stats.confirmed_lsn:
            await conn.execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                (self.slot, pgoutput.int_to_lsn(advance_to)),
            )
            self.stats.confirmed_lsn = advance_to

    async def _documents(
        self,
        conn: Conn,
        message: pgoutput.Insert | pgoutput.Update | pgoutput.Delete,
        relations: dict[int, pgoutput.Relation],
        begin: pgoutput.Begin,
        position: int,
    ) -> list[DocumentVersion]:
        relation = relations.get(message.relid)
        if relation is None or self._table is None or message.relid != self._table.oid:
            return []
        index = {c.name: i for i, c in enumerate(relation.columns)}
        key_at = index[self.spec.key_column]
        version = source_version(begin.final_lsn, position + 1)
        when = begin.commit_time
        if isinstance(message, pgoutput.Delete):
            return [d for d in [self._delete(message.old[key_at], version, when)] if d]
        out: list[DocumentVersion] = []
        new = message.new
        if isinstance(message, pgoutput.Update) and message.old is not None:
            old_key = message.old[key_at]
            if old_key is not None and old_key != new[key_at]:
                gone = self._delete(old_key, version, when)
                if gone is not None:
                    out.append(gone)
                version = source_version(begin.final_lsn, position + 2)

        def value(column: str | None) -> object:
            return None if column is None else new[index[column]]

        row = [value(self.spec.content_column), value(self.spec.title_column)]
        row.append(value(self.spec.order_column))
        if any(v is pgoutput.UNCHANGED_TOAST for v in row):
            current = await self._current_row(conn, new[key_at])
            if current is None:
                return out  # deleted since; its delete follows in the stream
            row = [current[i] if v is pgoutput.UNCHANGED_TOAST else v for i, v in enumerate(row)]
        doc = self._upsert(new[key_at], row[0], row[1], row[2], version, when)
        if doc is not None:
            out.append(doc)
        return out

    async def _current_row(self, conn: Conn, key: object) -> tuple[object, ...] | None:
        """Content, title and order of a row now: for TOASTed values an UPDATE left out."""
        assert self._table is not None
        query = sql.SQL("SELECT {}, {}, {} FROM {} WHERE {} = %s").format(
            *(
                sql.SQL("{}::text").format(sql.Identifier(c)) if c else sql.SQL("NULL::text")
                for c in (self.spec.content_column, self.spec.title_column, self.spec.order_column)
            ),
            self._table.ident,
            sql.Identifier(self.spec.key_column),
        )
        return await (await conn.execute(query, (key,))).fetchone()

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
