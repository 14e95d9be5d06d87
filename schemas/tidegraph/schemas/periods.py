"""Partial calendar dates (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``) and the days they cover.

What a relation's ``valid_from`` / ``valid_to`` hold, and what ``as_of`` accepts: the
indexer pads stored periods with these, and the query service reads ``as_of=1840`` as the
whole of 1840 with the same rule.

Belief time takes them too: ``as_believed_at=1842`` (or ``1842-06``, ``1842-06-05``) is the
*end* of that year (month, day) in UTC — its last microsecond, so the answer is what was
believed by the time it was over (:func:`belief_instant`, the one reading of every
``as_believed_at`` the HTTP API, the client, the MCP tools and the command line take).
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, date, datetime, time

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


BELIEF_INSTANT_FORMS = (
    "a date-time with an offset (2024-06-30T12:00:00Z), or a date (2024-06-30), a month "
    "(2024-06) or a year (2024), each read as its end in UTC (23:59:59.999999 of its last day)"
)
"""What :func:`belief_instant` accepts, as error messages and documentation say it."""


def belief_instant(value: object) -> datetime:
    """The belief-time instant ``value`` names, in UTC.

    A timezone-aware :class:`datetime` or ISO 8601 date-time with an offset is that instant;
    a :class:`date` or a ``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` text is the end of that
    day, month or year in UTC (its last microsecond), so a read at it answers what was
    believed by the time the period was over. A date-time without an offset is refused
    rather than guessed. :class:`ValueError` says what is accepted."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{value.isoformat()!r} has no offset: give {BELIEF_INSTANT_FORMS}")
        return value.astimezone(UTC)
    if isinstance(value, date):
        return _end_of(value)
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an instant: give {BELIEF_INSTANT_FORMS}")
    text = value.strip()
    if _VALUE.fullmatch(text):
        try:
            return _end_of(period_end(text))
        except ValueError:
            raise ValueError(
                f"{value!r} is not a date that exists: give {BELIEF_INSTANT_FORMS}"
            ) from None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{value!r} is not an instant: give {BELIEF_INSTANT_FORMS}") from None
    return belief_instant(parsed)


def _end_of(day: date) -> datetime:
    """The last microsecond of ``day`` in UTC."""
    return datetime.combine(day, time.max, UTC)
