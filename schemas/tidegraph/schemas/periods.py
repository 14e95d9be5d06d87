"""Partial calendar dates (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``) and the days they cover.

What a relation's ``valid_from`` / ``valid_to`` hold, and what ``as_of`` accepts: the
indexer pads stored periods with these, and the query service reads ``as_of=1840`` as the
whole of 1840 with the same rule.
"""

from __future__ import annotations

import calendar
import re
from datetime import date

PARTIAL_DATE_PATTERN = r"^\d{4}(?:-\d{2}(?:-\d{2})?)?$"
_VALUE = re.compile(PARTIAL_DATE_PATTERN)


def _parts(value: str) -> list[int]:
    if not _VALUE.fullmatch(value):
        raise ValueError(f"{value!r} is not a normalised validity date (YYYY, YYYY-MM, YYYY-MM-DD)")
    return [int(p) for p in value.split("-")]


def period_start(value: str) -> date:
    """First day a normalised date covers: ``1625`` → 1625-01-01, ``1625-06`` → 1625-06-01."""
    parts = _parts(value)
    return date(parts[0], parts[1] if len(parts) > 1 else 1, parts[2] if len(parts) > 2 else 1)


def period_end(value: str) -> date:
    """Last day a normalised date covers: ``1625`` → 1625-12-31, ``2024-02`` → 2024-02-29."""
    parts = _parts(value)
    if len(parts) == 3:
        return date(parts[0], parts[1], parts[2])
    month = parts[1] if len(parts) == 2 else 12
    return date(parts[0], month, calendar.monthrange(parts[0], month)[1])


def covered(value: str) -> tuple[date, date]:
    """First and last day ``value`` covers; :class:`ValueError` for anything else,
    an impossible date (``2023-02-30``, ``1840-13``) included."""
    return period_start(value), period_end(value)
