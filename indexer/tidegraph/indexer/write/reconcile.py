"""Relation reconciliation in belief time: every touched pair's weight, attributes, order,
retraction and supersession, recomputed from live provenance.

Three phases, each a function: :func:`_load` reads the pairs' edges, their provenance and
the functional (and residue) scopes around them in one round trip; :func:`_decide` turns
them into the states the rules want (:mod:`~tidegraph.indexer.graph.rules`), after the
model's cached answers about the residue; :func:`_plan` compares with what is stored and
puts the feed's changes in order; :func:`_store` writes what differs and the relations'
belief history (:data:`~tidegraph.store.belief.RELATIONS`).

A new edge is born current (``relations``): reconciliation writes nothing more to it unless
a rival supersedes it at once, so a write leaves one version of the row.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, cast

from psycopg.types.json import Jsonb

from tidegraph.indexer.graph import (
    LiveRelation,
    Mechanism,
    RelationAttrs,
    RelationState,
    desired_relation_states,
    merge_relation_attrs,
    period_bounds,
    relation_questions,
    render_relation,
)
from tidegraph.indexer.write.context import WriteContext
from tidegraph.indexer.write.contradictions import known_answers
from tidegraph.indexer.write.functional import Scoped, send_functional_scope
from tidegraph.indexer.write.relations import Pair
from tidegraph.schemas import ChangeKind
from tidegraph.store import RELATIONS

State = RelationState
"""Belief state, the relation superseding it and by which mechanism."""
RETRACTED: State = ("retracted", None, None)

_PAIRS = (
    "WITH pairs AS (SELECT space, subject_id, object_id FROM {relations}"
    "  WHERE id = ANY(%s)"
    "  UNION SELECT * FROM unnest(%b::text[], %b::bigint[], %b::bigint[])),"
    " hit AS (SELECT r.id FROM {relations} r JOIN pairs USING (space, subject_id, object_id)"
    "  UNION SELECT r.id FROM {relations} r JOIN pairs p ON r.space = p.space"
    "  AND r.subject_id = p.object_id AND r.object_id = p.subject_id"
    "  WHERE r.predicate = ANY(%s))"
)
"""The touched pairs, and their edges (a symmetric predicate's stored either way round)."""


class _Edge(NamedTuple):
    """A stored edge of a touched pair."""

    id: int
    space: str
    subject_id: int
    predicate: str
    object_id: int
    negated: bool
    weight: int
    order_key: str | None
    description: str
    confidence: float
    valid_from: str | None
    valid_to: str | None
    status: str
    superseded_by: int | None
    doc_keys: list[str]
    rendered: str
    superseded_via: str | None


@dataclass
class _Loaded:
    """What one reconciliation reads."""

    edges: list[_Edge]
    contributions: dict[int, list[tuple[str, RelationAttrs]]]
    """Relation id → (chunk id, what the chunk says) per live contribution."""
    orders: dict[int, str]
    """Relation id → the latest order key of the documents asserting it."""
    documents: dict[int, set[str]]
    around: list[Scoped]
    """Functional or residue rivals outside the pairs."""
    names: dict[int, str]
    merged: dict[int, RelationAttrs] = field(default_factory=dict)


class _Move(NamedTuple):
    """A relation whose belief state changes in this transaction."""

    relation_id: int
    have: State
    want: State


@dataclass
class _Updates:
    """What differs from the stored rows."""

    attributes: list[tuple[Any, ...]] = field(default_factory=list)
    texts: list[tuple[int, str]] = field(default_factory=list)
    zeroed: list[int] = field(default_factory=list)
    moves: list[_Move] = field(default_factory=list)


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
    loaded = await _load(ctx, touched, pairs_of)
    desired = await _decide(ctx, loaded)
    updates = _plan(ctx, loaded, desired)
    await _store(ctx, loaded, updates, bt)


async def _load(ctx: WriteContext, touched: set[int], pairs_of: AbstractSet[Pair]) -> _Loaded:
    """The pairs' edges, their live provenance and the scopes around them, in one round
    trip; then the names of every end."""
    given = sorted(pairs_of)
    params = (
        sorted(touched),
        [p[0] for p in given],
        [p[1] for p in given],
        [p[2] for p in given],
        sorted(ctx.info.config.symmetric_predicates),
    )
    edges = await ctx.send(
        _PAIRS + " SELECT r.id, r.space, r.subject_id, r.predicate, r.object_id, r.negated,"
        "  r.weight, r.order_key, r.description, r.confidence, r.valid_from,"
        "  r.valid_to, r.status, r.superseded_by, r.doc_keys, r.rendered, r.superseded_via"
        " FROM {relations} r JOIN hit USING (id) ORDER BY r.id",
        params,
    )
    sources = await ctx.send(
        _PAIRS + " SELECT s.relation_id, s.chunk_id, s.order_key, s.description, s.confidence,"
        "  s.valid_from, s.valid_to, s.doc_key"
        " FROM hit JOIN {relation_sources} s ON s.relation_id = hit.id",
        params,
    )
    config = ctx.info.config
    residue = config.symmetric_predicates if config.contradiction_model else None
    scoped = await send_functional_scope(ctx, _PAIRS, params, config.functional_predicates, residue)
    rows = [
        _Edge(int(r[0]), str(r[1]), int(r[2]), str(r[3]), int(r[4]), bool(r[5]), int(r[6]),
              r[7], r[8], float(r[9]), r[10], r[11], str(r[12]),
              int(r[13]) if r[13] is not None else None, list(r[14]), str(r[15]), r[16])
        for r in await ctx.fetch(edges)
    ]  # fmt: skip
    loaded = _Loaded(rows, {}, {}, {}, [], {})
    for rid, cid, order_key, d, c, vf, vt, doc_key in await ctx.fetch(sources):
        loaded.contributions.setdefault(int(rid), []).append((str(cid), (d, float(c), vf, vt)))
        loaded.orders[int(rid)] = max(loaded.orders.get(int(rid), ""), order_key or "")
        loaded.documents.setdefault(int(rid), set()).add(str(doc_key))
    loaded.merged = {rid: merge_relation_attrs(c) for rid, c in loaded.contributions.items()}
    ids = {e.id for e in rows}
    loaded.around = [a for a in await scoped.rows(ctx) if a.id not in ids]
    loaded.names = await ctx.entity_names(
        {e.subject_id for e in rows}
        | {e.object_id for e in rows}
        | {x for a in loaded.around for x in (a.subject_id, a.object_id)}
    )
    return loaded


async def _decide(ctx: WriteContext, loaded: _Loaded) -> dict[int, State]:
    """The state the rules want for every live relation of the pairs and their scopes
    (asking the realm's cached answers about the residue; a missing one raises)."""
    config = ctx.info.config
    functional, sym = config.functional_predicates, config.symmetric_predicates
    residue = config.contradiction_model
    names = loaded.names

    def rendered(s: int, p: str, o: int, negated: bool, valid: tuple[str | None, ...]) -> str:
        """What the model is asked about (only a realm asking it renders anything)."""
        return render_relation(names[s], p, names[o], negated, *valid) if residue else ""

    live = [
        LiveRelation(
            e.id,
            (e.space, e.subject_id, e.object_id),
            e.predicate,
            e.negated,
            loaded.orders.get(e.id),
            f"{names[e.subject_id]}\x00{names[e.object_id]}",
            rendered(e.subject_id, e.predicate, e.object_id, e.negated, loaded.merged[e.id][2:]),
        )
        for e in loaded.edges
        if e.id in loaded.contributions
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
        for a in loaded.around
        if a.live
    ]
    # Scope rows that are context only have rivals not loaded here: not decided.
    decided = {r.id for r in live} - {a.id for a in loaded.around if not a.in_scope}
    answers = None
    if residue:
        answers = await known_answers(ctx, relation_questions(live, sym, functional, decided))
    return desired_relation_states(
        live, ctx.info.exclusive_groups, sym, functional, answers, decided
    )


def _plan(ctx: WriteContext, loaded: _Loaded, desired: dict[int, State]) -> _Updates:
    """Compare what is wanted with what is stored; put the feed's changes in order."""
    out = _Updates()
    names = loaded.names
    for e in loaded.edges:
        mine = loaded.contributions.get(e.id)
        if mine:
            docs = sorted(loaded.documents[e.id])
            attrs = loaded.merged[e.id]
            wanted = (len(mine), loaded.orders[e.id], *attrs, docs)
            stored = (e.weight, e.order_key, e.description, e.confidence, e.valid_from,
                      e.valid_to, e.doc_keys)  # fmt: skip
            if wanted != stored:
                out.attributes.append((*wanted[:6], *period_bounds(attrs[2], attrs[3]), docs, e.id))
                text = render_relation(
                    names[e.subject_id], e.predicate, names[e.object_id], e.negated, *attrs[2:]
                )
                if text != e.rendered:
                    out.texts.append((e.id, text))
            valid: tuple[str | None, str | None] = (attrs[2], attrs[3])
        else:
            valid = (e.valid_from, e.valid_to)
            if e.weight != 0 or e.doc_keys:
                out.zeroed.append(e.id)
        have, want = _state(e.status, e.superseded_by, e.superseded_via), desired.get(e.id)
        want = want or RETRACTED
        told = RETRACTED if e.id in ctx.unannounced else have
        if want != have or want != told:
            ref = _ref(e.id, e.subject_id, e.object_id, names, e.predicate, e.negated, *valid)
            _move(ctx, out.moves, e.space, ref, have, want, told)
    ctx.unannounced.difference_update(e.id for e in loaded.edges)
    for a in loaded.around:
        if not a.in_scope:
            continue  # context only: not every rival of it is loaded
        have = _state(a.state, a.superseded_by, a.superseded_via)
        want = desired.get(a.id, RETRACTED)
        if want != have:
            ref = _ref(a.id, a.subject_id, a.object_id, names, a.predicate, a.negated, *a.valid)
            _move(ctx, out.moves, a.space, ref, have, want, have)
    return out


async def _store(ctx: WriteContext, loaded: _Loaded, updates: _Updates, bt: datetime) -> None:
    """Write what differs, then the belief history of every relation reconciled."""
    if updates.attributes:
        columns = [list(column) for column in zip(*updates.attributes, strict=True)]
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
    if updates.texts:
        vecs = await ctx.embeddings([t for _, t in updates.texts])
        await ctx.run(
            "UPDATE {relations} r SET rendered = u.t, embedding = u.e"
            " FROM unnest(%b::text[], %b::vector[], %b::bigint[]) AS u(t, e, i)"
            " WHERE r.id = u.i",
            ([t for _, t in updates.texts], vecs, [rid for rid, _ in updates.texts]),
        )
    if updates.zeroed:
        await ctx.run(
            "UPDATE {relations} SET weight = 0, doc_keys = '{{}}' WHERE id = ANY(%s)",
            (updates.zeroed,),
        )
    if updates.moves:
        await _move_states(ctx, updates.moves, bt)
    believed = sorted({e.id for e in loaded.edges} | {a.id for a in loaded.around if a.in_scope})
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
