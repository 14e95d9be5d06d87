"""aiokafka's connection-error flood collapses into one line per outage plus a bounded summary."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError

from tidegraph.infra import _proc
from tidegraph.infra.logs import KafkaOutageFilter, configure_logging, is_connection_error


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def collapsed() -> Iterator[tuple[Lines, Clock]]:
    """A handler on aiokafka's loggers with the outage filter and a clock the test moves."""
    clock = Clock()
    handler = Lines()
    handler.addFilter(KafkaOutageFilter(summary_seconds=30, quiet_seconds=30, clock=clock))
    logger = logging.getLogger("aiokafka")
    logger.addHandler(handler)
    try:
        yield handler, clock
    finally:
        logger.removeHandler(handler)


async def _fail_to_bootstrap(bootstrap: str) -> None:
    """One real aiokafka connection attempt to a port nothing listens on."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=1000)
    try:
        with pytest.raises(KafkaConnectionError):
            await client.bootstrap()
    finally:
        await client.close()


async def test_an_outage_is_one_line_then_a_counted_summary_at_a_bounded_rate(
    collapsed: tuple[Lines, Clock],
) -> None:
    handler, clock = collapsed
    dead = f"127.0.0.1:{_proc.free_port()}"
    for _ in range(200):  # aiokafka's real messages, as a broker outage produces them
        await _fail_to_bootstrap(dead)
        clock.now += 0.1  # 200 failures over 20 s
    assert len(handler.lines) == 1, handler.lines
    assert handler.lines[0].startswith("Kafka unreachable: Unable connect to")
    assert "summarised every 30s" in handler.lines[0]

    for _ in range(150):  # 15 s more: one summary once 30 s have passed since the first line
        await _fail_to_bootstrap(dead)
        clock.now += 0.1
    assert len(handler.lines) == 2, handler.lines
    summary = handler.lines[1]
    assert summary.startswith("Kafka still unreachable after 30s: 300 more connection errors")
    assert "(301 in this outage)" in summary

    clock.now += 120  # the broker came back; a later outage is a new first line
    await _fail_to_bootstrap(dead)
    assert len(handler.lines) == 3
    assert handler.lines[2].startswith("Kafka unreachable:")
    assert "the previous outage ended after 350 connection errors" in handler.lines[2]


def test_other_aiokafka_messages_and_other_loggers_pass() -> None:
    def record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, msg, args, None)

    assert is_connection_error(
        record("aiokafka.client", logging.ERROR, "Unable connect to node with id %s: %s", 1, "x")
    )
    assert is_connection_error(
        record("aiokafka.consumer.fetcher", logging.ERROR, "Failed fetch messages from %s: %s", 1,
               "NodeNotReadyError")
    )  # fmt: skip
    assert not is_connection_error(
        record("aiokafka.cluster", logging.ERROR, "Topic %s not found in cluster metadata", "t")
    )
    assert not is_connection_error(
        record("tidegraph.indexer", logging.ERROR, "Unable connect to %s", "db")
    )
    assert not is_connection_error(
        record("aiokafka.client", logging.INFO, "Unable connect to %s", "x")
    )


def test_coordinator_still_loading_is_not_an_outage(collapsed: tuple[Lines, Clock]) -> None:
    handler, clock = collapsed
    log = logging.getLogger("aiokafka.consumer.group_coordinator")
    log.error(
        "Group Coordinator Request failed: %s", "[Error 15] GroupCoordinatorNotAvailableError"
    )
    log.warning("Marking the coordinator dead (node %s)for group %s.", 1, "g")
    assert handler.lines == []
    log.error("Unable connect to node with id %s: %s", 1, "Connect call failed")
    clock.now += 1
    log.warning("Marking the coordinator dead (node %s)for group %s.", 1, "g")  # counted
    log.error("LeaveGroup request failed: %s", "[Error 15] GroupCoordinatorNotAvailableError")
    assert len(handler.lines) == 1


def test_configure_logging_installs_the_filter_once() -> None:
    root = logging.getLogger()
    level = root.level
    try:
        first = configure_logging(logging.WARNING)
        again = configure_logging(logging.INFO)
        assert first is again
        assert all(h.filters.count(first) == 1 for h in root.handlers)
    finally:
        for handler in root.handlers:
            handler.removeFilter(first)
        root.setLevel(level)
