"""What a failed record means, decided once for the live indexer and the replay.

A record that fails carries where it sits as typed fields (:class:`RecordFailed`), and
:func:`verdict` says what to do about it:

* ``retry`` — the database or the model endpoint is unavailable: pause, back off
  (:class:`Backoff`, honouring the endpoint's ``Retry-After``) and try the same record again;
* ``retry_now`` — a replay swapped the realm in underneath, or another reader settled the
  records first (``AlreadySettled``): decide again at once, from what the realm holds;
* ``lost`` — another consumer owns the partition now (fenced): stop, it continues;
* ``hold`` — trying again cannot help (a bug, a configuration the record cannot be
  applied under): the record's realm stops at it, fail closed, until an operator fixes the
  cause; nothing of the realm is skipped. The live indexer goes on with the other realms
  of the partition; a replay gives up.

A value PostgreSQL refuses is none of these: the writing units record it as a failed
version (``units``), since the same value would be refused forever.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tidegraph.schemas import TidegraphError
from tidegraph.store import AlreadySettled, Fenced, RealmSwapped, classify_db_error


class RecordFailed(Exception):
    """Applying one record failed; ``__cause__`` says why."""

    def __init__(
        self,
        realm: str,
        topic: str,
        partition: int,
        offset: int,
        doc_key: str | None,
        cause: BaseException,
    ) -> None:
        self.realm = realm
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.doc_key = doc_key
        self.cause = classify_db_error(cause)
        super().__init__(
            f"realm {realm!r}, {topic}/{partition} offset {offset}"
            + (f" ({doc_key!r})" if doc_key is not None else "")
            + f": {type(self.cause).__name__}: {self.cause}"
        )

    @property
    def error_class(self) -> str:
        return type(self.cause).__name__


class Verdict(enum.Enum):
    RETRY = "retry"
    RETRY_NOW = "retry_now"
    LOST = "lost"
    HOLD = "hold"


def verdict(exc: BaseException) -> Verdict:
    """What to do after ``exc`` (a :class:`RecordFailed` is judged by its cause)."""
    cause = exc.cause if isinstance(exc, RecordFailed) else classify_db_error(exc)
    if isinstance(cause, Fenced):
        return Verdict.LOST
    if isinstance(cause, RealmSwapped | AlreadySettled):
        return Verdict.RETRY_NOW
    if isinstance(cause, TidegraphError) and cause.retriable:
        return Verdict.RETRY
    return Verdict.HOLD


def retry_after(exc: BaseException) -> float | None:
    """The wait the failing service asked for, when it asked (``Retry-After``)."""
    cause = exc.cause if isinstance(exc, RecordFailed) else exc
    value = getattr(cause, "retry_after", None)
    return float(value) if isinstance(value, int | float) and value >= 0 else None


@dataclass(frozen=True)
class Backoff:
    """Growing pauses between attempts, bounded, and never shorter than asked for."""

    initial: float = 0.5
    """First pause, seconds."""
    longest: float = 30.0
    """Longest pause, seconds (a ``Retry-After`` beyond it is honoured up to it)."""

    def delay(self, failures: int, asked: float | None = None) -> float:
        """The pause after the ``failures``-th failure in a row (1-based)."""
        grown = self.initial * 2 ** max(0, failures - 1)
        return float(min(self.longest, max(grown, asked or 0.0)))
