"""What `tidegraph status` prints about realms: one aligned column per figure, whatever the
lengths of the names and counts."""

from __future__ import annotations

from datetime import UTC, datetime

from tidegraph.infra.realm_status import DataStatus, render
from tidegraph.infra.tables import aligned
from tidegraph.store.figures import RealmFigures


def _starts(line: str, cells: list[str]) -> list[int]:
    """Where each of ``cells`` begins in ``line``, searching left to right."""
    found, at = [], 0
    for cell in cells:
        at = line.index(cell, at)
        found.append(at)
        at += len(cell)
    return found


def test_realm_rows_line_up_under_their_headers() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    realms = [
        RealmFigures("demo", "realm_demo", {"indexed": 7}, 13, 20, 8, when, "hashing:384", "rules"),
        RealmFigures(
            "a_much_longer_realm_name", "realm_x", {"failed": 1, "indexed": 1200}, 5, 9, 12345,
            None, "llm:text-embedding-3-small:1536", "llm",
        ),
    ]  # fmt: skip
    lines = render(DataStatus(realms=realms)).splitlines()
    header = ["REALM", "DOCUMENTS", "HEAD SEQ", "LAST WRITE", "EMBEDDER"]
    columns = _starts(lines[0], header)
    first = ["demo", "7 indexed", "8", "2026-01-02T03:04:05+00:00", "hashing:384"]
    second = ["a_much_longer_realm_name", "1 failed, 1200 indexed", "12345", "-", "llm:"]
    assert _starts(lines[1], first) == columns, lines
    assert _starts(lines[2], second) == columns, lines


def test_aligned_pads_all_but_the_last_column() -> None:
    assert aligned([("A", "BB", "C"), ("xxx", "y", "zzzz")]) == ["A    BB  C", "xxx  y   zzzz"]
    assert aligned([]) == []
