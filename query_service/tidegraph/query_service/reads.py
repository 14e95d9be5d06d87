"""The non-retrieval reads: realm summaries, change feed pages, document state, relation and
entity listings.

Change pages follow DESIGN invariant 7. Every write transaction draws the realm's next
commit sequence under the ``meta`` row lock, so commits become visible in sequence order; a
page is read in one REPEATABLE READ snapshot together with the head sequence, and never
splits a commit, so paging by ``after_seq = next_seq`` is gap-free and duplicate-free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from psycopg import AsyncConnection, sql

from tidegraph.query_service.channels import (
    Scope,
    alias_rows,
    documents,
    edge_filter,
    entity_columns,
    ents,
    parameters,
    rels,
)
from tidegraph.query_service.db import table
from tidegraph.schemas.changes import GraphChange, change_id
from tidegraph.schemas.names import ANY_SPACE, name_key
from tidegraph.store.realms import RealmInfo, realm_exists


@dataclass(frozen=True)
class ChangesPage:
    """One page of the change feed."""

    changes: list[dict[str, Any]]
    """``GraphChange`` JSON objects, in (seq, index) order."""
    next_seq: int
    """Pass as ``after_seq`` to read on; equals ``head_seq`` once caught up."""
    head_seq: int
    """The realm's latest commit sequence at the time of the read."""


def change_from_row(realm: str, row: tuple[Any, ...]) -> GraphChange:
    """An outbox row ``(seq, idx, kind, space, belief_time, payload)`` as a ``GraphChange``."""
    seq, idx, kind, space, belief_time, payload = row
    body = {k: v for k, v in (payload or {}).items() if v is not None}
    return GraphChange.model_validate(
        {
            **body,
            "id": change_id(realm, int(seq), int(idx)),
            "realm": realm,
            "space": space,
            "seq": int(seq),
            "belief_time": belief_time,
            "kind": kind,
        }
    )


def change_json(change: GraphChange) -> dict[str, Any]:
    """The JSON object exactly as published on the changes topic."""
    result: dict[str, Any] = orjson.loads(change.to_json())
    return result


OUTBOX_COLUMNS = sql.SQL("seq, idx, kind, space, belief_time, payload")


async def changes_page(
    conn: AsyncConnection[Any],
    meta: RealmInfo,
    *,
    after_seq: int | None,
    since: datetime | None,
    limit: int,
) -> ChangesPage:
    """Whole commits after ``after_seq`` (or believed after ``since``), at most ``limit``
    changes unless a single commit is larger (then that commit alone)."""
    outbox = table(meta.schema, "outbox")
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur = await conn.execute(sql.SQL("SELECT seq FROM {}").format(table(meta.schema, "meta")))
        head_row = await cur.fetchone()
        head = int(head_row[0]) if head_row else 0
        if since is not None:
            where = sql.SQL("belief_time > %(since)s AND seq <= %(head)s")
            start = 0
        else:
            where = sql.SQL("seq > %(after)s AND seq <= %(head)s")
            start = after_seq or 0
        params = {"since": since, "after": start, "head": head, "n": limit + 1}
        cur = await conn.execute(
            sql.SQL("SELECT {} FROM {} WHERE {} ORDER BY seq, idx LIMIT %(n)s").format(
                OUTBOX_COLUMNS, outbox, where
            ),
            params,
        )
        rows = list(await cur.fetchall())
        if len(rows) > limit:
            last = int(rows[limit - 1][0]) if limit > 0 else int(rows[0][0])
            whole = [r for r in rows[:limit] if int(r[0]) != last or int(rows[limit][0]) != last]
            if not whole:  # one commit larger than the page: return it whole
                cur = await conn.execute(
                    sql.SQL("SELECT {} FROM {} WHERE seq = %(s)s ORDER BY idx").format(
                        OUTBOX_COLUMNS, outbox
                    ),
                    {"s": last},
                )
                whole = list(await cur.fetchall())
            rows = whole
            next_seq = int(rows[-1][0])
        else:
            next_seq = max(head, start)
    changes = [change_json(change_from_row(meta.realm, r)) for r in rows]
    return ChangesPage(changes, next_seq, head)


async def realm_summaries(
    conn: AsyncConnection[Any], realms: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """Counts and head sequence of each ``(realm, schema)`` that holds a realm, in one
    statement over all of them (a registered realm whose schema is gone is left out)."""
    present = [(r, s) for r, s in realms if await realm_exists(conn, s)]
    if not present:
        return []
    union = sql.SQL(" UNION ALL ").join(
        sql.SQL(
            "SELECT {realm}, m.embedder, m.seq,"
            " (SELECT count(*) FROM {docs} WHERE status = 'indexed'),"
            " (SELECT count(*) FROM {ents} WHERE dormant_since IS NULL),"
            " (SELECT count(*) FROM {rels} WHERE status = 'current')"
            " FROM {meta} m"
        ).format(
            realm=sql.Literal(realm),
            docs=table(schema, "documents"),
            ents=table(schema, "entities"),
            rels=table(schema, "relations"),
            meta=table(schema, "meta"),
        )
        for realm, schema in present
    )
    cur = await conn.execute(sql.SQL("{} ORDER BY 1").format(union))
    return [
        {
            "realm": realm,
            "embedder": embedder,
            "documents": int(docs),
            "entities": int(ents),
            "relations": int(rels),
            "head_seq": int(seq),
        }
        for realm, embedder, seq, docs, ents, rels in await cur.fetchall()
    ]


async def document_state(
    conn: AsyncConnection[Any],
    meta: RealmInfo,
    space: str,
    doc_key: str,
    believed_at: datetime | None = None,
) -> dict[str, Any] | None:
    """The contract's document status object (of the version held at ``believed_at``
    when given), or ``None`` when unknown (then)."""
    scope = Scope(space, None, believed_at, False, None)
    cur = await conn.execute(
        sql.SQL(
            "SELECT status, content_hash, source_version, order_key, chunk_count, indexed_at,"
            " error, title FROM {} d WHERE space = %(space)s AND doc_key = %(doc_key)s"
        ).format(documents(meta.schema, scope)),
        {"space": space, "doc_key": doc_key, "believed": believed_at},
    )
    row = await cur.fetchone()
    if row is None:
        return None
    status, content_hash, source_version, order_key, chunks, indexed_at, error, title = row
    return {
        "doc_key": doc_key,
        "space": space,
        "status": status,
        "content_hash": content_hash,
        "source_version": source_version,
        "order_key": order_key,
        "chunks": int(chunks),
        "indexed_at": indexed_at,
        "error": error,
        "title": title,
    }


async def list_relations(
    conn: AsyncConnection[Any],
    meta: RealmInfo,
    scope: Scope,
    *,
    subject: str | None,
    predicate: str | None,
    object_: str | None,
    after_id: int,
    limit: int,
) -> list[dict[str, Any]]:
    """Relations passing the same filter retrieval uses, by id, with names and provenance,
    as believed (at ``scope.believed_at`` when given: the relation, its ends' names and
    every field as that instant's read reported them)."""
    conds: list[sql.Composable] = [sql.SQL("r.id > %(after_id)s")]
    if subject is not None:
        conds.append(sql.SQL("es.name_key = %(subject)s"))
    if object_ is not None:
        conds.append(sql.SQL("eo.name_key = %(object)s"))
    if predicate is not None:
        conds.append(sql.SQL("r.predicate = %(predicate)s"))
    query = sql.SQL("{} ORDER BY r.id LIMIT %(limit)s").format(
        relations_listed(meta.schema, scope, conds)
    )
    params = parameters(
        scope,
        subject=None if subject is None else name_key(subject),
        object=None if object_ is None else name_key(object_),
        predicate=predicate,
        after_id=after_id,
        limit=limit,
    )
    cur = await conn.execute(query, params)
    return [relation_record(row) for row in await cur.fetchall()]


def relations_listed(schema: str, scope: Scope, conds: list[sql.Composable]) -> sql.Composed:
    """``SELECT`` of the relations passing the edge filter and ``conds`` (over ``r``, and
    the ends ``es`` and ``eo``) as the listing reports them (:func:`relation_record`),
    then ``subject_id`` and ``object_id``; unordered."""
    where = sql.SQL(" AND ").join([edge_filter(schema, scope), *conds])
    return sql.SQL(
        "SELECT r.id, r.space, es.name, r.predicate, eo.name, r.negated, r.valid_from,"
        " r.valid_to, r.t_created, r.t_expired, r.status, r.superseded_by, r.superseded_via,"
        " r.weight, r.doc_keys, r.subject_id, r.object_id FROM {rel} r"
        " JOIN {ent} es ON es.id = r.subject_id JOIN {ent} eo ON eo.id = r.object_id"
        " WHERE {where}"
    ).format(rel=rels(schema, scope), ent=ents(schema, scope), where=where)


def relation_record(row: Sequence[Any]) -> dict[str, Any]:
    """A row of :func:`relations_listed` as the relation listing's object."""
    rid, sp, subj, pred, obj, neg, vf, vt, tc, te, state_, by, via, w, docs = row[:15]
    return {
        "id": str(rid),
        "space": sp,
        "subject": subj,
        "predicate": pred,
        "object": obj,
        "negated": bool(neg),
        "valid_from": vf,
        "valid_to": vt,
        "t_created": tc,
        "t_expired": te,
        "status": state_,
        "superseded_by": str(by) if by else None,
        "superseded_via": via,
        "weight": int(w),
        "doc_keys": list(docs),
    }


async def list_entities(
    conn: AsyncConnection[Any],
    meta: RealmInfo,
    *,
    name: str | None,
    space: str,
    include_dormant: bool,
    after_id: int,
    limit: int,
    include_archived: bool = False,
    believed_at: datetime | None = None,
) -> list[dict[str, Any]]:
    """Entities by id, live ones unless asked (dormant, archived); with ``name``, a ranked
    lookup instead (:func:`_name_lookup`). At ``believed_at``: the entities as that
    instant's read saw them — those that existed then, live then unless asked, with the
    names, aliases and attributes they had then (and found by them)."""
    s = meta.schema
    scope = Scope(space, None, believed_at, False, None)
    conds: list[sql.Composable] = []
    if space != ANY_SPACE:
        conds.append(sql.SQL("e.space = %(space)s"))
    for column, included in (
        ("dormant_since", include_dormant),
        ("archived_since", include_archived),
    ):
        if not included:
            conds.append(sql.SQL("e.{} IS NULL").format(sql.Identifier(column)))
    listed = ENTITY_LISTED
    params = {"after_id": after_id, "space": space, "limit": limit, "believed": believed_at}
    if name is None:
        conds.append(sql.SQL("e.id > %(after_id)s"))
        query = sql.SQL(
            "SELECT {cols} FROM {ent} e WHERE {conds} ORDER BY e.id LIMIT %(limit)s"
        ).format(cols=listed, ent=ents(s, scope), conds=sql.SQL(" AND ").join(conds))
    else:
        prefix = _prefix_query(name)
        query = _name_lookup(s, scope, conds, bool(prefix), listed)
        params |= {"name": name_key(name), "prefix": prefix}
    cur = await conn.execute(query, params)
    return [entity_record(row) for row in await cur.fetchall()]


ENTITY_LISTED = sql.SQL("{}, e.dormant_since, e.archived_since").format(entity_columns())
"""The columns of an entity row ``e`` the listing reports (:func:`entity_record`)."""


def entity_record(row: Sequence[Any]) -> dict[str, Any]:
    """A row of :data:`ENTITY_LISTED` as the entity listing's object."""
    i, sp, n, t, d, a, ds, ars = row[:8]
    return {
        "id": str(i),
        "space": sp,
        "name": n,
        "type": t,
        "description": d,
        "aliases": list(a),
        "dormant_since": ds,
        "archived_since": ars,
    }


_PREFIX_WORD = re.compile(r"[^\W_]+")


def _prefix_query(name: str) -> str:
    """``to_tsquery`` text: every word of ``name`` as a prefix (``ada:* & lov:*``); words
    are letters and digits only, so nothing in it is tsquery syntax."""
    return " & ".join(f"{w}:*" for w in _PREFIX_WORD.findall(name_key(name)))


def _name_lookup(
    schema: str,
    scope: Scope,
    conds: list[sql.Composable],
    prefixed: bool,
    cols: sql.Composable,
) -> sql.Composed:
    """Entities whose name or an alias equals ``%(name)s`` or has words starting with its
    words (``Ada`` finds *Ada Lovelace*, ``lovel`` too, and the alias *Ada King*): through
    the word-prefix indexes now; at a belief instant over the names and aliases held then
    (a scan of the history open at that instant). Ranked: exact name, exact alias, then a
    name, then an alias, that begins with the whole query as a word, that begins with it at
    all, and that merely has words starting with it; shorter names first within a rank."""
    ent, alias = ents(schema, scope), alias_rows(schema, scope)
    rank = (
        "CASE WHEN {col} = %(name)s THEN 0 WHEN starts_with({col}, %(name)s || ' ') THEN 1"
        " WHEN starts_with({col}, %(name)s) THEN 2 ELSE 3 END"
    )
    where = sql.SQL(" AND ").join([sql.SQL("true"), *conds])
    branches = [
        sql.SQL("SELECT e.id, 0 AS rank FROM {ent} e WHERE e.name_key = %(name)s"),
        sql.SQL("SELECT a.entity_id, 1 FROM {alias} a WHERE a.alias_lower = %(name)s"),
    ]
    if prefixed:
        branches += [
            sql.SQL(
                "SELECT e.id, 2 * ({name_rank}) FROM {ent} e"
                " WHERE to_tsvector('simple', e.name_key) @@ to_tsquery('simple', %(prefix)s)"
            ),
            sql.SQL(
                "SELECT a.entity_id, 2 * ({alias_rank}) + 1 FROM {alias} a"
                " WHERE to_tsvector('simple', a.alias_lower) @@ to_tsquery('simple', %(prefix)s)"
            ),
        ]
    return sql.SQL(
        "WITH hits AS ({branches})"
        " SELECT {cols} FROM (SELECT id, min(rank) AS rank FROM hits GROUP BY id) h"
        " JOIN {ent} e ON e.id = h.id WHERE {where}"
        " ORDER BY h.rank, length(e.name), e.id LIMIT %(limit)s"
    ).format(
        branches=sql.SQL(" UNION ALL ").join(
            b.format(
                ent=ent,
                alias=alias,
                name_rank=sql.SQL(rank).format(col=sql.SQL("e.name_key")),
                alias_rank=sql.SQL(rank).format(col=sql.SQL("a.alias_lower")),
            )
            for b in branches
        ),
        ent=ent,
        cols=cols,
        where=where,
    )
