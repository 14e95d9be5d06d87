"""Debezium change events, decoded: what a record means and where it sits in its source.

A Debezium topic carries, for each committed row change, a key (the row's primary key) and
an envelope ``{before, after, source, op, ts_ms, transaction}``, written by Kafka Connect's
``JsonConverter`` with an embedded schema (``{"schema": …, "payload": …}``) or without one.
:func:`decode` turns one record into one of:

* :class:`RowEvent` — ``op`` ``r`` (snapshot read), ``c`` (create), ``u`` (update), ``d``
  (delete); the row after the change as text, per column;
* :class:`TruncateEvent` — ``op`` ``t``: every row of the table went;
* :class:`PassedOver` — what carries no row: tombstones (the ``null`` value Kafka's log
  compaction needs after a delete; the delete event before it did the work), heartbeats,
  transaction boundaries, schema changes and logical decoding messages (``op`` ``m``).

Anything else raises :class:`EventError` with the reason (the source dead-letters it).

Values: with an embedded schema, Debezium's logical types become the text a person would
write — dates ``2019-03-01``, timestamps ISO 8601, decimals exact — so validity and order
columns read as they do in SQL. Without a schema a date is only a number of days, which
cannot be told from an integer: such columns are marked (:attr:`RowEvent.untyped`) and a
mapping that needs them as dates refuses them rather than guess.

Source position (``source_version``), per connector, fixed width so it orders as an integer:

* ``postgresql``: ``source.sequence`` is ``[last commit LSN, LSN of the change]``. The first
  is the end of the transaction committed before this one (so it grows with commit order,
  one value per transaction), the second grows inside a transaction; together, 20 digits
  each, they order every change of a row. A snapshot read carries ``[null, snapshot LSN]``.
* ``mysql`` / ``mariadb``: binlog file number, position of the event, row in the event
  (10, 20 and 10 digits): the binlog is written in commit order. Positions belong to one
  server: after a fail-over to another server, start from a new snapshot.

Other connectors (SQL Server, Oracle, MongoDB …) share the envelope but not the position;
their events are refused with that reason until their positions are read here.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson

__all__ = [
    "Cell",
    "EventError",
    "PassedOver",
    "RowEvent",
    "TruncateEvent",
    "decode",
    "source_version",
]

Cell = str | None
"""A column's value as text (``None`` for SQL NULL)."""

_EPOCH = date(1970, 1, 1)
_EPOCH_TIME = datetime(1970, 1, 1)  # noqa: DTZ001 - Debezium's Timestamp types are zone-less
_BINLOG_FILE = re.compile(r"\.(\d+)$")


class EventError(ValueError):
    """A record that cannot be taken as a change event; ``error_class`` says how bad.

    ``invalid``: not a Debezium event at all (not JSON, no envelope, no position).
    ``unmappable``: a valid event the mapping cannot turn into a document.
    """

    def __init__(self, reason: str, error_class: str = "invalid") -> None:
        super().__init__(reason)
        self.reason = reason
        self.error_class = error_class


@dataclass(frozen=True)
class RowEvent:
    """A row read in a snapshot, or created, updated or deleted."""

    table: str
    """``schema.table`` (PostgreSQL, SQL Server) or ``database.table`` (MySQL, MariaDB)."""
    op: str
    """``r``, ``c``, ``u`` or ``d``."""
    key: dict[str, Cell]
    """The primary key's columns, as text."""
    row: dict[str, Cell] | None
    """The row after the change (``None`` for a delete)."""
    version: str
    """``source_version``: the change's position in its source."""
    event_time: datetime
    """When the source committed it (``source.ts_ms``)."""
    untyped: frozenset[str]
    """Columns that arrived as bare numbers without a schema (a date or an integer?)."""


@dataclass(frozen=True)
class TruncateEvent:
    """Every row of ``table`` was removed."""

    table: str
    version: str
    event_time: datetime


@dataclass(frozen=True)
class PassedOver:
    """A record that carries no row change; ``kind`` says which."""

    kind: str


Event = RowEvent | TruncateEvent | PassedOver


def _json(raw: bytes, what: str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise EventError(
            f"the {what} is not JSON ({exc}); tidegraph reads Debezium's JsonConverter "
            "output (Avro and Protobuf are not read)"
        ) from None


def _unwrap(doc: Any) -> tuple[dict[str, Any] | None, Any]:
    """``(schema, payload)`` of a ``JsonConverter`` document; ``(None, doc)`` without one."""
    if isinstance(doc, dict) and doc.keys() == {"schema", "payload"}:
        schema = doc["schema"]
        return (schema if isinstance(schema, dict) else None), doc["payload"]
    return None, doc


def _fields(schema: dict[str, Any] | None, name: str | None = None) -> dict[str, dict[str, Any]]:
    """Field schemas of a struct schema (or of its field ``name``), by field name."""
    if schema is None:
        return {}
    if name is not None:
        found = next((f for f in schema.get("fields", []) if f.get("field") == name), None)
        if not isinstance(found, dict):
            return {}
        schema = found
    return {f["field"]: f for f in schema.get("fields", []) if isinstance(f, dict) and "field" in f}


def _decimal(raw: str, scale: int) -> str:
    unscaled = int.from_bytes(base64.b64decode(raw), "big", signed=True)
    return str(Decimal(unscaled).scaleb(-scale))


def _typed(value: Any, field: dict[str, Any]) -> str:
    """A non-null value as text, by its Connect logical type."""
    name = field.get("name") or ""
    if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return (_EPOCH + timedelta(days=int(value))).isoformat()
    if name in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return (_EPOCH_TIME + timedelta(milliseconds=int(value))).isoformat()
    if name == "io.debezium.time.MicroTimestamp":
        return (_EPOCH_TIME + timedelta(microseconds=int(value))).isoformat()
    if name == "io.debezium.time.NanoTimestamp":
        return (_EPOCH_TIME + timedelta(microseconds=int(value) // 1000)).isoformat()
    if name in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return _time(int(value) * 1000)
    if name == "io.debezium.time.MicroTime":
        return _time(int(value))
    if name == "io.debezium.time.NanoTime":
        return _time(int(value) // 1000)
    if name == "org.apache.kafka.connect.data.Decimal":
        return _decimal(str(value), int(field.get("parameters", {}).get("scale", 0)))
    if name == "io.debezium.data.VariableScaleDecimal" and isinstance(value, dict):
        return _decimal(str(value["value"]), int(value["scale"]))
    return _plain(value)


def _time(micros: int) -> str:
    return (_EPOCH_TIME + timedelta(microseconds=micros)).time().isoformat()


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _cells(values: Any, fields: dict[str, dict[str, Any]], typed: bool) -> dict[str, Cell]:
    if not isinstance(values, dict):
        raise EventError(f"expected a row (an object), found {type(values).__name__}")
    out: dict[str, Cell] = {}
    for column, value in values.items():
        if value is None:
            out[column] = None
        elif typed and column in fields:
            try:
                out[column] = _typed(value, fields[column])
            except (ValueError, TypeError, KeyError, OverflowError) as exc:
                raise EventError(f"column {column!r}: cannot read {value!r} ({exc})") from None
        else:
            out[column] = _plain(value)
    return out


def _untyped(values: Any, typed: bool) -> frozenset[str]:
    if typed or not isinstance(values, dict):
        return frozenset()
    return frozenset(
        c for c, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)
    )


def source_version(source: dict[str, Any]) -> str:
    """The change's position in its source, fixed width (see the module docstring)."""
    connector = source.get("connector")
    try:
        if connector == "postgresql":
            lsn = int(source["lsn"])
            sequence = orjson.loads(source["sequence"]) if source.get("sequence") else None
            commit = int(sequence[0]) if sequence and sequence[0] is not None else 0
            return f"{commit:020d}{lsn:020d}"
        if connector in ("mysql", "mariadb"):
            found = _BINLOG_FILE.search(str(source["file"]))
            if found is None:
                raise ValueError(f"binlog file name {source['file']!r} has no number")
            number, pos, row = int(found.group(1)), int(source["pos"]), int(source.get("row") or 0)
            return f"{number:010d}{pos:020d}{row:010d}"
    except (KeyError, TypeError, ValueError, IndexError, orjson.JSONDecodeError) as exc:
        raise EventError(f"no readable source position in {source!r} ({exc})") from None
    raise EventError(
        f"the source position of Debezium's {connector!r} connector is not read by tidegraph "
        "(PostgreSQL, MySQL and MariaDB are)",
        "unmappable",
    )


def _table(source: dict[str, Any]) -> str:
    space = source.get("schema") or source.get("db")
    table = source.get("table")
    if not space or not table:
        raise EventError(f"the event's source names no table: {source!r}")
    return f"{space}.{table}"


def _event_time(source: dict[str, Any], payload: dict[str, Any]) -> datetime:
    millis = source.get("ts_ms") or payload.get("ts_ms")
    if not isinstance(millis, int):
        raise EventError("the event has no commit time (source.ts_ms)")
    return datetime.fromtimestamp(millis / 1000, tz=UTC)


def _without_op(topic: str, payload: Any) -> PassedOver:
    if topic.startswith("__debezium-heartbeat") or (
        isinstance(payload, dict) and payload.keys() <= {"ts_ms"}
    ):
        return PassedOver("heartbeat")
    if isinstance(payload, dict) and {"status", "id"} <= payload.keys():
        return PassedOver("transaction")
    if isinstance(payload, dict) and ("ddl" in payload or "tableChanges" in payload):
        return PassedOver("schema change")
    raise EventError(
        "not a Debezium change event: no op in the value (a value flattened by "
        "ExtractNewRecordState cannot be read: tidegraph needs the whole envelope)"
    )


def decode(topic: str, key: bytes | None, value: bytes | None) -> Event:
    """What one record of a Debezium topic means; raises :class:`EventError`."""
    if value is None:
        return PassedOver("tombstone")
    schema, payload = _unwrap(_json(value, "value"))
    if not isinstance(payload, dict) or "op" not in payload:
        return _without_op(topic, payload)
    op = payload["op"]
    if op == "m":
        return PassedOver("message")
    source = payload.get("source")
    if not isinstance(source, dict):
        raise EventError("the event has no source block")
    if op == "t":
        return TruncateEvent(_table(source), source_version(source), _event_time(source, payload))
    if op not in ("r", "c", "u", "d"):
        raise EventError(f"unknown op {op!r}")
    if key is None:
        raise EventError(
            f"a change of {_table(source)} without a key: the table has no primary key, so "
            "its rows cannot be told apart",
            "unmappable",
        )
    key_schema, key_payload = _unwrap(_json(key, "key"))
    after = payload.get("after")
    if op != "d" and after is None:
        raise EventError(f"op {op!r} without the row after the change")
    return RowEvent(
        table=_table(source),
        op=op,
        key=_cells(key_payload, _fields(key_schema), key_schema is not None),
        row=None if op == "d" else _cells(after, _fields(schema, "after"), schema is not None),
        version=source_version(source),
        event_time=_event_time(source, payload),
        untyped=frozenset() if op == "d" else _untyped(after, schema is not None),
    )
