"""The indexer explains itself at INFO: a line per batch with what each realm's records did
and the lag left, a line per failed document with its reason."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable

import pytest

from indexer_helpers import make_topics, publish, running_indexer, stored_position, upsert, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

_REALM_COUNTS = r"realm {realm} (?P<counts>[^;]*)"


def _batch_counts(lines: list[str], realm: str) -> tuple[Counter[str], list[str]]:
    """Outcomes of ``realm`` summed over the batch lines, and each line's lag."""
    total: Counter[str] = Counter()
    lags = []
    for line in lines:
        if not line.startswith("batch "):
            continue
        lags.append(line.rsplit("; lag ", 1)[1])
        found = re.search(_REALM_COUNTS.format(realm=re.escape(realm)), line)
        if found:
            for part in found["counts"].split(", "):
                n, outcome = part.split(" ", 1)
                total[outcome] += int(n)
    return total, lags


async def test_batches_and_failed_documents_are_one_line_each(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="tidegraph.indexer")
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    text = "Ada Lovelace worked with Charles Babbage."
    async with running_indexer(topics, pg_dsn, group):
        await publish(
            topics,
            [
                upsert(realm, "ok.md", text, source_version="2"),
                upsert(realm, "empty.md", "it was raining all day and nobody came."),
                upsert(realm, "ok.md", text, source_version="2"),  # no-op
                upsert(realm, "ok.md", "Ada Lovelace met Mary Somerville.", source_version="1"),
                (realm.encode(), b"{not json"),  # dead-lettered
            ],
        )

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 5

        await wait_for(done, 60, "all five settled")
    lines = [r.getMessage() for r in caplog.records if r.name == "tidegraph.indexer"]
    counts, lags = _batch_counts(lines, realm)
    assert counts == Counter(
        {"applied": 1, "no-op": 1, "stale": 1, "failed": 1, "dead-lettered": 1}
    ), lines
    assert lags and all(lag.isdigit() for lag in lags), lines
    assert lags[-1] == "0"
    failed = [line for line in lines if "failed:" in line and "'empty.md'" in line]
    assert len(failed) == 1, lines
    assert f"realm {realm}" in failed[0] and "offset 1" in failed[0]
    assert failed[0].split("failed: ", 1)[1].strip(), failed[0]  # a reason, not blank


async def test_a_refused_value_is_logged_with_the_refusal_the_dlq_holds(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A title PostgreSQL cannot store: the version is stored as failed and the record
    dead-lettered with the refusal; the failed line gives the same reason."""
    caplog.set_level(logging.INFO, logger="tidegraph.indexer")
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    text = "Ada Lovelace worked with Charles Babbage."
    async with running_indexer(topics, pg_dsn, group):
        await publish(topics, [upsert(realm, "nul.md", text, title="a\x00b")])

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 1

        await wait_for(done, 60, "the record settled")
    lines = [r.getMessage() for r in caplog.records if r.name == "tidegraph.indexer"]
    dead = [line for line in lines if line.startswith("dead-lettered")]
    failed = [line for line in lines if "'nul.md'" in line and "failed:" in line]
    assert len(dead) == 1 and len(failed) == 1, lines
    reason = failed[0].split("failed: ", 1)[1]
    assert reason.startswith("PostgreSQL refused a value of the record: "), failed[0]
    assert dead[0].endswith(reason), (dead[0], reason)
