"""One log format for every command, and aiokafka's connection errors collapsed per outage.

While a broker is down, aiokafka logs every failed connection, metadata refresh, heartbeat
and fetch — about 1,750 lines in 45 s from one indexer. :class:`KafkaOutageFilter` lets the
first of an outage through, counts the rest, and says how many at most once per interval;
an outage ends after a quiet spell with none. A coordinator that is still loading (right
after a broker starts) is retried by aiokafka and not reported. Other aiokafka messages pass
untouched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
SUMMARY_SECONDS = 30.0
QUIET_SECONDS = 30.0

# Message templates (``record.msg``) aiokafka 0.14 uses for a broker that cannot be reached.
_TEMPLATES = (
    "Unable connect to",
    "Unable to request metadata from",
    "Unable to update metadata from",
    "Error sending %s to node",
    "Heartbeat send request failed",
    "Heartbeat session expired",
    "Failed fetch messages from",
    "Failed fetch offsets from",
    "FindCoordinator Request failed",
    "Cannot send %r to",
    "Could not send %r",
)
# Words in the formatted text that mark a connection failure whatever the template.
_SIGNS = ("KafkaConnectionError", "NodeNotReadyError", "Connect call failed", "Connection refused")
_VERDICT = "_tidegraph_kafka_outage"
# A group coordinator still loading (a broker just started, a rebalance): aiokafka retries
# and logs an ERROR each time. Counted inside an outage, never the start of one.
# Leaving the group while the broker is away fails the same way.
_CHURN_ALWAYS = ("Marking the coordinator dead",)
_CHURN_TEMPLATES = ("Group Coordinator Request failed", "LeaveGroup request failed")
_CHURN_SIGNS = ("GroupCoordinatorNotAvailableError", "NotCoordinatorForGroupError")


def is_coordinator_churn(record: logging.LogRecord) -> bool:
    """True for aiokafka's retried coordinator lookups, normal while a broker starts (and
    for leaving the group while it is away)."""
    if not record.name.startswith("aiokafka") or record.levelno < logging.WARNING:
        return False
    template = str(record.msg)
    if template.startswith(_CHURN_ALWAYS):
        return True
    text = record.getMessage()
    return template.startswith(_CHURN_TEMPLATES) and any(sign in text for sign in _CHURN_SIGNS)


def is_connection_error(record: logging.LogRecord) -> bool:
    """True for an aiokafka warning or error that only says a broker cannot be reached."""
    if not record.name.startswith("aiokafka") or record.levelno < logging.WARNING:
        return False
    template = str(record.msg)
    if template.startswith(_TEMPLATES):
        return True
    text = record.getMessage()
    return any(sign in text for sign in _SIGNS)


class KafkaOutageFilter(logging.Filter):
    """Collapse aiokafka's connection errors into one line per outage plus a bounded summary."""

    def __init__(
        self,
        summary_seconds: float = SUMMARY_SECONDS,
        quiet_seconds: float = QUIET_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.summary_seconds = summary_seconds
        self.quiet_seconds = quiet_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._started: float | None = None
        self._last = 0.0
        self._told_at = 0.0
        self._count = 0
        self._untold = 0

    def filter(self, record: logging.LogRecord) -> bool:
        verdict = getattr(record, _VERDICT, None)
        if verdict is not None:  # already judged by this filter on another handler
            return bool(verdict)
        churn = is_coordinator_churn(record)
        if not churn and not is_connection_error(record):
            return True
        with self._lock:
            keep = self._judge(record, self.clock(), churn=churn)
        setattr(record, _VERDICT, keep)
        return keep

    def _judge(self, record: logging.LogRecord, now: float, *, churn: bool) -> bool:
        text = record.getMessage()
        if self._started is None or now - self._last > self.quiet_seconds:
            if churn:
                return False
            before = ""
            if self._started is not None and self._untold:
                before = (
                    f"; the previous outage ended after {self._count} connection errors over "
                    f"{self._last - self._started:.0f}s"
                )
            self._started, self._told_at, self._count, self._untold = now, now, 1, 0
            self._last = now
            _rewrite(
                record,
                f"Kafka unreachable: {text} (further connection errors are counted and "
                f"summarised every {self.summary_seconds:.0f}s{before})",
            )
            return True
        self._count += 1
        self._untold += 1
        self._last = now
        if now - self._told_at < self.summary_seconds:
            return False
        _rewrite(
            record,
            f"Kafka still unreachable after {now - self._started:.0f}s: {self._untold} more "
            f"connection errors ({self._count} in this outage), latest: {text}",
        )
        self._told_at, self._untold = now, 0
        return True


def _rewrite(record: logging.LogRecord, message: str) -> None:
    record.msg = message
    record.args = ()
    record.exc_info = None
    record.exc_text = None


def configure_logging(level: int) -> KafkaOutageFilter:
    """The one format every command logs in (servers' own loggers such as uvicorn's
    propagate to it), with aiokafka's outage flood collapsed on every root handler.

    Idempotent: a second call adjusts the level and reuses the installed filter.
    """
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(format=LOG_FORMAT)
    root.setLevel(level)
    installed = [f for h in root.handlers for f in h.filters if isinstance(f, KafkaOutageFilter)]
    outage = installed[0] if installed else KafkaOutageFilter()
    for handler in root.handlers:
        if outage not in handler.filters:
            handler.addFilter(outage)
    return outage


def set_service_level(name: str) -> int:
    """Log level ``name`` (``--log-level``) for tidegraph's and uvicorn's loggers; aiokafka
    and the rest stay at warnings."""
    level = logging.getLevelName(name.upper())
    if not isinstance(level, int):
        from tidegraph.schemas.errors import ConfigError

        raise ConfigError(
            f"--log-level {name!r}: unknown level — use DEBUG, INFO, WARNING or ERROR"
        )
    for logger in ("tidegraph", "uvicorn"):
        logging.getLogger(logger).setLevel(level)
    return level
