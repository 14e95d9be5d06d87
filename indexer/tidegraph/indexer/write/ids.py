"""Row ids drawn from the log: the same record creates the same ids however it is applied.

A chunk, entity or relation created by the record at offset ``o`` of its realm's
partition gets the id ``BASE + o * PER_RECORD + n``, ``n`` counting the rows that record
creates. So a live indexer and a replay of the same log number the graph
alike, a write rolled back and applied again takes the same ids, and record-by-record and
batched application give identical realms, change feeds included: ids in the feed keep
meaning the same objects across a rebuild of an unchanged configuration.

``BASE`` keeps these ids clear of the small numbers a sequence hands out (communities, and
realms created before ids came from the log); ids are strings in every contract.
"""

from __future__ import annotations

BASE = 1 << 40
"""Lowest id a record can draw."""
PER_RECORD = 1 << 20
"""Rows one record can create: far more chunks, entities and relations than one document
holds."""


class IdsFull(Exception):
    """A record created more rows than it has ids for."""


def record_ids(offset: int) -> range:
    """The ids the record at ``offset`` may give the rows it creates."""
    start = BASE + offset * PER_RECORD
    return range(start, start + PER_RECORD)


def take(offset: int, count: int) -> list[int]:
    """The first ``count`` ids of the record at ``offset``."""
    ids = record_ids(offset)
    if count > len(ids):
        raise IdsFull(f"the record at offset {offset} creates {count} rows")
    return list(ids[:count])
