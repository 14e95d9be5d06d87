"""The pure decision at the heart of the indexer: record + document state → what to do.

No I/O here. A driver loads the stored states, folds its records through :func:`decide` and
:func:`next_state` in log order (:mod:`planner`), and only then pays for extraction — so an
unchanged document costs nothing (DESIGN invariant 3).

``source_version`` is monotonic per doc_key (CONTRACT): the state remembers the highest
version *seen* — applied, deleted or re-sent unchanged — and never forgets or lowers it, so
whether a version is stale does not depend on poll, batch or restart boundaries. The writer
stores exactly what :func:`next_state` returns (``writer.record_versions`` for the records
that write nothing else).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tidegraph.schemas import compare_source_versions


class Action(enum.Enum):
    """What applying one record means for the graph."""

    NOOP = "noop"
    """Same content as applied (or a delete of a document not held): no extraction, no
    graph write, no change; the position moves and a higher ``source_version`` is kept."""
    STALE = "stale"
    """Older ``source_version`` than the highest seen: ignored and counted."""
    APPLY = "apply"
    """New or changed content: replace the document's contribution."""
    DELETE = "delete"
    """The document is gone: withdraw its contribution."""


@dataclass(frozen=True)
class DocState:
    """What the realm holds for one (space, doc_key)."""

    status: str
    """``indexed``, ``deleted`` or ``failed``."""
    content_hash: str | None
    """Hash of the applied version (``DocumentVersion.version_hash``: the content's, combined
    with the facts when the record carried any); ``None`` once deleted."""
    source_version: str | None
    """The highest ``source_version`` any record of the document carried so far."""


def decide(
    op: str, content_hash: str | None, source_version: str | None, state: DocState | None
) -> Action:
    """Classify one record against the document's state."""
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


def highest_version(held: str | None, given: str | None) -> str | None:
    """The version a document keeps after a record carrying ``given``: the record's when it
    is not lower (an equal one replaces it), else the one held. A record without a version
    never lowers or resets it, nor does one PostgreSQL could not store (a NUL character)."""
    if given is None or "\0" in given:
        return held
    if held is None or compare_source_versions(given, held) >= 0:
        return given
    return held


def next_state(
    action: Action,
    content_hash: str | None,
    source_version: str | None,
    state: DocState | None,
) -> DocState | None:
    """The state after a record: what the writer stores, so later records of the same log
    decide the same whether they are folded here or read back from the database.

    A failed extraction is only known after applying; assuming ``indexed`` here is safe
    because a re-sent identical document is a no-op either way.
    """
    version = highest_version(state.source_version if state else None, source_version)
    if action is Action.APPLY:
        return DocState("indexed", content_hash, version)
    if action is Action.DELETE:
        return DocState("deleted", None, version)
    if action is Action.NOOP and version != (state.source_version if state else None):
        return (
            DocState("deleted", None, version)
            if state is None
            else DocState(state.status, state.content_hash, version)
        )
    return state
