"""A relation's belief history: the intervals ``relation_history`` holds, oldest first.

Each interval is a state the relation was believed in (``current`` or ``superseded``, with
what superseded it and how) from ``t_created`` until ``t_expired`` (open: still believed).
A gap between two intervals is a time it was not believed at all (retracted, then asserted
again). History is append-only, so what this returns for an instant never changes later.
Columns are named, never ``*``: the table gains columns as the realm layout grows.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.query_service.db import table
from tidegraph.store import RealmInfo

_RELATION = (
    "SELECT r.id, r.space, es.name, r.predicate, eo.name, r.negated, r.valid_from, r.valid_to,"
    " r.status, r.superseded_by, r.superseded_via, r.t_created, r.t_expired"
    " FROM {rel} r JOIN {ent} es ON es.id = r.subject_id JOIN {ent} eo ON eo.id = r.object_id"
    " WHERE r.id = %(id)s"
)
_INTERVALS = (
    "SELECT h.state, h.superseded_by, h.superseded_via, h.t_created, h.t_expired"
    " FROM {hist} h WHERE h.relation_id = %(id)s ORDER BY h.t_created"
)


async def relation_history(
    conn: AsyncConnection[Any], meta: RealmInfo, relation_id: int
) -> dict[str, Any] | None:
    """``{"relation": …, "history": [...]}`` for the relation, ``None`` when the realm has no
    relation of that id."""
    schema = meta.schema
    params = {"id": relation_id}
    cur = await conn.execute(
        sql.SQL(_RELATION).format(rel=table(schema, "relations"), ent=table(schema, "entities")),
        params,
    )
    row = await cur.fetchone()
    if row is None:
        return None
    rid, space, subject, predicate, object_, negated, vf, vt, status, by, via, tc, te = row
    cur = await conn.execute(
        sql.SQL(_INTERVALS).format(hist=table(schema, "relation_history")), params
    )
    intervals = [
        {
            "state": state,
            "superseded_by": _id(by_),
            "superseded_via": via_,
            "t_created": created,
            "t_expired": expired,
        }
        for state, by_, via_, created, expired in await cur.fetchall()
    ]
    relation = {
        "id": str(rid),
        "space": space,
        "subject": subject,
        "predicate": predicate,
        "object": object_,
        "negated": bool(negated),
        "valid_from": vf,
        "valid_to": vt,
        "status": status,
        "superseded_by": _id(by),
        "superseded_via": via,
        "t_created": tc,
        "t_expired": te,
    }
    return {"relation": relation, "history": intervals}


def _id(value: object) -> str | None:
    return None if value is None else str(value)
