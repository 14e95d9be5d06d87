"""Relation statements of a write: edges and their provenance (reconciliation follows,
:mod:`.reconcile`).

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

from datetime import datetime

from tidegraph.indexer.extraction import PreparedDocument
from tidegraph.indexer.graph import (
    RelationAttrs,
    merge_relation_attrs,
    orient,
    period_bounds,
    render_relation,
)
from tidegraph.indexer.write.context import WriteContext
from tidegraph.schemas import name_key

RelationKey = tuple[int, str, int, bool]
"""(subject id, predicate, object id, negated): one edge per key (corroboration)."""
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
    the entity pairs the document's edges join, for
    :func:`~tidegraph.indexer.write.reconcile.reconcile_relations`.

    A symmetric predicate's statement goes to its unordered pair's edge, whichever way
    that is stored, or creates it oriented by
    :func:`~tidegraph.indexer.graph.symmetry.orient`: both directions are one edge.

    The document's ``mentions`` (chunk id, entity id) are inserted by the statement that
    looks its edges up: one statement less per write.

    Attributes of an existing edge are not touched here: reconciliation recomputes them
    from every live contribution, this document's included. Provenance finds its edge by
    key, so nothing waits for the ids of the edges inserted here.

    One function on purpose: its statements are sent in one pipeline round trip in the
    order the edges need (mentions and lookup, new edges, provenance).
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
    history opens with the rest of the write's, in reconciliation).

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
