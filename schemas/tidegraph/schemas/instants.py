"""The instant every record carries: one type for ``event_time`` and ``belief_time``.

An ISO 8601 / RFC 3339 date-time with a UTC offset: a naive one is refused (a bi-temporal
record cannot guess its zone) and so is a number (pydantic would read it as a Unix time;
the contract says text). Any offset is accepted and normalised to UTC, and written back with
a ``Z`` suffix, the form every tidegraph record uses.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, Field, PlainSerializer

RFC3339_PATTERN = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
"""Stated in the JSON Schema files, where ``format: date-time`` is only advisory."""


def format_utc(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _text_or_datetime(value: object) -> object:
    if not isinstance(value, str | datetime):
        raise ValueError("must be an ISO 8601 / RFC 3339 date-time string with an offset")
    return value


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


Instant = Annotated[
    AwareDatetime,
    BeforeValidator(_text_or_datetime),
    AfterValidator(_utc),
    PlainSerializer(format_utc, return_type=str),
    Field(json_schema_extra={"pattern": RFC3339_PATTERN}),
]
"""A record's instant (module docstring)."""
