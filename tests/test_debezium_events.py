"""Decoding Debezium events without any service: classification, values, positions."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.connectors.debezium_events import (
    EventError,
    PassedOver,
    RowEvent,
    TruncateEvent,
    decode,
    source_version,
)
from tidegraph.schemas.documents import compare_source_versions

PG = {"connector": "postgresql", "schema": "public", "table": "t", "ts_ms": 1_700_000_000_000}


def _value(op: str, after: object, source: dict[str, object], schema: object = None) -> bytes:
    payload = {"before": None, "after": after, "source": source, "op": op, "ts_ms": 1}
    return orjson.dumps({"schema": schema, "payload": payload} if schema else payload)


def _pg(commit: int | None, lsn: int) -> dict[str, object]:
    first = "null" if commit is None else f'"{commit}"'
    return {**PG, "lsn": lsn, "sequence": f'[{first},"{lsn}"]'}


@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), min_size=2, max_size=20))
def test_postgres_positions_order_as_the_pair_they_encode(pairs: list[tuple[int, int]]) -> None:
    """source_version orders exactly as (previous commit LSN, change LSN) tuples do, with a
    null commit (the first transaction after a snapshot) as 0."""
    versions = [source_version(_pg(c or None, lsn)) for c, lsn in pairs]
    for i, (pa, va) in enumerate(zip(pairs, versions, strict=True)):
        for pb, vb in zip(pairs[i + 1 :], versions[i + 1 :], strict=True):
            model = (pa > pb) - (pa < pb)
            assert compare_source_versions(va, vb) == model


@given(
    st.lists(st.tuples(st.integers(1, 999_999), st.integers(4, 2**40), st.integers(0, 999)),
             min_size=2, max_size=20)
)  # fmt: skip
def test_binlog_positions_order_as_file_position_row(rows: list[tuple[int, int, int]]) -> None:
    versions = [
        source_version({"connector": "mysql", "file": f"mysql-bin.{f:06d}", "pos": p, "row": r})
        for f, p, r in rows
    ]
    for i, (pa, va) in enumerate(zip(rows, versions, strict=True)):
        for pb, vb in zip(rows[i + 1 :], versions[i + 1 :], strict=True):
            assert compare_source_versions(va, vb) == (pa > pb) - (pa < pb)


def test_snapshot_read_sorts_below_the_first_streamed_change() -> None:
    snapshot = source_version(_pg(None, 25_986_312))
    first = source_version(_pg(None, 25_986_408))
    later = source_version(_pg(25_986_600, 25_986_600))
    assert compare_source_versions(snapshot, first) < 0 < compare_source_versions(later, first)


def test_row_events_with_a_schema_read_logical_types_as_text() -> None:
    fields = [
        {"type": "int32", "field": "id"},
        {"type": "int32", "name": "io.debezium.time.Date", "field": "on"},
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "at"},
        {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2"}, "field": "price"},
    ]  # fmt: skip
    schema = {"type": "struct", "fields": [{"type": "struct", "fields": fields, "field": "after"}]}
    after = {"id": 1, "on": 17956, "at": 1_551_398_400_000_001, "price": "BNI="}
    key = orjson.dumps({"id": 1})
    event = decode("p.public.t", key, _value("c", after, _pg(5, 9), schema))
    assert isinstance(event, RowEvent)
    assert event.row == {
        "id": "1", "on": "2019-03-01", "at": "2019-03-01T00:00:00.000001", "price": "12.34"
    }  # fmt: skip
    assert event.table == "public.t" and event.key == {"id": "1"} and not event.untyped


def test_without_a_schema_numbers_are_marked_untyped() -> None:
    event = decode("p.public.t", b'{"id": 1}', _value("r", {"id": 1, "on": 17956}, _pg(None, 3)))
    assert isinstance(event, RowEvent) and event.untyped == {"id", "on"}


@pytest.mark.parametrize(
    ("topic", "key", "value", "kind"),
    [
        ("p.public.t", b'{"id": 1}', None, "tombstone"),
        ("__debezium-heartbeat.p", b'{"serverName": "p"}', b'{"ts_ms": 1}', "heartbeat"),
        ("p.transaction", b'{"id": "1:2"}', b'{"status": "BEGIN", "id": "1:2"}', "transaction"),
        ("p", None, b'{"source": {}, "ddl": "CREATE TABLE t ()"}', "schema change"),
        ("p.public.t", None, _value("m", None, _pg(1, 2)), "message"),
    ],
)
def test_records_without_a_row_are_passed_over(
    topic: str, key: bytes | None, value: bytes | None, kind: str
) -> None:
    assert decode(topic, key, value) == PassedOver(kind)


def test_truncate_names_the_table_and_its_position() -> None:
    event = decode("p.public.t", None, _value("t", None, _pg(7, 8)))
    assert isinstance(event, TruncateEvent) and event.table == "public.t"
    assert event.version == source_version(_pg(7, 8))


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (b"{}", b"not json", "not JSON"),
        (b'{"id": 1}', b'{"id": 1, "body": "flat"}', "ExtractNewRecordState"),
        (None, _value("c", {"id": 1}, _pg(1, 2)), "without a key"),
        (b'{"id": 1}', _value("c", {"id": 1}, {**PG, "connector": "sqlserver"}), "sqlserver"),
        (b'{"id": 1}', _value("x", {"id": 1}, _pg(1, 2)), "unknown op"),
    ],
)
def test_what_cannot_be_read_says_why(key: bytes | None, value: bytes, reason: str) -> None:
    with pytest.raises(EventError, match=reason):
        decode("p.public.t", key, value)
