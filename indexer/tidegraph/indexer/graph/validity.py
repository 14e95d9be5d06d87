"""Validity dates: free text to ``YYYY``/``YYYY-MM``/``YYYY-MM-DD``, and as-of tests (paper §5.1).

A relation carries a period only when the text states one, and a wrong date is worse than
none, so anything vaguer than a calendar year is discarded rather than coerced:

- accepted: ``1834``, ``May 2023``, ``2023-05``, ``2023/05``, ``10 May 2023``,
  ``May 10, 2023``, ``10th of May 2023``, ``2023-05-10``, ``2023/05/10``,
  ``2023-05-10T09:30:00Z`` (date part), and ``25/12/2023`` or ``12/25/2023`` only when one
  number is above 12 so the reading is unambiguous; a leading ``in`` or ``on`` is ignored.
- discarded (``None``): decades and centuries (``early 1990s``), quarters and seasons
  (``Q2 2023``, ``summer 2023`` — padding them to the whole year would make a relation
  look valid in months it was not), approximations (``circa 1834``), relative phrases
  (``later``, ``in his youth``), ambiguous ``05/10/2023``, impossible dates (``2023-02-30``).

Partial dates are padded for comparison — :func:`period_start` to the first day,
:func:`period_end` to the last — so ``1625`` orders below ``1625-06-01`` and a relation
"from 2019 to 2021" is valid on 2021-12-31. An undated relation is valid at every instant.
"""

from __future__ import annotations

import calendar
import functools
import re
from datetime import date

from tidegraph.schemas import period_end, period_start

__all__ = [
    "normalize_date",
    "normalize_period",
    "period_end",
    "period_start",
    "valid_at",
]

_MONTHS = {
    name: i
    for i in range(1, 13)
    for name in (calendar.month_name[i].lower(), calendar.month_abbr[i].lower())
}
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"

_FORMS = tuple(
    re.compile(p)
    for p in (
        rf"{_YEAR}",
        rf"{_YEAR}[-/.](?P<mnum>\d{{1,2}})",
        rf"{_YEAR}[-/.](?P<mnum>\d{{1,2}})[-/.]{_DAY}(?:t[\d:.]+(?:z|[+-][\d:]+)?)?",
        rf"{_MONTH},?\s+{_YEAR}",
        rf"{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}",
        rf"{_MONTH}\s+{_DAY},?\s+{_YEAR}",
        rf"(?P<dmy_d>\d{{1,2}})[/.](?P<dmy_m>\d{{1,2}})[/.]{_YEAR}",
    )
)
_LEADING = re.compile(r"^(?:in|on)\s+")


@functools.lru_cache(maxsize=16384)
def normalize_date(text: str | None) -> str | None:
    """``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` for a stated date, ``None`` for anything vaguer.

    Memoised: a corpus states the same few dates again and again, and each new one is
    tried against every accepted form."""
    if text is None:
        return None
    s = _LEADING.sub("", " ".join(text.lower().split()))
    for form in _FORMS:
        m = form.fullmatch(s)
        if m is not None:
            return _assemble(m)
    return None


def _assemble(m: re.Match[str]) -> str | None:
    groups = m.groupdict()
    year = int(m["year"])
    if year == 0:
        return None
    month: int | None = None
    day: int | None = None
    if groups.get("dmy_d") is not None:
        first, second = int(m["dmy_d"]), int(m["dmy_m"])
        if first <= 12 and second <= 12:  # 05/10/2023 reads either way: discard
            return None
        day, month = (first, second) if first > 12 else (second, first)
    elif groups.get("mnum") is not None:
        month = int(m["mnum"])
    elif groups.get("month") is not None:
        month = _MONTHS[m["month"]]
    if groups.get("day") is not None:
        day = int(m["day"])
    if month is None:
        return f"{year:04d}"
    if not 1 <= month <= 12:
        return None
    if day is None:
        return f"{year:04d}-{month:02d}"
    try:
        return date(year, month, day).isoformat()
    except ValueError:
        return None


def normalize_period(valid_from: str | None, valid_to: str | None) -> tuple[str | None, str | None]:
    """Normalise both ends; an inverted period (start after end) is dropped whole.

    An inverted pair means one of the two dates is wrong and nothing says which, so neither
    is kept: the relation falls back to "valid throughout" rather than to a false window.
    """
    start, end = normalize_date(valid_from), normalize_date(valid_to)
    if start is not None and end is not None and period_start(start) > period_end(end):
        return None, None
    return start, end


def valid_at(valid_from: str | None, valid_to: str | None, as_of: date) -> bool:
    """Whether a relation with this (normalised) period holds on ``as_of``; both ends inclusive.

    A missing end is unbounded on that side, so an undated relation always matches.
    """
    if valid_from is not None and as_of < period_start(valid_from):
        return False
    return valid_to is None or as_of <= period_end(valid_to)
