"""The competing scopes a reconciliation must see beyond its pairs.

Reconciliation decides supersession per ordered pair; a functional predicate adds rivals on
other pairs: every relation with that predicate sharing its functional end (paper §5.2
extended; :mod:`tidegraph.indexer.graph.supersession`). So does every other predicate in a
realm that asks the model about the residue (``residue``): the relations sharing its
subject and predicate, except for symmetric predicates. For the touched pairs' relations
with such a predicate this loads, in the same round trip as the pairs themselves:

- the **scope**: every relation with that predicate and that end — their states may
  change, and each has all its rivals loaded (its pair's relations, below, and the scope);
- the **context**: every other relation on the scope's pairs, so a scope relation's pair
  rivals (a denial, an exclusive group) count. Their own states are not decided here.

These rows' provenance is not touched by the write (it would have put their pairs among
the touched ones), so their stored weight, order and period are current: no provenance is
read. A realm without functional predicates that does not ask the model sends nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, NamedTuple

from psycopg import AsyncCursor

from tidegraph.indexer.write.context import WriteContext
from tidegraph.schemas import FunctionalSide


class Scoped(NamedTuple):
    """A relation outside the touched pairs that reconciliation needs."""

    id: int
    space: str
    subject_id: int
    predicate: str
    object_id: int
    negated: bool
    live: bool
    """It has a contributing chunk (``weight > 0``)."""
    order_key: str | None
    valid: tuple[str | None, str | None]
    """Stated period (valid_from, valid_to)."""
    state: str | None
    """Its belief state (``retracted`` included)."""
    superseded_by: int | None
    superseded_via: str | None
    in_scope: bool
    """In a touched functional scope (its state is decided); else context only."""


@dataclass(frozen=True)
class PendingScope:
    """The scope query, sent; read with :meth:`rows` once the pair queries are read."""

    cursor: AsyncCursor[Any] | None

    async def rows(self, ctx: WriteContext) -> list[Scoped]:
        if self.cursor is None:
            return []
        return [
            Scoped(
                int(r[0]),
                str(r[1]),
                int(r[2]),
                str(r[3]),
                int(r[4]),
                bool(r[5]),
                bool(r[6]),
                r[7],
                (r[8], r[9]),
                r[10],
                int(r[11]) if r[11] is not None else None,
                r[12],
                bool(r[13]),
            )
            for r in await ctx.fetch(self.cursor)
        ]


async def send_functional_scope(
    ctx: WriteContext,
    pairs: str,
    params: Sequence[Any],
    functional: Mapping[str, FunctionalSide],
    residue: AbstractSet[str] | None = None,
) -> PendingScope:
    """Send the query for the scopes of the relations on ``pairs`` (a ``WITH pairs AS (…)``
    clause of (space, subject_id, object_id) taking ``params``), leaving out those
    relations themselves (the caller also drops any row it loaded otherwise).

    ``residue`` is ``None`` unless the realm asks the model; then it names the predicates
    that stay out of the residue (the symmetric ones) and every other non-functional
    predicate competes by subject."""
    if not functional and residue is None:
        return PendingScope(None)
    by_subject = sorted(p for p, side in functional.items() if side == "subject")
    by_object = sorted(p for p, side in functional.items() if side == "object")
    excluded = sorted({*functional, *(residue or ())})
    cursor = await ctx.send(
        pairs + ", touched AS (SELECT r.id, r.space, r.subject_id, r.predicate, r.object_id"
        "  FROM {relations} r JOIN pairs USING (space, subject_id, object_id)"
        "  WHERE NOT r.negated),"
        " scope AS (SELECT r.id, r.space, r.subject_id, r.object_id FROM {relations} r"
        "  JOIN (SELECT DISTINCT space, subject_id, predicate FROM touched"
        "   WHERE predicate = ANY(%s) OR (%s AND predicate <> ALL(%s)))"
        "   k USING (space, subject_id, predicate)"
        "  WHERE NOT r.negated"
        "  UNION SELECT r.id, r.space, r.subject_id, r.object_id FROM {relations} r"
        "  JOIN (SELECT DISTINCT space, object_id, predicate FROM touched"
        "   WHERE predicate = ANY(%s)) k USING (space, object_id, predicate)"
        "  WHERE NOT r.negated)"
        " SELECT r.id, r.space, r.subject_id, r.predicate, r.object_id, r.negated,"
        "  r.weight > 0, r.order_key, r.valid_from, r.valid_to, r.status, r.superseded_by,"
        "  r.superseded_via, r.id IN (SELECT id FROM scope)"
        " FROM {relations} r"
        " JOIN (SELECT DISTINCT space, subject_id, object_id FROM scope) q"
        "  USING (space, subject_id, object_id)"
        " WHERE NOT EXISTS (SELECT 1 FROM pairs x WHERE x.space = r.space"
        "  AND x.subject_id = r.subject_id AND x.object_id = r.object_id)"
        " ORDER BY r.id",
        (*params, by_subject, residue is not None, excluded, by_object),
    )
    return PendingScope(cursor)
