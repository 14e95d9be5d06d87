"""``as_believed_at`` takes a date, a month or a year as well as an instant: each means the
end of that period in UTC (its last microsecond), so a read at it answers what was believed
by the time it was over. One reading, checked against a model built from the calendar, and
through the HTTP API against the instants it names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from tidegraph.schemas.api import QueryDataRequest
from tidegraph.schemas.periods import belief_instant

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool

ONE = timedelta(microseconds=1)


def _next_day(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC) + timedelta(days=1)


def _first_of_next_month(year: int, month: int) -> datetime:
    return datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)


days = st.dates(min_value=date(1, 1, 1), max_value=date(9998, 12, 30))


@given(days)
def test_a_date_is_the_last_microsecond_of_that_day(d: date) -> None:
    assert belief_instant(d.isoformat()) == _next_day(d) - ONE
    assert belief_instant(d) == _next_day(d) - ONE


@given(days)
def test_a_month_and_a_year_are_the_last_microsecond_of_them(d: date) -> None:
    month = f"{d.year:04d}-{d.month:02d}"
    assert belief_instant(month) == _first_of_next_month(d.year, d.month) - ONE
    assert belief_instant(f"{d.year:04d}") == datetime(d.year + 1, 1, 1, tzinfo=UTC) - ONE


@given(st.datetimes(timezones=st.timezones(), min_value=datetime(2, 1, 1)))  # noqa: DTZ001
def test_an_instant_with_an_offset_is_itself(at: datetime) -> None:
    if at.utcoffset() is None:  # a zone that does not know this instant
        return
    # compared as instants: an hour a zone lives twice (DST) never equals across zones
    for given_ in (at, at.isoformat()):
        instant = belief_instant(given_)
        assert instant.tzinfo is UTC and instant.timestamp() == at.timestamp()


@pytest.mark.parametrize(
    "bad", ["2020-13", "2023-02-30", "2020-01-01T10:00", "tomorrow", "", "20200"]
)
def test_anything_else_says_what_it_takes(bad: str) -> None:
    with pytest.raises(ValueError, match="a date-time with an offset .* a year"):
        belief_instant(bad)
    with pytest.raises(ValueError, match="a year"):
        QueryDataRequest(query="q", as_believed_at=bad)


BEFORE = datetime(2025, 6, 1, 10, 0, tzinfo=UTC)
LATER = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)  # the first instant after 2025


@pytest.fixture(scope="module")
async def realm(pg_dsn: str) -> str:
    import uuid

    name = "bi" + uuid.uuid4().hex[:10]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name)
        for doc, at, facts in (
            ("a.md", BEFORE, ("Ada", "worked_with", "Charles")),
            ("b.md", LATER, ("Ada", "corresponded_with", "Michael")),
        ):
            vectors = await g.embedder.embed(["text"])
            chunk = ("text", [ent(facts[0]), ent(facts[2])], [rel(*facts)])
            await g.write("default", doc, g.prepared(doc, [chunk], vectors), at=at)
    return name


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


async def test_the_api_reads_a_period_at_its_end(
    pool: AsyncConnectionPool[Any], realm: str
) -> None:
    async with api_client(pool) as client:

        async def facts(at: str) -> set[str]:
            r = await client.get(f"/v1/realms/{realm}/relations", params={"as_believed_at": at})
            assert r.status_code == 200, r.text
            listed = {x["predicate"] for x in r.json()["relations"]}
            body = {"query": "Ada", "mode": "local", "as_believed_at": at}
            q = await client.post(f"/v1/realms/{realm}/query_data", json=body)
            assert q.status_code == 200, q.text
            assert {x["predicate"] for x in q.json()["relations"]} == listed
            return listed

        expect = {
            "2025-05-31": set(),
            "2025-06-01": {"worked_with"},  # written at 10:00 that day
            "2025-06": {"worked_with"},
            "2025": {"worked_with"},
            "2025-12-31": {"worked_with"},  # the next write came at the first instant of 2026
            "2026-01-01": {"worked_with", "corresponded_with"},
            "2026": {"worked_with", "corresponded_with"},
        }
        for given_, want in expect.items():
            assert await facts(given_) == want, given_
            instant = belief_instant(given_).isoformat().replace("+00:00", "Z")
            assert await facts(instant) == want, (given_, instant)
        assert await facts(LATER.isoformat()) == {"worked_with", "corresponded_with"}
        assert await facts((LATER - ONE).isoformat()) == {"worked_with"}
        refused = await client.get(
            f"/v1/realms/{realm}/entities", params={"as_believed_at": "2020-01-01T10:00"}
        )
        assert refused.status_code == 422
        message = refused.json()["error"]["message"]
        assert "as_believed_at" in message and "a date-time with an offset" in message
