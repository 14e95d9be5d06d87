"""Compare two realm schemas by names, and say what changed as change-feed entries.

Ids are local to a schema (a rebuild numbers rows afresh, rolled-back writes leave gaps in
the live one), so nothing here compares ids: documents are keyed by ``(space, doc_key)``,
entities by ``(space, name_key)``, relations by ``(space, subject key, predicate,
object key, negated)``, and a superseded relation names its superseder the same way.

Each kind is projected on both sides to ``(key text[], value jsonb, ref jsonb)`` and the
two projections are joined inside PostgreSQL, so only differing rows cross the wire. The
same query serves ``tidegraph diff`` and the replay swap (which must compute what the
rebuild changed while the live realm is held, so it has to be cheap). ``ref`` carries what
a change-feed entry needs (ids, display names) and is never compared.

Communities are compared by the current build: each community keyed by its space, level
and the names of its members (ids and report wording aside), with its size and its parent's
members. ``history=True`` adds the belief record: every ``relation_history``,
``entity_history`` and ``document_history`` interval (an entity's keyed by its present
name) with every value it holds, and every
chunk's ``t_created``/``t_expired`` (chunks keyed with their document version's hash: two
versions logged in the same millisecond share a belief instant), plus the belief stamps on
entities and documents. A
replay of an unchanged configuration reproduces those exactly (DESIGN invariant 6).
"""

# Long on purpose: one table of kinds: each kind's projection and its wording as feed entries
# change together.
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, LiteralString

from psycopg import AsyncConnection, sql

from tidegraph.schemas import ChangeKind, is_realm, realm_schema
from tidegraph.store import RealmSchemaError, realm_exists

__all__ = [
    "KINDS",
    "Difference",
    "changed_since",
    "diff_schemas",
    "feed_changes",
    "format_difference",
    "merge_keys",
    "patch",
    "resolve_schema",
]

KINDS: tuple[str, ...] = ("document", "entity", "relation")
"""What the feed can tell of: what a swap compares."""
COMMUNITY_KINDS: tuple[str, ...] = ("community",)
"""The current community build, each community keyed by its level and its members' names:
``diff_schemas`` compares it by default after :data:`KINDS`."""
HISTORY_KINDS: tuple[str, ...] = ("relation_history", "entity_history", "document_history", "chunk")
"""Added with ``history=True``."""


@dataclass(frozen=True)
class Difference:
    """One object that is not the same on both sides."""

    kind: str
    """``document``, ``entity``, ``relation``, ``relation_history``, ``entity_history`` or
    ``chunk``."""
    key: tuple[str, ...]
    """The object's identity by names (see the module docstring)."""
    left: dict[str, Any] | None
    """Compared fields on side A; ``None`` when only B has it."""
    right: dict[str, Any] | None
    """Compared fields on side B; ``None`` when only A has it."""
    left_ref: dict[str, Any] | None = None
    """Ids and names on side A (not compared)."""
    right_ref: dict[str, Any] | None = None
    """Ids and names on side B (not compared)."""

    @property
    def space(self) -> str:
        return self.key[0]


# Each projection yields (k text[], v jsonb, ref jsonb) for schema {s}: a SELECT list and
# two FROM clauses, one over the whole schema (%(space)s filters when not NULL) and one over
# given keys (%(k0)s … arrays, one per key part) that reaches rows through the unique
# indexes, so comparing a handful of objects costs a handful of index probes (entity ids
# are resolved first — OFFSET 0 keeps the planner from walking every relation of a
# subject instead of probing the relation's unique key).
# {hist} switches belief stamps on (a boolean literal).

_DOCUMENTS: LiteralString = """
SELECT ARRAY[d.space, d.doc_key] AS k,
       jsonb_build_object('status', d.status, 'content_hash', d.content_hash,
         'source_version', d.source_version, 'order_key', d.order_key, 'title', d.title,
         'chunk_count', d.chunk_count, 'error', d.error)
       || CASE WHEN {hist} THEN jsonb_build_object('indexed_at', d.indexed_at)
          ELSE '{{}}'::jsonb END AS v,
       jsonb_build_object('doc_key', d.doc_key, 'error', d.error) AS ref
"""
_DOCUMENTS_ALL: LiteralString = """
FROM {s}.documents d WHERE %(space)s::text IS NULL OR d.space = %(space)s
"""
_DOCUMENTS_KEYED: LiteralString = """
FROM unnest(%(k0)s::text[], %(k1)s::text[]) AS key(sp, dk)
JOIN {s}.documents d ON d.space = key.sp AND d.doc_key = key.dk
"""

_ENTITIES: LiteralString = """
SELECT ARRAY[e.space, e.name_key] AS k,
       jsonb_build_object('name', e.name, 'type', e.type, 'description', e.description,
         'aliases', (SELECT coalesce(jsonb_agg(a ORDER BY a), '[]') FROM unnest(e.aliases) a),
         'dormant', e.dormant_since IS NOT NULL)
       || CASE WHEN {hist} THEN jsonb_build_object('created_at', e.created_at,
            'dormant_since', e.dormant_since) ELSE '{{}}'::jsonb END AS v,
       jsonb_build_object('id', e.id::text, 'name', e.name, 'type', e.type,
         'description', e.description,
         'aliases', (SELECT coalesce(jsonb_agg(a ORDER BY a), '[]') FROM unnest(e.aliases) a))
         AS ref
"""
_ENTITIES_ALL: LiteralString = """
FROM {s}.entities e WHERE %(space)s::text IS NULL OR e.space = %(space)s
"""
_ENTITIES_KEYED: LiteralString = """
FROM unnest(%(k0)s::text[], %(k1)s::text[]) AS key(sp, ln)
JOIN {s}.entities e ON e.space = key.sp AND e.name_key = key.ln
"""


def _superseder(by: LiteralString) -> LiteralString:
    """The superseding relation named by its names (an index probe, only when set)."""
    return (
        "CASE WHEN " + by + " IS NULL THEN NULL ELSE (SELECT concat_ws(' ', xs.name,"
        " x.predicate, xo.name, CASE WHEN x.negated THEN '(denied)' END)"
        " FROM {s}.relations x JOIN {s}.entities xs ON xs.id = x.subject_id"
        " JOIN {s}.entities xo ON xo.id = x.object_id WHERE x.id = " + by + ") END"
    )


_RELATIONS: LiteralString = (
    """
SELECT ARRAY[r.space, es.name_key, r.predicate, eo.name_key, r.negated::text] AS k,
       jsonb_build_object('subject', es.name, 'object', eo.name, 'status', r.status,
         'superseded_by', """
    + _superseder("r.superseded_by")
    + """, 'superseded_via', r.superseded_via, 'weight', r.weight,
         'order_key', r.order_key, 'valid_from', r.valid_from, 'valid_to', r.valid_to,
         'description', r.description, 'confidence', r.confidence)
       || CASE WHEN {hist} THEN jsonb_build_object('t_created', r.t_created,
            't_expired', r.t_expired) ELSE '{{}}'::jsonb END AS v,
       jsonb_build_object('id', r.id::text, 'subject_id', r.subject_id::text,
         'object_id', r.object_id::text, 'subject', es.name, 'predicate', r.predicate,
         'object', eo.name, 'negated', r.negated, 'valid_from', r.valid_from,
         'valid_to', r.valid_to, 'superseded_by', r.superseded_by::text,
         'superseded_via', r.superseded_via) AS ref
"""
)
_RELATIONS_ALL: LiteralString = """
FROM {s}.relations r
JOIN {s}.entities es ON es.id = r.subject_id
JOIN {s}.entities eo ON eo.id = r.object_id
WHERE %(space)s::text IS NULL OR r.space = %(space)s
"""
_RELATIONS_KEYED: LiteralString = """
FROM (
  SELECT key.sp, key.p, key.n::boolean AS n, ks.id AS sid, ko.id AS oid
  FROM unnest(%(k0)s::text[], %(k1)s::text[], %(k2)s::text[], %(k3)s::text[], %(k4)s::text[])
    AS key(sp, sn, p, obn, n)
  JOIN {s}.entities ks ON ks.space = key.sp AND ks.name_key = key.sn
  JOIN {s}.entities ko ON ko.space = key.sp AND ko.name_key = key.obn
  OFFSET 0
) AS key
JOIN {s}.relations r ON r.space = key.sp AND r.subject_id = key.sid AND r.predicate = key.p
  AND r.object_id = key.oid AND r.negated = key.n
JOIN {s}.entities es ON es.id = r.subject_id
JOIN {s}.entities eo ON eo.id = r.object_id
"""

_RELATION_HISTORY: LiteralString = (
    """
SELECT ARRAY[r.space, es.name_key, r.predicate, eo.name_key, r.negated::text,
             h.t_created::text] AS k,
       jsonb_build_object('state', h.state, 'superseded_by', """
    + _superseder("h.superseded_by")
    + """, 'superseded_via', h.superseded_via, 't_expired', h.t_expired,
         'subject', (SELECT x.name FROM {s}.entities x WHERE x.id = h.subject_id),
         'object', (SELECT x.name FROM {s}.entities x WHERE x.id = h.object_id),
         'weight', h.weight, 'order_key', h.order_key, 'valid_from', h.valid_from,
         'valid_to', h.valid_to, 'doc_keys', to_jsonb(h.doc_keys), 'expired', h.expired)
         AS v,
       jsonb_build_object('id', r.id::text) AS ref
"""
)
_RELATION_HISTORY_ALL: LiteralString = """
FROM {s}.relation_history h
JOIN {s}.relations r ON r.id = h.relation_id
JOIN {s}.entities es ON es.id = r.subject_id
JOIN {s}.entities eo ON eo.id = r.object_id
WHERE %(space)s::text IS NULL OR r.space = %(space)s
"""

_ENTITY_HISTORY: LiteralString = """
SELECT ARRAY[e.space, e.name_key, h.t_created::text] AS k,
       jsonb_build_object('name', h.name, 'type', h.type, 'description', h.description,
         'aliases', (SELECT coalesce(jsonb_agg(a ORDER BY a), '[]') FROM unnest(h.aliases) a),
         'alias_keys', to_jsonb(h.alias_keys), 'dormant_since', h.dormant_since,
         'archived_since', h.archived_since, 't_expired', h.t_expired) AS v,
       jsonb_build_object('id', e.id::text) AS ref
"""
_ENTITY_HISTORY_ALL: LiteralString = """
FROM {s}.entity_history h
JOIN {s}.entities e ON e.id = h.entity_id
WHERE %(space)s::text IS NULL OR e.space = %(space)s
"""

_DOCUMENT_HISTORY: LiteralString = """
SELECT ARRAY[h.space, h.doc_key, h.t_created::text] AS k,
       jsonb_build_object('status', h.status, 'content_hash', h.content_hash,
         'source_version', h.source_version, 'order_key', h.order_key, 'title', h.title,
         'chunk_count', h.chunk_count, 'indexed_at', h.indexed_at, 'error', h.error,
         't_expired', h.t_expired) AS v,
       jsonb_build_object('doc_key', h.doc_key) AS ref
"""
_DOCUMENT_HISTORY_ALL: LiteralString = """
FROM {s}.document_history h WHERE %(space)s::text IS NULL OR h.space = %(space)s
"""

_COMMUNITIES: LiteralString = """
SELECT ARRAY[c.space, c.level::text, m.members] AS k,
       jsonb_build_object('size', c.size, 'parent', (SELECT pm.members FROM
         (SELECT string_agg(pe.name_key, ' | ' ORDER BY pe.name_key) AS members
          FROM {s}.community_members x JOIN {s}.entities pe ON pe.id = x.entity_id
          WHERE x.community_id = c.parent_id) pm)) AS v,
       jsonb_build_object('id', c.id::text, 'title', c.title) AS ref
"""
_COMMUNITIES_ALL: LiteralString = """
FROM {s}.communities c
CROSS JOIN LATERAL (SELECT string_agg(e.name_key, ' | ' ORDER BY e.name_key) AS members
  FROM {s}.community_members x JOIN {s}.entities e ON e.id = x.entity_id
  WHERE x.community_id = c.id) m
WHERE c.t_expired IS NULL AND (%(space)s::text IS NULL OR c.space = %(space)s)
"""

_CHUNKS: LiteralString = """
SELECT ARRAY[c.space, c.doc_key, c.ordinal::text, c.t_created::text, c.content_hash] AS k,
       jsonb_build_object('text_md5', md5(c.text), 't_expired', c.t_expired) AS v,
       jsonb_build_object('id', c.id::text) AS ref
"""
_CHUNKS_ALL: LiteralString = """
FROM {s}.chunks c WHERE %(space)s::text IS NULL OR c.space = %(space)s
"""

_PROJECTIONS: dict[str, tuple[LiteralString, LiteralString, LiteralString | None]] = {
    "document": (_DOCUMENTS, _DOCUMENTS_ALL, _DOCUMENTS_KEYED),
    "entity": (_ENTITIES, _ENTITIES_ALL, _ENTITIES_KEYED),
    "relation": (_RELATIONS, _RELATIONS_ALL, _RELATIONS_KEYED),
    "relation_history": (_RELATION_HISTORY, _RELATION_HISTORY_ALL, None),
    "entity_history": (_ENTITY_HISTORY, _ENTITY_HISTORY_ALL, None),
    "document_history": (_DOCUMENT_HISTORY, _DOCUMENT_HISTORY_ALL, None),
    "chunk": (_CHUNKS, _CHUNKS_ALL, None),
    "community": (_COMMUNITIES, _COMMUNITIES_ALL, None),
}

_JOIN: LiteralString = """
WITH a AS ({a}), b AS ({b})
SELECT coalesce(a.k, b.k), a.v, b.v, a.ref, b.ref
FROM a FULL JOIN b ON a.k = b.k
WHERE a.v IS DISTINCT FROM b.v
ORDER BY 1
"""

Keys = Mapping[str, Collection[tuple[str, ...]]]
"""Objects by kind and key (see :class:`Difference`), to compare only those."""


def _projection(kind: str, schema: str, history: bool, keyed: bool) -> sql.Composed:
    select, whole, by_key = _PROJECTIONS[kind]
    source = by_key if keyed else whole
    if source is None:
        raise ValueError(f"{kind} cannot be compared by keys")
    return sql.SQL(select + source).format(s=sql.Identifier(schema), hist=sql.Literal(history))


async def diff_schemas(
    conn: AsyncConnection[Any],
    a: str,
    b: str,
    *,
    space: str | None = None,
    kinds: Sequence[str] | None = None,
    history: bool = False,
    keys: Keys | None = None,
) -> list[Difference]:
    """Every object that differs between schemas ``a`` and ``b``, ordered by kind and key;
    with ``keys``, only those objects (``document``, ``entity`` and ``relation`` only).

    Reads each kind in one statement; call inside a REPEATABLE READ transaction when both
    sides may be written meanwhile and a consistent answer matters.
    """
    default = KINDS + COMMUNITY_KINDS + (HISTORY_KINDS if history else ())
    chosen = tuple(kinds) if kinds is not None else default
    unknown = [k for k in chosen if k not in _PROJECTIONS]
    if unknown:
        raise ValueError(f"unknown kinds {unknown}; expected some of {sorted(_PROJECTIONS)}")
    out: list[Difference] = []
    for kind in chosen:
        params: dict[str, Any] = {"space": space}
        if keys is not None:
            wanted = sorted(keys.get(kind, ()))
            if not wanted:
                continue
            params.update({f"k{i}": [k[i] for k in wanted] for i in range(len(wanted[0]))})
        query = sql.SQL(_JOIN).format(
            a=_projection(kind, a, history, keys is not None),
            b=_projection(kind, b, history, keys is not None),
        )
        cur = await conn.execute(query, params)
        for key, left, right, left_ref, right_ref in await cur.fetchall():
            out.append(Difference(kind, tuple(key), left, right, left_ref, right_ref))
    return out


async def changed_since(conn: AsyncConnection[Any], schema: str, since: datetime) -> Keys:
    """Objects whose feed-visible state (document status, entity presence and dormancy,
    relation belief state) may have changed at or after belief instant ``since``.

    Every such change is a change-feed entry in the same transaction (DESIGN invariant 7),
    so the outbox names them all; ids are turned into today's names, since a name may
    have changed after the entry was written.
    """
    cur = await conn.execute(
        sql.SQL(
            "SELECT space, payload->>'doc_key', payload->'entity'->>'id',"
            " payload->'relation'->>'id' FROM {} WHERE belief_time >= %s"
        ).format(sql.Identifier(schema, "outbox")),
        (since,),
    )
    documents: set[tuple[str, ...]] = set()
    entity_ids: set[int] = set()
    relation_ids: set[int] = set()
    for space, doc_key, entity_id, relation_id in await cur.fetchall():
        if doc_key is not None:
            documents.add((space, doc_key))
        if entity_id is not None:
            entity_ids.add(int(entity_id))
        if relation_id is not None:
            relation_ids.add(int(relation_id))
    cur = await conn.execute(
        sql.SQL("SELECT space, name_key FROM {} WHERE id = ANY(%s)").format(
            sql.Identifier(schema, "entities")
        ),
        (sorted(entity_ids),),
    )
    entities = {tuple(r) for r in await cur.fetchall()}
    cur = await conn.execute(
        sql.SQL(
            "SELECT r.space, es.name_key, r.predicate, eo.name_key, r.negated::text"
            " FROM {r} r JOIN {e} es ON es.id = r.subject_id JOIN {e} eo ON eo.id = r.object_id"
            " WHERE r.id = ANY(%s)"
        ).format(r=sql.Identifier(schema, "relations"), e=sql.Identifier(schema, "entities")),
        (sorted(relation_ids),),
    )
    relations = {tuple(r) for r in await cur.fetchall()}
    return {"document": documents, "entity": entities, "relation": relations}


def merge_keys(*sets: Keys) -> dict[str, set[tuple[str, ...]]]:
    """The union of key sets, by kind."""
    out: dict[str, set[tuple[str, ...]]] = {}
    for keys in sets:
        for kind, found in keys.items():
            out.setdefault(kind, set()).update(found)
    return out


def patch(
    earlier: Iterable[Difference], keys: Keys, fresh: Iterable[Difference]
) -> list[Difference]:
    """``earlier`` with every object in ``keys`` replaced by its ``fresh`` comparison."""
    kept = [d for d in earlier if d.key not in keys.get(d.kind, ())]
    order = {kind: i for i, kind in enumerate(KINDS + COMMUNITY_KINDS + HISTORY_KINDS)}
    return sorted([*kept, *fresh], key=lambda d: (order[d.kind], d.key))


async def resolve_schema(conn: AsyncConnection[Any], name: str) -> str:
    """The schema ``name`` designates: realm ``name``'s schema, else a schema so named
    (a shadow, audit copy or retired realm) — either must hold a realm's ``meta`` table."""
    candidates = [name]
    if is_realm(name):
        candidates.insert(0, realm_schema(name))
    for schema in candidates:
        if await realm_exists(conn, schema):
            return schema
    raise RealmSchemaError(
        f"{name!r} is neither a realm nor a realm-shaped schema (a shadow, audit or retired "
        "copy) in this database"
    )


# -- presentation ----------------------------------------------------------------------


def _describe_key(d: Difference) -> str:
    k = d.key
    side = d.right or d.left or {}
    if d.kind == "document":
        return f"document {k[0]}/{k[1]}"
    if d.kind == "entity":
        return f"entity {k[0]}/{side.get('name', k[1])}"
    if d.kind in ("relation", "relation_history"):
        subject, obj = side.get("subject", k[1]), side.get("object", k[3])
        neg = " NOT" if k[4] == "true" else ""
        text = f"relation {k[0]}: {subject}{neg} {k[2]} {obj}"
        return text + (f" @ {k[5]}" if d.kind == "relation_history" else "")
    if d.kind == "entity_history":
        return f"entity {k[0]}/{side.get('name', k[1])} @ {k[2]}"
    if d.kind == "document_history":
        return f"document {k[0]}/{k[1]} @ {k[2]}"
    if d.kind == "community":
        return f"community {k[0]} level {k[1]}: {k[2]}"
    return f"chunk {k[0]}/{k[1]}#{k[2]} @ {k[3]} ({k[4]})"


def format_difference(d: Difference, a_label: str = "A", b_label: str = "B") -> str:
    """One line: what differs, ``a → b`` per field, or which side alone has it."""
    head = _describe_key(d)
    if d.left is None:
        return f"+ {head}  (only in {b_label}: {_brief(d.right)})"
    if d.right is None:
        return f"- {head}  (only in {a_label}: {_brief(d.left)})"
    fields = sorted(set(d.left) | set(d.right))
    changed = [
        f"{f}: {d.left.get(f)!r} → {d.right.get(f)!r}"
        for f in fields
        if d.left.get(f) != d.right.get(f)
    ]
    return f"~ {head}  ({'; '.join(changed)})"


def _brief(v: dict[str, Any] | None) -> str:
    if not v:
        return ""
    keep = ("status", "state", "dormant", "weight", "type", "content_hash", "t_expired", "size")
    return ", ".join(f"{k}={v[k]!r}" for k in keep if k in v)


# -- the change feed -------------------------------------------------------------------

FeedChange = tuple[str, str, dict[str, Any]]
"""``(kind, space, payload)`` as the writer appends to the outbox."""


def feed_changes(differences: Iterable[Difference]) -> list[FeedChange]:
    """What a consumer of the old realm's feed must be told to hold the rebuilt graph.

    ``left`` is the old graph, ``right`` the rebuilt one. Only what the feed can say is
    said: document status, entity presence and dormancy, relation belief state. Changed
    descriptions, weights or periods have no change kind and are left to the rebuild
    notice itself. Ids are the rebuilt realm's, except for an object the rebuild no
    longer has at all (then the retired schema's id, which nothing resolves any more).
    """
    docs: list[FeedChange] = []
    entities: list[FeedChange] = []
    relations: list[FeedChange] = []
    for d in differences:
        if d.kind == "document":
            docs.extend(_document_change(d))
        elif d.kind == "entity":
            entities.extend(_entity_changes(d))
        elif d.kind == "relation":
            relations.extend(_relation_changes(d))
    return docs + entities + relations


def _document_change(d: Difference) -> list[FeedChange]:
    old, new = d.left, d.right
    doc_key = d.key[1]
    if new is None:
        return [("document_deleted", d.space, {"doc_key": doc_key})]
    if old is not None and (old["status"], old["content_hash"]) == (
        new["status"],
        new["content_hash"],
    ):
        return []
    status = new["status"]
    if status == "deleted":
        return [("document_deleted", d.space, {"doc_key": doc_key})]
    if status == "failed":
        return [("document_failed", d.space, {"doc_key": doc_key, "error": new.get("error")})]
    replaced = old is not None and old["status"] in ("indexed", "failed")
    return [
        ("document_replaced" if replaced else "document_indexed", d.space, {"doc_key": doc_key})
    ]


ENTITY_ATTRIBUTES = ("name", "type", "description", "aliases")


def _entity_changes(d: Difference) -> list[FeedChange]:
    """What the writer would have said: added (every attribute), updated when an attribute
    differs, and dormancy moves."""
    ref = d.right_ref if d.right is not None else d.left_ref
    assert ref is not None
    brief = {"id": ref["id"], "name": ref["name"], "type": ref["type"]}
    full = {**brief, "description": ref.get("description"), "aliases": ref.get("aliases")}
    if d.left is None and d.right is not None:
        out: list[FeedChange] = [(ChangeKind.ENTITY_ADDED, d.space, {"entity": full})]
        if d.right["dormant"]:
            out.append((ChangeKind.ENTITY_DORMANT, d.space, {"entity": brief}))
        return out
    if d.right is None:
        assert d.left is not None
        if d.left["dormant"]:
            return []
        return [(ChangeKind.ENTITY_DORMANT, d.space, {"entity": brief})]
    assert d.left is not None
    out = []
    if any(d.left.get(k) != d.right.get(k) for k in ENTITY_ATTRIBUTES):
        out.append((ChangeKind.ENTITY_UPDATED, d.space, {"entity": full}))
    if d.left["dormant"] != d.right["dormant"]:
        kind = ChangeKind.ENTITY_DORMANT if d.right["dormant"] else ChangeKind.ENTITY_REVIVED
        out.append((kind, d.space, {"entity": brief}))
    return out


def _relation_changes(d: Difference) -> list[FeedChange]:
    have = _state(d.left)
    want = _state(d.right)
    if have == want:
        return []
    ref = d.right_ref if d.right_ref is not None else d.left_ref
    assert ref is not None
    relation = {
        k: ref.get(k)
        for k in (
            "id",
            "subject_id",
            "object_id",
            "subject",
            "predicate",
            "object",
            "negated",
            "valid_from",
            "valid_to",
        )
    }
    by = ref.get("superseded_by") if d.right_ref is not None else None
    via = ref.get("superseded_via") if d.right_ref is not None else None
    out: list[FeedChange] = []
    for kind in _transition(have[0], want[0]):
        payload: dict[str, Any] = {"relation": relation}
        if kind == "relation_superseded":
            payload["superseded_by"] = by
            payload["superseded_via"] = via
        out.append((kind, d.space, payload))
    return out


def _state(side: dict[str, Any] | None) -> tuple[Any, ...]:
    """A relation's belief state on one side of a difference (none: retracted)."""
    if side is None:
        return ("retracted", None, None)
    return (side["status"], side["superseded_by"], side.get("superseded_via"))


def _transition(have: str, want: str) -> list[str]:
    """Change kinds for a relation moving between belief states (as the writer names them)."""
    if want == "retracted":
        return ["relation_retracted"]
    if want == "current":
        return ["relation_restored" if have == "superseded" else "relation_added"]
    if have == "retracted":
        return ["relation_added", "relation_superseded"]
    return ["relation_superseded"]
