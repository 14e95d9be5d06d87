"""The pure decision at the heart of the indexer: record + document state → what to do.

No I/O here. The driver (``consumer.py``) loads the state, calls :func:`decide`, and only
then pays for extraction — so an unchanged document costs nothing (DESIGN invariant 3).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tidegraph.schemas.documents import compare_source_versions


class Action(enum.Enum):
    """What applying one record means for the graph."""

    NOOP = "noop"
    """Same content as applied: no extraction, no graph write, no change; offset only."""
    STALE = "stale"
    """Older ``source_version`` than applied: ignored and counted."""
    APPLY = "apply"
    """New or changed content: replace the document's contribution."""
    DELETE = "delete"
    """The document is gone: withdraw its contribution."""


@dataclass(frozen=True)
class DocState:
    """What the realm last applied for one (space, doc_key)."""

    status: str
    """``indexed``, ``deleted`` or ``failed``."""
    content_hash: str | None
    """Hash of the applied content; ``None`` once deleted."""
    source_version: str | None
    """The source's version of the applied record, when it sent one."""


def decide(
    op: str, content_hash: str | None, source_version: str | None, state: DocState | None
) -> Action:
    """Classify one record against the document's applied state."""
    if (
        state is not None
        and source_version is not None
        and state.source_version is not None
        and compare_source_versions(source_version, state.source_version) < 0
    ):
        return Action.STALE
    if op == "delete":
        if state is None or state.status == "deleted":
            return Action.NOOP
        return Action.DELETE
    if state is not None and state.status != "deleted" and state.content_hash == content_hash:
        return Action.NOOP
    return Action.APPLY


def next_state(
    action: Action, content_hash: str | None, source_version: str | None, state: DocState | None
) -> DocState | None:
    """The state a batch should assume after ``action`` (so later records in it decide right).

    A failed extraction is only known after applying; assuming ``indexed`` here is safe
    because a re-sent identical document is a no-op either way.
    """
    if action is Action.APPLY:
        return DocState("indexed", content_hash, source_version)
    if action is Action.DELETE:
        return DocState("deleted", None, source_version)
    return state
