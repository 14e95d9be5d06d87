"""Validity dates: normalisation, padding and as-of tests (paper §5.1)."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.graph.validity import (
    normalize_date,
    normalize_period,
    period_end,
    period_start,
    valid_at,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1834", "1834"),
        ("in 1834", "1834"),
        ("May 2023", "2023-05"),
        ("Sept. 2020", "2020-09"),
        ("2023-05", "2023-05"),
        ("2023/5", "2023-05"),
        ("10 May 2023", "2023-05-10"),
        ("10th of May, 2023", "2023-05-10"),
        ("May 10, 2023", "2023-05-10"),
        ("on May 10th 2023", "2023-05-10"),
        ("2023-05-10", "2023-05-10"),
        ("2023/05/10", "2023-05-10"),
        ("2023-05-10T09:30:00Z", "2023-05-10"),
        ("25/12/2023", "2023-12-25"),
        ("12/25/2023", "2023-12-25"),
        # discarded: vaguer than a calendar year, ambiguous, or impossible
        ("05/10/2023", None),
        ("Q2 2023", None),
        ("summer 2023", None),
        ("early 1990s", None),
        ("1990s", None),
        ("the 19th century", None),
        ("circa 1834", None),
        ("later", None),
        ("in his youth", None),
        ("2023-02-30", None),
        ("2023-13", None),
        ("0000", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_date(text: str | None, expected: str | None) -> None:
    assert normalize_date(text) == expected


def test_padding() -> None:
    assert period_start("1625") == date(1625, 1, 1)
    assert period_end("1625") == date(1625, 12, 31)
    assert period_start("2024-02") == date(2024, 2, 1)
    assert period_end("2024-02") == date(2024, 2, 29)
    assert period_start("2024-02-10") == period_end("2024-02-10") == date(2024, 2, 10)
    assert period_start("1625") < period_start("1625-06-01")  # the paper's ordering example
    with pytest.raises(ValueError, match="not a normalised"):
        period_start("May 2023")


def test_valid_at() -> None:
    assert valid_at(None, None, date(1, 1, 1))  # undated: always valid
    assert valid_at("2019", "2021", date(2021, 12, 31))  # ends inclusive at their precision
    assert not valid_at("2019", "2021", date(2022, 1, 1))
    assert not valid_at("2019-05", None, date(2019, 4, 30))
    assert valid_at("2019-05", None, date(2019, 5, 1))
    assert valid_at(None, "2018", date(1900, 1, 1))
    assert not valid_at(None, "2018", date(2019, 1, 1))


def test_inverted_period_is_dropped_whole() -> None:
    assert normalize_period("2021", "2019") == (None, None)
    assert normalize_period("May 2019", "2019") == ("2019-05", "2019")
    assert normalize_period("2019", "later") == ("2019", None)


_DATES = st.dates(min_value=date(1000, 1, 1), max_value=date(9999, 12, 31))
"""Written years have four digits; shorter ones ("in 42") are not read as years."""


@given(_DATES)
def test_every_calendar_date_round_trips(day: date) -> None:
    iso = day.isoformat()
    assert normalize_date(iso) == iso
    assert normalize_date(day.strftime("%d %B %Y")) == iso
    month = normalize_date(day.strftime("%B %Y"))
    assert month == iso[:7]
    assert period_start(month) <= day <= period_end(month)
    assert period_start(iso[:4]) <= period_start(month) <= period_end(month) <= period_end(iso[:4])


@given(_DATES, _DATES, _DATES)
def test_valid_at_matches_padded_interval(a: date, b: date, probe: date) -> None:
    start, end = sorted([a, b])
    for v_from, v_to in [(start.isoformat()[:4], end.isoformat()[:7]), (start.isoformat(), None)]:
        expected = period_start(v_from) <= probe and (v_to is None or probe <= period_end(v_to))
        assert valid_at(v_from, v_to, probe) == expected
