"""The changes-topic invariant every fault case ends with must itself be able to fail: fed a
crafted topic with a gap, a repeat, a foreign change or a step back, it refuses each."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from tidegraph.schemas.changes import change_id
from tidegraph.schemas.kafka_security import kafka_client_options

from fault_helpers import assert_changes_complete, changes_on_topic
from indexer_helpers import Topics, make_topics

pytestmark = [pytest.mark.faults, pytest.mark.kafka]

OUTBOX = [(1, 0), (1, 1), (2, 0), (3, 0), (3, 1), (3, 2)]
"""``(seq, idx)`` of a realm's outbox: three commits."""


async def _crafted(topics: Topics, realm: str, ids: Sequence[tuple[int, int]]) -> None:
    producer = AIOKafkaProducer(**kafka_client_options(), bootstrap_servers=topics.bootstrap)
    await producer.start()
    try:
        for seq, idx in ids:
            body = {"id": change_id(realm, seq, idx), "seq": seq, "realm": realm}
            await producer.send_and_wait(topics.changes, orjson.dumps(body), key=realm.encode())
        other = {"id": change_id("other", 9, 0), "seq": 9, "realm": "other"}
        await producer.send_and_wait(topics.changes, orjson.dumps(other), key=b"other")
    finally:
        await producer.stop()


@pytest.mark.parametrize(
    ("on_topic", "complaint"),
    [
        (OUTBOX, None),
        ([(1, 0), (1, 1), (3, 0), (3, 1), (3, 2)], "missing"),  # seq 2 never published
        ([*OUTBOX[:3], (2, 0), *OUTBOX[3:]], "more than once"),  # a re-sent commit
        ([*OUTBOX, (4, 0)], "not in the outbox"),
        ([(1, 0), (1, 1), (3, 0), (3, 1), (3, 2), (2, 0)], "back in sequence"),
    ],
    ids=["complete", "gap", "duplicate", "foreign", "reordered"],
)
async def test_the_changes_check_refuses_a_broken_topic(
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    on_topic: list[tuple[int, int]],
    complaint: str | None,
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("cc"), partitions=2)
    realm = unique_name("r")
    await _crafted(topics, realm, on_topic)
    records = await changes_on_topic(topics, realm)
    assert len(records) == len(on_topic)  # the other realm's record is not read as ours
    if complaint is None:
        assert_changes_complete(realm, OUTBOX, records)
    else:
        with pytest.raises(AssertionError, match=complaint):
            assert_changes_complete(realm, OUTBOX, records)
