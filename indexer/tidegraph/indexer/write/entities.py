"""Entity statements of a write: resolution to rows, merges, dormancy and revival.

Resolution decides everything in memory first (new rows get provisional negative ids) and
then writes with a handful of set-based statements instead of one round trip per row.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from psycopg import AsyncCursor
from psycopg.types.json import Jsonb

from tidegraph.indexer.extraction import PreparedDocument
from tidegraph.indexer.graph import (
    EntityRecord,
    merge_entity,
    merge_records,
    render_entity,
    render_relation,
)
from tidegraph.indexer.write.attributes import kept_attributes, move_sources
from tidegraph.indexer.write.context import WriteContext
from tidegraph.schemas import ChangeKind, name_key


def _facts(doc: PreparedDocument) -> dict[str, EntityRecord]:
    """name_key(surface) → what the document says about it, endpoint stubs included."""
    facts: dict[str, EntityRecord] = {}
    for chunk in doc.chunks:
        for e in chunk.entities:
            rec = EntityRecord(e.name, e.type, e.description, e.aliases)
            key = name_key(e.name)
            facts[key] = merge_entity(facts[key], rec) if key in facts else rec
        for r in chunk.relations:
            for name in (r.subject, r.object):
                facts.setdefault(name_key(name), EntityRecord(name))
    return facts


async def resolve_entities(
    ctx: WriteContext, doc: PreparedDocument, bt: datetime
) -> dict[str, int]:
    """Resolve every entity of the document to a row; return name_key(surface) → id.

    A fact whose surface forms reach several records (stored or new in this document)
    proves them one entity: they merge into one survivor, the others are absorbed
    (resolution.py: entities are the connected components of "shares a surface form",
    whatever the arrival order).

    Longer than most functions on purpose: one pass over the document's facts updates six
    lookup tables together (names, aliases, hits, absorbed, pending, latest), and each
    step reads what the previous fact left in them.
    """
    facts = _facts(doc)
    keys = sorted({k for k in facts} | {name_key(a) for f in facts.values() for a in f.aliases})
    named = await ctx.send(
        "SELECT id, name, type, description, aliases FROM {entities}"
        " WHERE space = %s AND name_key = ANY(%s) AND merged_into IS NULL",
        (doc.space, keys),
    )
    aliased = await ctx.send(
        "SELECT a.alias_lower, e.id, e.name, e.type, e.description, e.aliases"
        " FROM {entity_aliases} a JOIN {entities} e ON e.id = a.entity_id"
        " WHERE a.space = %s AND a.alias_lower = ANY(%s) ORDER BY e.id",
        (doc.space, keys),
    )
    by_name: dict[str, tuple[int, EntityRecord]] = {}
    for i, name, typ, desc, aliases in await ctx.fetch(named):
        by_name[name_key(name)] = (int(i), EntityRecord(name, typ, desc, tuple(aliases)))
    by_alias: dict[str, tuple[int, EntityRecord]] = {}
    for alias, i, name, typ, desc, aliases in await ctx.fetch(aliased):
        by_alias.setdefault(alias, (int(i), EntityRecord(name, typ, desc, tuple(aliases))))

    ids: dict[str, int] = {}
    pending: dict[int, EntityRecord] = {}
    updated: dict[int, EntityRecord] = {}
    absorbed: dict[int, int] = {}
    latest: dict[int, EntityRecord] = {}
    next_temp = -1
    stored = {i: rec for i, rec in [*by_name.values(), *by_alias.values()]}
    for key in sorted(facts):
        fact = facts[key]
        if key in ids:
            continue
        probes = [key, *sorted(name_key(a) for a in fact.aliases)]
        hits: dict[int, EntityRecord] = {}
        for table in (by_name, by_alias):
            for p in probes:
                if p in table:
                    i = table[p][0]
                    while i in absorbed:
                        i = absorbed[i]
                    hits.setdefault(i, latest.get(i, table[p][1]))
        if not hits:
            entity_id, merged = next_temp, fact
            next_temp -= 1
        else:
            merged = merge_records([*hits.values(), fact])
            canonical = name_key(merged.name)
            entity_id = min(
                hits, key=lambda i: (i < 0, name_key(hits[i].name) != canonical, abs(i))
            )
            current = hits[entity_id]
            if (
                canonical != name_key(current.name)
                and canonical in by_name
                and by_name[canonical][0] not in hits
            ):
                merged = EntityRecord(
                    current.name,
                    merged.type,
                    merged.description,
                    (*merged.aliases, merged.name),
                )
            for other in hits:
                if other != entity_id:
                    absorbed[other] = entity_id
                    pending.pop(other, None)
                    updated.pop(other, None)
        if entity_id > 0:
            merged = kept_attributes(merged, stored[entity_id])
        if entity_id < 0:
            pending[entity_id] = merged
        elif merged != stored[entity_id]:
            updated[entity_id] = merged
        latest[entity_id] = merged
        forms = {name_key(f) for r in (merged, fact, *hits.values()) for f in (r.name, *r.aliases)}
        for form in forms:
            ids[form] = entity_id
            for table in (by_name, by_alias):
                if form in table and table[form][0] in absorbed:
                    table[form] = (entity_id, merged)
        by_name[name_key(merged.name)] = (entity_id, merged)
        for a in merged.aliases:
            by_alias.setdefault(name_key(a), (entity_id, merged))

    def survivor(i: int) -> int:
        while i in absorbed:
            i = absorbed[i]
        return i

    ids = {k: survivor(v) for k, v in ids.items()}
    real = await _store(ctx, doc.space, bt, pending, updated)
    for v in set(ids.values()):
        if v in latest:  # the record each survivor is stored with
            ctx.names[real.get(v, v)] = latest[v].name
    ids = {k: real.get(v, v) for k, v in ids.items()}
    moves = {x: survivor(x) for x in absorbed if x > 0}
    if moves:
        ctx.absorbed.update(moves)
        await move_sources(ctx, moves)
        await _absorb(ctx, doc.space, moves, bt)
    return ids


async def _store(
    ctx: WriteContext,
    space: str,
    bt: datetime,
    pending: dict[int, EntityRecord],
    updated: dict[int, EntityRecord],
) -> dict[int, int]:
    """Insert new entities, update changed ones, record aliases; provisional id → real id."""
    temp = sorted(pending, reverse=True)
    vecs = await ctx.embeddings(
        [
            render_entity(e.name, e.description)
            for e in [*(pending[t] for t in temp), *updated.values()]
        ]
    )
    real: dict[int, int] = {}
    if temp:
        rows = await ctx.rows(
            "INSERT INTO {entities} (id, space, name, name_key, type, description, aliases,"
            " embedding, created_at) SELECT i, %s, n, k, t, d,"
            " ARRAY(SELECT jsonb_array_elements_text(a)), e, %s"
            " FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::text[], %b::text[],"
            " %s::jsonb[], %b::vector[]) AS u(i, n, k, t, d, a, e) RETURNING id, name",
            (
                space,
                bt,
                ctx.new_ids(len(temp)),
                [pending[t].name for t in temp],
                [name_key(pending[t].name) for t in temp],
                [pending[t].type for t in temp],
                [pending[t].description for t in temp],
                [Jsonb(sorted(pending[t].aliases)) for t in temp],
                vecs[: len(temp)],
            ),
        )
        returned = {str(name): int(i) for i, name in rows}
        for t in temp:
            real[t] = returned[pending[t].name]
            ctx.changes.add(ChangeKind.ENTITY_ADDED, space, entity=_entity_ref(real[t], pending[t]))
    for entity_id, e in updated.items():
        ctx.changes.add(ChangeKind.ENTITY_UPDATED, space, entity=_entity_ref(entity_id, e))
    if updated:
        await ctx.many(
            "UPDATE {entities} SET name = %s, name_key = %s, type = %s, description = %s,"
            " aliases = %s, embedding = %b WHERE id = %s",
            [
                (e.name, name_key(e.name), e.type, e.description, sorted(e.aliases), vec, entity_id)
                for (entity_id, e), vec in zip(updated.items(), vecs[len(temp) :], strict=True)
            ],
        )
    alias_rows = sorted(
        {
            (name_key(a), real.get(entity_id, entity_id))
            for entity_id, e in [*pending.items(), *updated.items()]
            for a in e.aliases
        }
    )
    if alias_rows:
        await ctx.run(
            "INSERT INTO {entity_aliases} (space, alias_lower, entity_id)"
            " SELECT %s, a, i FROM unnest(%b::text[], %b::bigint[]) AS u(a, i)"
            " ON CONFLICT DO NOTHING",
            (space, [a for a, _ in alias_rows], [i for _, i in alias_rows]),
        )
    return real


class _Repointed(NamedTuple):
    """A relation of an absorbed entity now pointing at the survivor, to render again."""

    relation_id: int
    subject_id: int
    predicate: str
    object_id: int
    negated: bool
    valid_from: str | None
    valid_to: str | None


async def _absorb(ctx: WriteContext, space: str, moves: dict[int, int], bt: datetime) -> None:
    """Fold stored entities into the one they were proven to be (``moves``: absorbed →
    survivor, already holding the merged record).

    Mentions (their belief intervals closed and opened) and relations move to the
    survivor (:func:`_move_relations`). The absorbed row stays, dormant, without surface
    forms of its own and marked ``merged_into`` (resolution never finds it again): what was
    believed of it before the merge is read back from it, its vector included.
    """
    repointed: list[_Repointed] = []
    for x, k in sorted(moves.items()):
        await ctx.run(
            "INSERT INTO {mentions} (chunk_id, entity_id, t_created)"
            " SELECT m.chunk_id, %(k)s, %(bt)s FROM {mentions} m"
            " WHERE m.entity_id = %(x)s AND m.t_expired IS NULL AND NOT EXISTS (SELECT 1"
            "  FROM {mentions} o WHERE o.chunk_id = m.chunk_id AND o.entity_id = %(k)s"
            "  AND o.t_expired IS NULL) ON CONFLICT DO NOTHING",
            {"k": k, "x": x, "bt": bt},
        )
        await ctx.run(
            "UPDATE {mentions} SET t_expired = %s WHERE entity_id = %s AND t_expired IS NULL",
            (bt, x),
        )
        await ctx.run("DELETE FROM {entity_aliases} WHERE entity_id = %s", (x,))
        await ctx.run("DELETE FROM {community_members} WHERE entity_id = %s", (x,))
        repointed += await _move_relations(ctx, space, x, k)
        ((name, typ),) = await ctx.rows("SELECT name, type FROM {entities} WHERE id = %s", (x,))
        ref = {"id": str(x), "name": str(name), "type": str(typ)}
        ctx.changes.add(ChangeKind.ENTITY_DORMANT, space, entity=ref, merged_into=str(k))
        await ctx.run(
            "UPDATE {entities} SET aliases = '{{}}', merged_into = %s,"
            " dormant_since = coalesce(dormant_since, %s) WHERE id = %s",
            (k, bt, x),
        )
    if repointed:
        names = await ctx.entity_names(
            {r.subject_id for r in repointed} | {r.object_id for r in repointed}
        )
        texts = [
            render_relation(
                names[r.subject_id], r.predicate, names[r.object_id], r.negated,
                r.valid_from, r.valid_to,
            )
            for r in repointed
        ]  # fmt: skip
        vecs = await ctx.embeddings(texts)
        await ctx.many(
            "UPDATE {relations} SET rendered = %s, embedding = %b WHERE id = %s",
            [(t, v, r.relation_id) for r, t, v in zip(repointed, texts, vecs, strict=True)],
        )


async def _move_relations(ctx: WriteContext, space: str, x: int, k: int) -> list[_Repointed]:
    """Move the relations of absorbed ``x`` to survivor ``k``; return those re-pointed.

    A relation keeps its id (and so its belief history) when the survivor has no edge with
    the same key — for a symmetric predicate, on the same unordered pair, whichever way
    round (``graph.symmetry``: an edge keeps its orientation, so the feed's
    ``merged_into`` tells its new ends); otherwise its provenance moves into that edge and
    it is left without any, so reconciliation retracts it in belief time.
    """
    repointed: list[_Repointed] = []
    symmetric = ctx.info.config.symmetric_predicates
    for rid, s_id, p, o_id, n, vf, vt in await ctx.rows(
        "SELECT id, subject_id, predicate, object_id, negated, valid_from, valid_to"
        " FROM {relations} WHERE space = %s AND (subject_id = %s OR object_id = %s)"
        " ORDER BY id",
        (space, x, x),
    ):
        s2 = k if s_id == x else int(s_id)
        o2 = k if o_id == x else int(o_id)
        ctx.touched_relations.add(int(rid))
        other = (
            None
            if s2 == o2
            else await ctx.rows(
                "SELECT id FROM {relations} WHERE space = %(sp)s AND predicate = %(p)s"
                " AND negated = %(n)s AND (subject_id = %(s)s AND object_id = %(o)s"
                " OR %(sym)s AND subject_id = %(o)s AND object_id = %(s)s) ORDER BY id",
                {"sp": space, "p": p, "n": n, "s": s2, "o": o2, "sym": p in symmetric},
            )
        )
        if s2 != o2 and not other:
            await ctx.run(
                "UPDATE {relations} SET subject_id = %s, object_id = %s WHERE id = %s",
                (s2, o2, rid),
            )
            repointed.append(_Repointed(int(rid), s2, str(p), o2, bool(n), vf, vt))
            continue
        # a self-loop now, or a duplicate of the survivor's edge
        if other:
            target = int(other[0][0])
            ctx.touched_relations.add(target)
            await ctx.run(
                "INSERT INTO {relation_sources} (relation_id, chunk_id, doc_key, order_key,"
                " description, confidence, valid_from, valid_to)"
                " SELECT %s, chunk_id, doc_key, order_key, description, confidence,"
                " valid_from, valid_to FROM {relation_sources} WHERE relation_id = %s"
                " ON CONFLICT DO NOTHING",
                (target, rid),
            )
        await ctx.run("DELETE FROM {relation_sources} WHERE relation_id = %s", (rid,))
    return repointed


async def mention_states(
    ctx: WriteContext, touched: set[int], mentioned: set[int]
) -> AsyncCursor[Any] | None:
    """Ask whether each touched entity is dormant and still mentioned, and whether it is
    archived though the version written mentions it (``mentioned``), once the write's
    mentions are final; :func:`reconcile_entities` reads the answer."""
    if not touched:
        return None
    return await ctx.send(
        "SELECT e.id, e.space, e.name, e.type, e.dormant_since IS NOT NULL,"
        " EXISTS (SELECT 1 FROM {mentions} m WHERE m.entity_id = e.id AND m.t_expired IS NULL),"
        " e.archived_since IS NOT NULL AND e.id = ANY(%s)"
        " FROM {entities} e WHERE e.id = ANY(%s) ORDER BY e.id",
        (sorted(mentioned), sorted(touched)),
    )


async def reconcile_entities(
    ctx: WriteContext, states: AsyncCursor[Any] | None, bt: datetime
) -> None:
    """Dormant when the last mention went, revived when mentioned again; restored from
    retention's archive when a version mentions it again (paper §6.1: archival demotes an
    entity nobody asked about, and a document naming it again is new evidence of its value
    — the same reversal as ``tidegraph unarchive``, in the write that brings the evidence,
    so a replay does it alike)."""
    if states is None:
        return
    rows = await ctx.fetch(states)
    flips = [(r[0], r[5]) for r in rows if r[4] == r[5]]
    if flips:
        await ctx.run(
            "UPDATE {entities} e SET dormant_since = CASE WHEN u.m THEN NULL ELSE %s END"
            " FROM unnest(%b::bigint[], %b::bool[]) AS u(i, m) WHERE e.id = u.i",
            (bt, [f[0] for f in flips], [f[1] for f in flips]),
        )
    restored = [r[0] for r in rows if r[6]]
    if restored:
        await ctx.run("UPDATE {entities} SET archived_since = NULL WHERE id = ANY(%s)", (restored,))
    for eid, space, name, typ, dormant, mentioned, archived in rows:
        ref = {"id": str(eid), "name": name, "type": typ}
        if dormant == mentioned:
            kind = ChangeKind.ENTITY_REVIVED if mentioned else ChangeKind.ENTITY_DORMANT
            ctx.changes.add(kind, space, entity=ref)
        if archived:
            ctx.changes.add(ChangeKind.ENTITY_UNARCHIVED, space, entity=ref)


def _entity_ref(entity_id: int, e: EntityRecord) -> dict[str, Any]:
    """The entity as the feed reports it when it is added or changes: every attribute, so
    a consumer mirroring the graph replaces what it holds."""
    return {
        "id": str(entity_id),
        "name": e.name,
        "type": e.type,
        "description": e.description,
        "aliases": sorted(e.aliases),
    }
