"""Relation statements of a write: edges and provenance, then belief-time reconciliation.

An edge row is born with everything its first contributions say (weight, order,
attributes) and believed current from the write's instant, which is what reconciliation
decides for nearly every new edge: it then writes nothing more to that row. Any later move
of its belief state touches no indexed column, and the table keeps free space on each page
(``fillfactor``), so it stays a heap-only update that never re-inserts the embedding into
the vector index — as long as the page's free space is not spent on extra versions of the
same rows within one transaction, which is why a new edge is not born in one state and
moved to another.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import Any, NamedTuple, cast

from psycopg.types.json import Jsonb

from tidegraph.indexer.extraction.prepared import PreparedDocument
from tidegraph.indexer.graph.rules import (
    LiveRelation,
    RelationAttrs,
    RelationState,
    desired_relation_states,
    merge_relation_attrs,
    period_bounds,
    relation_questions,
    render_relation,
)
from tidegraph.indexer.graph.supersession import Mechanism
from tidegraph.indexer.graph.symmetry import orient
from tidegraph.indexer.write.context import WriteContext
from tidegraph.indexer.write.contradictions import known_answers
from tidegraph.indexer.write.functional import send_functional_scope
from tidegraph.schemas.changes import ChangeKind
from tidegraph.schemas.names import name_key
from tidegraph.store.belief import RELATIONS

RelationKey = tuple[int, str, int, bool]
"""(subject id, predicate, object id, negated): one edge per key (corroboration)."""
State = RelationState
"""Belief state, the relation superseding it and by which mechanism."""
RETRACTED: State = ("retracted", None, None)


class _Move(NamedTuple):
    """A relation whose belief state changes in this transaction."""

    relation_id: int
    have: State
    want: State


Pair = tuple[str, int, int]
"""(space, subject id, object id): the unit reconciliation works on."""


async def attach_relations(
    ctx: WriteContext,
    doc: PreparedDocument,
    chunk_id: dict[int, int],
    ids: dict[str, int],
    bt: datetime,
    *,
    mentions: list[tuple[int, int]],
) -> set[Pair]:
    """One edge per (subject, predicate, object, negated); provenance per chunk. Returns
    the entity pairs the document's edges join, for :func:`reconcile_relations`.

    A symmetric predicate's statement goes to its unordered pair's edge, whichever way
    that is stored, or creates it oriented by
    :func:`~tidegraph.indexer.graph.symmetry.orient`: both directions are one edge.

    The document's ``mentions`` (chunk id, entity id) are inserted by the statement that
    looks its edges up: one statement less per write.

    Attributes of an existing edge are not touched here: :func:`reconcile_relations`
    recomputes them from every live contribution, this document's included. Provenance
    finds its edge by key, so nothing waits for the ids of the edges inserted here.
    """
    grouped: dict[RelationKey, dict[int, list[RelationAttrs]]] = {}
    sym = ctx.info.config.symmetric_predicates
    ends_named = {
        ids[name_key(n)] for c in doc.chunks for r in c.relations for n in (r.subject, r.object)
    }
    names = await ctx.entity_names(ends_named) if sym else {}
    for c in doc.chunks:
        for r in c.relations:
            ends = orient(
                ids[name_key(r.subject)], r.predicate, ids[name_key(r.object)], sym, names
            )
            key = (ends[0], r.predicate, ends[1], r.negated)
            if key[0] == key[2]:
                continue  # both ends resolved to one entity: a self-loop asserts nothing
            by_chunk = grouped.setdefault(key, {})
            by_chunk.setdefault(chunk_id[c.ordinal], []).append(
                (r.description, r.confidence, r.valid_from, r.valid_to)
            )
    if not grouped and not mentions:
        return set()
    # a symmetric statement also looks for its pair's edge the other way round
    probes = sorted({*grouped, *((k[2], k[1], k[0], k[3]) for k in grouped if k[1] in sym)})
    lookup = await ctx.send(
        "WITH mentioned AS (INSERT INTO {mentions} (chunk_id, entity_id, t_created)"
        "  SELECT c, e, %(bt)s FROM unnest(%(mc)b::bigint[], %(me)b::bigint[]) AS u(c, e)"
        "  ON CONFLICT DO NOTHING)"
        " SELECT r.subject_id, r.predicate, r.object_id, r.negated FROM {relations} r"
        " JOIN unnest(%(s)b::bigint[], %(p)b::text[], %(o)b::bigint[], %(n)b::bool[])"
        " AS k(s, p, o, n) ON r.subject_id = k.s AND r.predicate = k.p"
        " AND r.object_id = k.o AND r.negated = k.n WHERE r.space = %(space)s",
        {
            "mc": [m[0] for m in mentions],
            "me": [m[1] for m in mentions],
            "s": [k[0] for k in probes],
            "p": [k[1] for k in probes],
            "o": [k[2] for k in probes],
            "n": [k[3] for k in probes],
            "space": doc.space,
            "bt": bt,
        },
    )
    if not grouped:
        return set()  # the mentions are written all the same; nothing waits for them
    existing = {(int(s), p, int(o), bool(n)) for s, p, o, n in await ctx.fetch(lookup)}
    for key in [k for k in grouped if k[1] in sym and k not in existing]:
        turned = (key[2], key[1], key[0], key[3])
        if turned in existing:  # the pair's edge, stored the other way round
            for cid, attrs in grouped.pop(key).items():
                grouped.setdefault(turned, {}).setdefault(cid, []).extend(attrs)
    keys = sorted(grouped)
    said: dict[RelationKey, dict[int, RelationAttrs]] = {
        key: {
            cid: merge_relation_attrs((str(cid), a) for a in attrs)
            for cid, attrs in grouped[key].items()
        }
        for key in keys
    }
    fresh = [k for k in keys if k not in existing]
    if fresh:
        await _insert_fresh(ctx, doc, fresh, said, bt)
    sources = [(key, cid, a) for key in keys for cid, a in sorted(said[key].items())]
    await ctx.run(
        "INSERT INTO {relation_sources} (relation_id, chunk_id, doc_key, order_key, description,"
        " confidence, valid_from, valid_to)"
        " SELECT r.id, u.c, %s, %s, u.d, u.f, u.vf, u.vt FROM unnest(%b::bigint[], %b::text[],"
        " %b::bigint[], %b::bool[], %b::bigint[], %b::text[], %b::real[], %b::text[],"
        " %b::text[]) AS u(s, p, o, n, c, d, f, vf, vt)"
        " JOIN {relations} r ON r.space = %s AND r.subject_id = u.s AND r.predicate = u.p"
        " AND r.object_id = u.o AND r.negated = u.n"
        " ON CONFLICT DO NOTHING",
        (
            doc.doc_key,
            doc.order_key,
            [x[0][0] for x in sources],
            [x[0][1] for x in sources],
            [x[0][2] for x in sources],
            [x[0][3] for x in sources],
            [x[1] for x in sources],
            [x[2][0] for x in sources],
            [x[2][1] for x in sources],
            [x[2][2] for x in sources],
            [x[2][3] for x in sources],
            doc.space,
        ),
    )
    return {(doc.space, k[0], k[2]) for k in keys}


async def _insert_fresh(
    ctx: WriteContext,
    doc: PreparedDocument,
    fresh: list[RelationKey],
    said: dict[RelationKey, dict[int, RelationAttrs]],
    bt: datetime,
) -> None:
    """New edges with their final attributes, born current at ``bt``
    (:attr:`WriteContext.unannounced` until reconciliation reports them; their belief
    history opens with the rest of the write's, :func:`reconcile_relations`).

    Weight, order and attributes are what reconciliation computes from the provenance
    written next — the distinct chunks of this document, its order key — and current is
    what it decides unless a rival supersedes the edge at once, so it usually finds
    nothing to update.
    """
    names = await ctx.entity_names({k[0] for k in fresh} | {k[2] for k in fresh})
    attrs = [merge_relation_attrs((str(c), a) for c, a in said[k].items()) for k in fresh]
    texts = [
        render_relation(names[k[0]], k[1], names[k[2]], k[3], a[2], a[3])
        for k, a in zip(fresh, attrs, strict=True)
    ]
    vecs = await ctx.embeddings(texts)
    bounds = [period_bounds(a[2], a[3]) for a in attrs]
    new_ids = ctx.new_ids(len(fresh))
    await ctx.run(
        "INSERT INTO {relations} (id, space, subject_id, predicate, object_id,"
        " negated, description, confidence, valid_from, valid_to, valid_from_d,"
        " valid_to_d, weight, order_key, status, t_created, doc_keys, rendered, embedding)"
        " SELECT i, %s, s, p, o, n, d, c, vf, vt, lo, hi, w, %s, 'current', %s, %s,"
        " r, e FROM unnest(%b::bigint[], %b::bigint[], %b::text[], %b::bigint[],"
        " %b::bool[], %b::text[], %b::real[], %b::text[], %b::text[], %b::date[],"
        " %b::date[], %b::int[], %b::text[], %b::vector[])"
        " AS u(i, s, p, o, n, d, c, vf, vt, lo, hi, w, r, e)",
        (
            doc.space,
            doc.order_key or "",
            bt,
            [doc.doc_key],
            new_ids,
            [k[0] for k in fresh],
            [k[1] for k in fresh],
            [k[2] for k in fresh],
            [k[3] for k in fresh],
            [a[0] for a in attrs],
            [a[1] for a in attrs],
            [a[2] for a in attrs],
            [a[3] for a in attrs],
            [b[0] for b in bounds],
            [b[1] for b in bounds],
            [len(said[k]) for k in fresh],
            texts,
            vecs,
        ),
    )
    ctx.unannounced.update(new_ids)


async def reconcile_relations(
    ctx: WriteContext,
    touched: set[int],
    bt: datetime,
    *,
    pairs_of: AbstractSet[Pair],
) -> None:
    """Weight, attributes, order, retraction and supersession on every touched pair: the
    pairs of the ``touched`` relations, and ``pairs_of``; and supersession on the
    functional scopes of their relations (:mod:`.functional`).

    Everything is recomputed from live provenance, so a withdrawn chunk takes its
    description, confidence and stated period with it.
    """
    if not touched and not pairs_of:
        return
    given = sorted(pairs_of)
    # a pair's edges, and its symmetric predicates' edges stored the other way round
    pairs = (
        "WITH pairs AS (SELECT space, subject_id, object_id FROM {relations}"
        "  WHERE id = ANY(%s)"
        "  UNION SELECT * FROM unnest(%b::text[], %b::bigint[], %b::bigint[])),"
        " hit AS (SELECT r.id FROM {relations} r JOIN pairs USING (space, subject_id, object_id)"
        "  UNION SELECT r.id FROM {relations} r JOIN pairs p ON r.space = p.space"
        "  AND r.subject_id = p.object_id AND r.object_id = p.subject_id"
        "  WHERE r.predicate = ANY(%s))"
    )
    params = (
        sorted(touched),
        [p[0] for p in given],
        [p[1] for p in given],
        [p[2] for p in given],
        sorted(ctx.info.config.symmetric_predicates),
    )
    edges = await ctx.send(
        pairs + " SELECT r.id, r.space, r.subject_id, r.predicate, r.object_id, r.negated,"
        "  r.weight, r.order_key, r.description, r.confidence, r.valid_from,"
        "  r.valid_to, r.status, r.superseded_by, r.doc_keys, r.rendered, r.superseded_via"
        " FROM {relations} r JOIN hit USING (id) ORDER BY r.id",
        params,
    )
    sources = await ctx.send(
        pairs + " SELECT s.relation_id, s.chunk_id, s.order_key, s.description, s.confidence,"
        "  s.valid_from, s.valid_to, s.doc_key"
        " FROM hit JOIN {relation_sources} s ON s.relation_id = hit.id",
        params,
    )
    config = ctx.info.config
    functional, sym = config.functional_predicates, config.symmetric_predicates
    residue = sym if config.contradiction_model else None
    scoped = await send_functional_scope(ctx, pairs, params, functional, residue)
    rows = await ctx.fetch(edges)
    contributions: dict[int, list[tuple[str, RelationAttrs]]] = {}
    orders: dict[int, str] = {}
    documents: dict[int, set[str]] = {}
    for rid, cid, order_key, d, c, vf, vt, doc_key in await ctx.fetch(sources):
        contributions.setdefault(int(rid), []).append((str(cid), (d, float(c), vf, vt)))
        orders[int(rid)] = max(orders.get(int(rid), ""), order_key or "")
        documents.setdefault(int(rid), set()).add(str(doc_key))
    merged = {rid: merge_relation_attrs(mine) for rid, mine in contributions.items()}
    loaded = {int(r[0]) for r in rows}
    around = [a for a in await scoped.rows(ctx) if a.id not in loaded]
    names = await ctx.entity_names(
        {int(r[2]) for r in rows}
        | {int(r[4]) for r in rows}
        | {e for r in around for e in (r.subject_id, r.object_id)}
    )

    def rendered(
        s: int, p: str, o: int, negated: bool, valid: tuple[str | None, str | None]
    ) -> str:
        """What the model is asked about (only a realm asking it renders anything)."""
        if residue is None:
            return ""
        return render_relation(names[s], p, names[o], negated, *valid)

    live = [
        LiveRelation(
            int(r[0]),
            (str(r[1]), int(r[2]), int(r[4])),
            str(r[3]),
            bool(r[5]),
            orders.get(int(r[0])),
            f"{names[int(r[2])]}\x00{names[int(r[4])]}",
            rendered(int(r[2]), str(r[3]), int(r[4]), bool(r[5]), merged[int(r[0])][2:]),
        )
        for r in rows
        if int(r[0]) in contributions
    ]
    live += [
        LiveRelation(
            a.id,
            (a.space, a.subject_id, a.object_id),
            a.predicate,
            a.negated,
            a.order_key,
            f"{names[a.subject_id]}\x00{names[a.object_id]}",
            rendered(a.subject_id, a.predicate, a.object_id, a.negated, a.valid),
        )
        for a in around
        if a.live
    ]
    # Scope rows that are context only have rivals not loaded here: not decided.
    decided = {r.id for r in live} - {a.id for a in around if not a.in_scope}
    answers = None
    if residue is not None:
        asked = relation_questions(live, sym, functional, decided)
        answers = await known_answers(ctx, asked)
    desired = desired_relation_states(
        live, ctx.info.exclusive_groups, sym, functional, answers, decided
    )
    attr_updates: list[tuple[Any, ...]] = []
    text_updates: list[tuple[int, str]] = []
    zeroed: list[int] = []
    moves: list[_Move] = []
    for r in rows:
        rid, space = int(r[0]), str(r[1])
        subject, obj = names[int(r[2])], names[int(r[4])]
        predicate, negated = str(r[3]), bool(r[5])
        mine = contributions.get(rid)
        if mine:
            weight, order_key, docs = len(mine), orders[rid], sorted(documents[rid])
            attrs = merged[rid]
            stored = (int(r[6]), r[7], r[8], float(r[9]), r[10], r[11], list(r[14]))
            if (weight, order_key, *attrs, docs) != stored:
                lo, hi = period_bounds(attrs[2], attrs[3])
                attr_updates.append((weight, order_key, *attrs, lo, hi, docs, rid))
                text = render_relation(subject, predicate, obj, negated, attrs[2], attrs[3])
                if text != r[15]:
                    text_updates.append((rid, text))
            valid_from, valid_to = attrs[2], attrs[3]
        else:
            valid_from, valid_to = r[10], r[11]
            if int(r[6]) != 0 or r[14]:
                zeroed.append(rid)
        have, want = _state(r[12], r[13], r[16]), desired.get(rid, RETRACTED)
        told = RETRACTED if rid in ctx.unannounced else have
        if want != have or want != told:
            ref = _ref(rid, int(r[2]), int(r[4]), names, predicate, negated, valid_from, valid_to)
            _move(ctx, moves, space, ref, have, want, told)
    ctx.unannounced.difference_update(int(r[0]) for r in rows)
    for a in around:
        if not a.in_scope:
            continue  # context only: not every rival of it is loaded
        have = _state(a.state, a.superseded_by, a.superseded_via)
        want = desired.get(a.id, RETRACTED)
        if want != have:
            ref = _ref(a.id, a.subject_id, a.object_id, names, a.predicate, a.negated, *a.valid)
            _move(ctx, moves, a.space, ref, have, want, have)
    if attr_updates:
        columns = [list(column) for column in zip(*attr_updates, strict=True)]
        columns[8] = [Jsonb(docs) for docs in columns[8]]
        await ctx.run(
            "UPDATE {relations} r SET weight = u.w, order_key = u.k, description = u.d,"
            " confidence = u.c, valid_from = u.f, valid_to = u.t,"
            " valid_from_d = u.fd, valid_to_d = u.td,"
            " doc_keys = ARRAY(SELECT jsonb_array_elements_text(u.dk))"
            " FROM unnest(%b::int[], %b::text[], %b::text[], %b::float8[], %b::text[],"
            " %b::text[], %b::date[], %b::date[], %s::jsonb[], %b::bigint[])"
            " AS u(w, k, d, c, f, t, fd, td, dk, i) WHERE r.id = u.i",
            columns,
        )
    if text_updates:
        vecs = await ctx.embeddings([t for _, t in text_updates])
        await ctx.run(
            "UPDATE {relations} r SET rendered = u.t, embedding = u.e"
            " FROM unnest(%b::text[], %b::vector[], %b::bigint[]) AS u(t, e, i)"
            " WHERE r.id = u.i",
            ([t for _, t in text_updates], vecs, [rid for rid, _ in text_updates]),
        )
    if zeroed:
        await ctx.run(
            "UPDATE {relations} SET weight = 0, doc_keys = '{{}}' WHERE id = ANY(%s)", (zeroed,)
        )
    if moves:
        await _move_states(ctx, moves, bt)
    believed = sorted({int(r[0]) for r in rows} | {a.id for a in around if a.in_scope})
    for statement in RELATIONS.statements():
        await ctx.run(statement, {"ids": believed, "bt": bt})


def _state(state: str | None, by: int | None, via: str | None) -> State:
    """A stored state (``None`` or ``retracted``: retracted)."""
    if state is None or state == "retracted":
        return RETRACTED
    return (str(state), int(by) if by is not None else None, cast("Mechanism | None", via))


def _ref(
    rid: int,
    subject_id: int,
    object_id: int,
    names: dict[int, str],
    predicate: str,
    negated: bool,
    valid_from: str | None,
    valid_to: str | None,
) -> dict[str, Any]:
    """A relation as a change carries it."""
    return {
        "id": str(rid),
        "subject_id": str(subject_id),
        "object_id": str(object_id),
        "subject": names[subject_id],
        "predicate": predicate,
        "object": names[object_id],
        "negated": negated,
        "valid_from": valid_from,
        "valid_to": valid_to,
    }


def _move(
    ctx: WriteContext,
    moves: list[_Move],
    space: str,
    ref: dict[str, Any],
    have: State,
    want: State,
    told: State,
) -> None:
    """Record a relation's change of state (``have`` as stored), with its changes on the
    feed (from ``told``, what the feed last said: retracted for an edge born here)."""
    if want != have:
        moves.append(_Move(int(ref["id"]), have, want))
    if want == told:
        return
    for kind, by, via in _transition_kinds(told, want):
        extra = {"superseded_by": str(by), "superseded_via": via} if by is not None else {}
        ctx.changes.add(kind, space, relation=ref, **extra)


async def _move_states(ctx: WriteContext, moves: list[_Move], bt: datetime) -> None:
    """Set each moved relation's state; its ``t_expired`` is the instant it stopped being
    current (its belief history follows, :data:`~tidegraph.store.belief.RELATIONS`)."""
    await ctx.run(
        "UPDATE {relations} r SET status = u.s, superseded_by = u.b, superseded_via = u.v,"
        " t_expired = CASE WHEN u.s = 'current' THEN NULL ELSE %(bt)s END"
        " FROM unnest(%(mi)b::bigint[], %(ms)b::text[], %(mb)b::bigint[], %(mv)b::text[])"
        " AS u(i, s, b, v) WHERE r.id = u.i",
        {
            "bt": bt,
            "mi": [m.relation_id for m in moves],
            "ms": [m.want[0] for m in moves],
            "mb": [m.want[1] for m in moves],
            "mv": [m.want[2] for m in moves],
        },
    )


def _transition_kinds(have: State, want: State) -> list[tuple[ChangeKind, int | None, str | None]]:
    """Change kinds for a relation moving between belief states, with the superseding
    relation and mechanism of a supersession."""
    h, w = have[0], want[0]
    if w == "retracted":
        return [(ChangeKind.RELATION_RETRACTED, None, None)]
    if w == "current":
        restored = h == "superseded"
        kind = ChangeKind.RELATION_RESTORED if restored else ChangeKind.RELATION_ADDED
        return [(kind, None, None)]
    superseded = (ChangeKind.RELATION_SUPERSEDED, want[1], want[2])
    if h == "retracted":
        return [(ChangeKind.RELATION_ADDED, None, None), superseded]
    return [superseded]
