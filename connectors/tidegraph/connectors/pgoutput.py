"""Decoding PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1).

Pure functions over bytes: one message in, one value out. The PostgreSQL connector reads the
messages with ``pg_logical_slot_peek_binary_changes`` (psycopg has no replication protocol)
and hands each row's bytes to :func:`decode`. Message layouts are those of the PostgreSQL
documentation, "Logical Replication Message Formats".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class UnchangedToast:
    """Marker for a TOASTed value an UPDATE did not change, so pgoutput did not send it."""

    _instance: UnchangedToast | None = None

    def __new__(cls) -> UnchangedToast:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = UnchangedToast()
Value = str | None | UnchangedToast
"""A column value in text form, ``None`` for NULL, or :data:`UNCHANGED_TOAST`."""


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    is_key: bool


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    """LSN of the transaction's commit record: orders transactions by commit."""
    commit_time: datetime
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    """End of the commit record: confirming this position means the transaction is done."""
    commit_time: datetime


@dataclass(frozen=True)
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[Column, ...]


@dataclass(frozen=True)
class Insert:
    relid: int
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Update:
    relid: int
    old: tuple[Value, ...] | None
    """The old key ('K') or whole old row ('O') when the key changed or identity is FULL."""
    new: tuple[Value, ...]


@dataclass(frozen=True)
class Delete:
    relid: int
    old: tuple[Value, ...]
    """Key columns ('K', others NULL) or the whole row with REPLICA IDENTITY FULL ('O')."""


@dataclass(frozen=True)
class Truncate:
    relids: tuple[int, ...]


@dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


@dataclass(frozen=True)
class Other:
    """A message the connector has no use for (origin, type)."""

    kind: str


Message = Begin | Commit | Relation | Insert | Update | Delete | Truncate | LogicalMessage | Other


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> str:
        value = chr(self.data[self.pos])
        self.pos += 1
        return value

    def int8(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def int16(self) -> int:
        (value,) = struct.unpack_from("!h", self.data, self.pos)
        self.pos += 2
        return int(value)

    def int32(self) -> int:
        (value,) = struct.unpack_from("!i", self.data, self.pos)
        self.pos += 4
        return int(value)

    def uint32(self) -> int:
        (value,) = struct.unpack_from("!I", self.data, self.pos)
        self.pos += 4
        return int(value)

    def int64(self) -> int:
        (value,) = struct.unpack_from("!q", self.data, self.pos)
        self.pos += 8
        return int(value)

    def string(self) -> str:
        end = self.data.index(b"\x00", self.pos)
        value = self.data[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return value

    def raw(self, length: int) -> bytes:
        value = self.data[self.pos : self.pos + length]
        self.pos += length
        return value

    def timestamp(self) -> datetime:
        return PG_EPOCH + timedelta(microseconds=self.int64())

    def tuple(self) -> tuple[Value, ...]:
        values: list[Value] = []
        for _ in range(self.int16()):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED_TOAST)
            elif kind in ("t", "b"):
                values.append(self.raw(self.int32()).decode("utf-8"))
            else:
                raise ValueError(f"unknown tuple column kind {kind!r}")
        return tuple(values)


def decode(data: bytes) -> Message:
    """One pgoutput message (protocol version 1, no streaming) as a value."""
    r = _Reader(bytes(data))
    kind = r.byte()
    if kind == "B":
        return Begin(final_lsn=r.int64(), commit_time=r.timestamp(), xid=r.uint32())
    if kind == "C":
        r.int8()  # flags, unused
        return Commit(commit_lsn=r.int64(), end_lsn=r.int64(), commit_time=r.timestamp())
    if kind == "R":
        relid = r.uint32()
        namespace = r.string()
        name = r.string()
        identity = r.byte()
        columns = []
        for _ in range(r.int16()):
            flags = r.int8()
            col_name = r.string()
            type_oid = r.uint32()
            r.int32()  # type modifier
            columns.append(Column(col_name, type_oid, bool(flags & 1)))
        return Relation(relid, namespace or "pg_catalog", name, identity, tuple(columns))
    if kind == "I":
        relid = r.uint32()
        if r.byte() != "N":
            raise ValueError("insert without a new tuple")
        return Insert(relid, r.tuple())
    if kind == "U":
        relid = r.uint32()
        marker = r.byte()
        old = None
        if marker in ("K", "O"):
            old = r.tuple()
            marker = r.byte()
        if marker != "N":
            raise ValueError("update without a new tuple")
        return Update(relid, old, r.tuple())
    if kind == "D":
        relid = r.uint32()
        if r.byte() not in ("K", "O"):
            raise ValueError("delete without an old key or row")
        return Delete(relid, r.tuple())
    if kind == "T":
        count = r.int32()
        r.int8()  # options (CASCADE, RESTART IDENTITY)
        return Truncate(tuple(r.uint32() for _ in range(count)))
    if kind == "M":
        transactional = bool(r.int8() & 1)
        lsn = r.int64()
        prefix = r.string()
        content = r.raw(r.int32())
        return LogicalMessage(transactional, lsn, prefix, content)
    return Other(kind)


def lsn_to_int(text: str) -> int:
    """``'16/B374D848'`` → its 64-bit position."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def int_to_lsn(value: int) -> str:
    """A 64-bit position in PostgreSQL's ``X/Y`` form."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
