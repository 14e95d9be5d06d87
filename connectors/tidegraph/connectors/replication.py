"""A logical replication stream over psycopg's libpq connection (``START_REPLICATION``).

psycopg has no replication API, but its ``pgconn`` exposes libpq's copy calls, which is all
the streaming protocol needs: the server pushes ``XLogData`` frames (one ``pgoutput``
message each) and keepalives as transactions commit; the client answers with standby status
updates whose *flush* position becomes the slot's confirmed position. The connector sends a
position only once Kafka acknowledged everything before it. Streaming (rather than peeking
at the slot) means WAL is decoded once, as it is written, whatever the backlog.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq, sql

from tidegraph.connectors.errors import ConnectorError
from tidegraph.connectors.pgoutput import PG_EPOCH
from tidegraph.schemas import TransientError

_PG_EPOCH_UNIX = PG_EPOCH.timestamp()


class ReplicationLost(ConnectorError, TransientError):
    """The replication connection failed; reconnecting resumes from the confirmed position."""


@dataclass(frozen=True)
class XLogData:
    """One decoded-change frame: the ``pgoutput`` message and where it sits in the WAL."""

    start: int
    end: int
    payload: bytes


@dataclass(frozen=True)
class Keepalive:
    """The server's position: everything before ``wal_end`` has been sent."""

    wal_end: int
    reply_requested: bool


Frame = XLogData | Keepalive


def _now_pg() -> int:
    return int((time.time() - _PG_EPOCH_UNIX) * 1_000_000)


class ReplicationStream:
    """Streams a logical slot's changes; :meth:`confirm` reports what is durably handled."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn
        self._pg = conn.pgconn
        self._readable = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._fd = self._pg.socket
        self._loop.add_reader(self._fd, self._readable.set)
        self.confirmed = 0
        self._reported = 0
        self._last_status = 0.0

    @classmethod
    async def start(
        cls, dsn: str, slot: str, publication: str, *, messages: bool = False
    ) -> ReplicationStream:
        """Open a replication connection and start streaming from the slot's position."""
        try:
            conn = await psycopg.AsyncConnection.connect(
                dsn, autocommit=True, replication="database"
            )
        except psycopg.OperationalError as exc:
            raise ReplicationLost(f"cannot open a replication connection: {exc}") from exc
        options = sql.SQL(", ").join(
            [
                sql.SQL("proto_version '1'"),
                sql.SQL("publication_names {}").format(sql.Literal(publication)),
                sql.SQL("messages {}").format(sql.Literal("true" if messages else "false")),
            ]
        )
        command = sql.SQL("START_REPLICATION SLOT {} LOGICAL 0/0 ({})").format(
            sql.Identifier(slot), options
        )
        stream = cls(conn)
        stream._pg.send_query(command.as_bytes(conn))
        await stream._await_copy_both()
        return stream

    async def _wait_readable(self, within: float | None) -> bool:
        self._readable.clear()
        try:
            await asyncio.wait_for(self._readable.wait(), within)
        except TimeoutError:
            return False
        try:
            self._pg.consume_input()
        except psycopg.Error as exc:
            raise ReplicationLost(f"replication connection lost: {exc}") from exc
        return True

    async def _wait_writable(self) -> None:
        writable: asyncio.Future[None] = self._loop.create_future()

        def ready() -> None:
            if not writable.done():
                writable.set_result(None)

        self._loop.add_writer(self._fd, ready)
        try:
            await writable
        finally:
            self._loop.remove_writer(self._fd)

    async def _await_copy_both(self) -> None:
        self._pg.flush()
        while True:
            self._pg.consume_input()
            if not self._pg.is_busy():
                break
            await self._wait_readable(None)
        result = self._pg.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            message = result.error_message.decode(errors="replace") if result else "no result"
            await self.close()
            raise ReplicationLost(f"START_REPLICATION failed: {message.strip()}")

    def next_nowait(self) -> Frame | None:
        """The next frame already received, or ``None`` when none is buffered."""
        size, data = self._pg.get_copy_data(1)
        if size > 0:
            return _parse(bytes(data))
        if size < 0:
            error = self._pg.error_message.decode(errors="replace").strip()
            raise ReplicationLost(f"replication stream ended: {error or 'by the server'}")
        return None

    async def next(self, within: float) -> Frame | None:
        """The next frame, or ``None`` when nothing arrived within ``within`` seconds."""
        while True:
            frame = self.next_nowait()
            if frame is not None:
                return frame
            if not await self._wait_readable(within):
                return None

    def confirm(self, lsn: int) -> None:
        """Record ``lsn`` as durably handled; :meth:`report` tells the server."""
        self.confirmed = max(self.confirmed, lsn)

    async def report(self, *, force: bool = False, every: float = 0.1) -> None:
        """Send a status update when the confirmed position moved (at most every ``every``
        seconds), or at once when ``force`` (the server asked for a reply)."""
        now = time.monotonic()
        moved = self.confirmed > self._reported
        if not force and (not moved or now - self._last_status < every):
            return
        self._last_status = now
        self._reported = position = self.confirmed
        message = b"r" + struct.pack("!qqqqB", position, position, position, _now_pg(), 0)
        try:
            self._pg.put_copy_data(message)
            while self._pg.flush() == 1:
                await self._wait_writable()
        except psycopg.Error as exc:
            raise ReplicationLost(f"replication connection lost: {exc}") from exc

    async def close(self) -> None:
        """Stop streaming (the slot keeps its confirmed position) and disconnect."""
        self._loop.remove_reader(self._fd)
        await self._conn.close()


def _parse(data: bytes) -> Frame:
    kind = data[:1]
    if kind == b"w":
        start, end, _ = struct.unpack_from("!qqq", data, 1)
        return XLogData(start, end, data[25:])
    if kind == b"k":
        end, _, reply = struct.unpack_from("!qqB", data, 1)
        return Keepalive(end, bool(reply))
    raise ReplicationLost(f"unexpected replication frame {kind!r}")
