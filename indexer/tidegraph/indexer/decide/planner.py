"""The decide loop, once for every driver: records of one realm → what each means.

The live consumer plans each poll with a fresh :class:`Planner` (stored states are read
again, so a restart or another owner's writes are seen); a replay keeps one for the whole
load, so the next fetch is decided while the current one is written. Both fold the same
:func:`~tidegraph.indexer.decide.fold.decide` and
:func:`~tidegraph.indexer.decide.fold.next_state` in log order, and the writer stores the
states folded here, so where a poll or a batch ends changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from tidegraph.indexer.decide.fold import Action, DocState, decide, next_state
from tidegraph.indexer.decide.states import load_states
from tidegraph.schemas import DocumentVersion


@dataclass(frozen=True)
class Logged:
    """A decoded record where the log holds it."""

    offset: int
    log_time: datetime
    """Log-append time: the earliest belief instant a write of it may take."""
    record: DocumentVersion


@dataclass(frozen=True)
class Decision:
    """One record and what applying it means to its realm."""

    logged: Logged
    action: Action
    previous: DocState | None
    """The document's state before the record (``None``: the realm never held it)."""
    state: DocState | None
    """The state after it: what the writer stores."""

    @property
    def record(self) -> DocumentVersion:
        return self.logged.record

    @property
    def offset(self) -> int:
        return self.logged.offset

    @property
    def writes(self) -> bool:
        """Applies or deletes a version (draws a sequence number); else only the document's
        remembered version may move."""
        return self.action in (Action.APPLY, Action.DELETE)

    @property
    def version_moved(self) -> bool:
        """A record that writes nothing still raised the highest version seen."""
        before = self.previous.source_version if self.previous else None
        after = self.state.source_version if self.state else None
        return after != before


class Planner:
    """Decides the records of one realm schema, remembering the states it folded."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._states: dict[tuple[str, str], DocState | None] = {}

    def forget(self) -> None:
        """Drop the remembered states (a rollback may have left them ahead)."""
        self._states.clear()

    async def decide(self, conn: AsyncConnection[Any], logged: Sequence[Logged]) -> list[Decision]:
        """Decide ``logged`` (one realm's records, in log order)."""
        unknown = {
            (lg.record.space, lg.record.doc_key)
            for lg in logged
            if (lg.record.space, lg.record.doc_key) not in self._states
        }
        if unknown:
            stored = await load_states(conn, self.schema, unknown)
            self._states.update({key: stored.get(key) for key in unknown})
        out: list[Decision] = []
        for lg in logged:
            rec = lg.record
            key = (rec.space, rec.doc_key)
            before = self._states[key]
            action = decide(rec.op, rec.version_hash, rec.source_version, before)
            after = next_state(action, rec.version_hash, rec.source_version, before)
            self._states[key] = after
            out.append(Decision(lg, action, before, after))
        return out
