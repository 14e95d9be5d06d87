"""A subscriber's position in a realm's change feed, held by the caller.

Changes are identified by ``realm:seq:index``; the feed delivers them in (seq, index)
order, and both the HTTP feed and the topic repeat nothing a position already covers. A
caller that stores the position of the last change it has finished with (or simply that
change's ``id``) and resumes from it receives every later change exactly once, whether
the process stopped between commits or in the middle of one.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidegraph.schemas import GraphChange


@dataclass(frozen=True)
class Position:
    """Everything up to and including this point has been consumed."""

    seq: int
    """Commit sequence number of the last change consumed (0: nothing yet)."""
    index: int | None = None
    """Its index inside the commit; ``None`` when commit ``seq`` was consumed whole."""

    def __str__(self) -> str:
        return f"{self.seq}" if self.index is None else f"{self.seq}:{self.index}"

    @classmethod
    def after(cls, after_seq: int = 0, after_id: str | None = None) -> Position:
        """From ``after_seq`` (whole commits) or from a change id (wins when given)."""
        if after_id is None:
            return cls(after_seq)
        _, seq, index = after_id.rsplit(":", 2)
        return cls(int(seq), int(index))

    @classmethod
    def of(cls, change: GraphChange) -> Position:
        """The position just after ``change``."""
        return cls.after(after_id=change.id)

    @property
    def page_after_seq(self) -> int:
        """The ``after_seq`` to ask the HTTP feed for: a commit consumed in part is read
        again and its consumed changes skipped."""
        return self.seq if self.index is None else self.seq - 1

    def admits(self, change: GraphChange) -> bool:
        """Whether ``change`` comes after this position (a repeat or an older one does not)."""
        pos = Position.of(change)
        if pos.seq != self.seq:
            return pos.seq > self.seq
        return self.index is not None and pos.index is not None and pos.index > self.index


def later(a: Position, b: Position) -> Position:
    """The further of two positions (a commit consumed whole is past any of its changes)."""

    def order(p: Position) -> tuple[int, float]:
        return (p.seq, float("inf") if p.index is None else p.index)

    return a if order(a) >= order(b) else b
