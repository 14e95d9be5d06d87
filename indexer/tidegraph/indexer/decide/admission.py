"""Which records of the documents topic reach a realm at all: one rule for every reader.

The live indexer dead-letters what this refuses; a replay passes the same records by, so a
rebuilt realm holds exactly what the live one was given. A record is refused when it has
no value, is not a valid ``DocumentVersion``, is keyed by another realm than its own, or
its ``content_hash`` does not match its content.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeAlias

from aiokafka import ConsumerRecord

from tidegraph.indexer.decide.planner import Logged
from tidegraph.schemas import DocumentVersion, RecordValidationError
from tidegraph.store import key_realm

Message: TypeAlias = ConsumerRecord[bytes, bytes]
"""A record as read from the documents topic."""


@dataclass(frozen=True)
class Admitted:
    """A record its realm is given."""

    realm: str
    logged: Logged


@dataclass(frozen=True)
class Refused:
    """A record no realm is given, and why (the dead-letter topic carries both)."""

    offset: int
    key: str
    """The realm the record is filed under: its key's, or its own for a hash mismatch."""
    error: str
    error_class: str
    """``invalid`` or ``hash_mismatch``."""


def log_time(msg: Message) -> datetime:
    """A record's log-append timestamp: the earliest belief instant a write of it takes."""
    return datetime.fromtimestamp(msg.timestamp / 1000, tz=UTC)


def admit(msg: Message) -> Admitted | Refused:
    """The record as its realm is given it, or why it is refused."""
    key = key_realm(msg.key)
    if msg.value is None:
        return Refused(msg.offset, key, "record has no value", "invalid")
    try:
        record = DocumentVersion.from_json(msg.value)
    except RecordValidationError as exc:
        return Refused(msg.offset, key, str(exc), "invalid")
    if msg.key is not None and msg.key != record.realm.encode():
        return Refused(
            msg.offset, key, f"record key {msg.key!r} is not its realm {record.realm!r}", "invalid"
        )
    if not record.hash_matches():
        return Refused(
            msg.offset,
            record.realm,
            f"content_hash {record.content_hash} does not match the content",
            "hash_mismatch",
        )
    return Admitted(record.realm, Logged(msg.offset, log_time(msg), record))
