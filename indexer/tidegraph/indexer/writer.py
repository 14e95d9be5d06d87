"""The ordered write phase: one record, one transaction (DESIGN invariants 2–7).

Commit order, all in one PostgreSQL transaction:

1. take the realm lock and draw the next commit sequence (``UPDATE meta … RETURNING seq``),
   which also fixes the belief instant (non-decreasing per realm);
2. withdraw the document's previous contribution: expire its chunks, drop their mentions
   and relation provenance;
3. write the new version's chunks, resolve its entities, attach its relations;
4. reconcile every touched relation (weight, order, retraction, supersession) and every
   touched entity (dormancy, revival) against belief time;
5. upsert the document state;
6. append the changes to the outbox under the drawn sequence;
7. advance the consumer position with a compare-and-set (fencing);
8. commit.

A failure anywhere rolls everything back, position included, so a crash at any instant
neither skips nor repeats a record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from tidegraph.indexer import positions
from tidegraph.indexer.errors import RealmSwapped
from tidegraph.indexer.graph_rules import (
    EntityRecord,
    RelationAttrs,
    desired_relation_states,
    merge_entity,
    merge_relation_attrs,
    period_bounds,
    render_entity,
    render_relation,
)
from tidegraph.indexer.interfaces import Embedder
from tidegraph.indexer.plan import PreparedDocument, RecordPosition
from tidegraph.indexer.realms import RealmInfo
from tidegraph.indexer.resolution import merge_records


@dataclass
class ChangeSet:
    """Changes of one transaction, in the order they happened."""

    space: str
    items: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def add(self, kind: str, space: str | None = None, **payload: Any) -> None:
        self.items.append((kind, space or self.space, payload))


@dataclass(frozen=True)
class WriteResult:
    """What a record's transaction did."""

    seq: int | None
    """Commit sequence drawn, ``None`` when nothing but the position moved."""
    kinds: tuple[str, ...]
    """Kinds of the changes appended, in order."""
    status: str
    """Document status after the write."""


def _t(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


async def advance_only(conn: AsyncConnection[Any], pos: RecordPosition) -> None:
    """No-op, stale and dead-lettered records: move the position, write nothing else."""
    async with conn.transaction():
        await positions.advance(
            conn, pos.group_id, pos.topic, pos.partition, pos.offset, pos.epoch
        )


async def write_document(
    conn: AsyncConnection[Any], info: RealmInfo, pos: RecordPosition, embedder: Embedder,
    doc: PreparedDocument | None, *, space: str, doc_key: str, source_version: str | None,
) -> WriteResult:
    """Apply (``doc`` given) or delete (``doc`` None) one document version atomically.

    Runs in pipeline mode: statements whose results are not read (history moves, attribute
    updates, dormancy) travel together instead of one round trip each.
    """
    async with conn.transaction(), conn.pipeline():
        w = _Writer(conn, info, embedder)
        seq, bt, communities_stale = await w.begin(pos.log_time)
        changes = ChangeSet(space)
        previous = await w.previous_status(space, doc_key)
        old_entities, old_relations = await w.withdraw(space, doc_key, bt)
        new_entities: set[int] = set()
        new_relations: set[int] = set()
        failure = doc.failure if doc is not None else None
        if doc is None:
            status = "deleted"
            changes.add("document_deleted", doc_key=doc_key)
        elif failure is not None:
            status = "failed"
            changes.add("document_failed", doc_key=doc_key, error=failure)
        else:
            status = "indexed"
            replaced = previous in ("indexed", "failed")
            changes.add("document_replaced" if replaced else "document_indexed", doc_key=doc_key)
            new_entities, new_relations = await w.write_contribution(doc, bt, changes)
        await w.reconcile_relations(
            old_relations | new_relations, bt, changes, dict(doc.vectors) if doc else None
        )
        await w.reconcile_entities(old_entities | new_entities, bt, changes)
        if communities_stale:
            changes.add("communities_stale")
        await w.upsert_document(space, doc_key, status, doc, source_version, failure, bt)
        await w.append_outbox(seq, bt, changes)
        await positions.advance(
            conn, pos.group_id, pos.topic, pos.partition, pos.offset, pos.epoch
        )
    return WriteResult(seq, tuple(k for k, _, _ in changes.items), status)


class _Writer:
    """Statements of one write transaction; holds no state beyond it."""

    def __init__(self, conn: AsyncConnection[Any], info: RealmInfo, embedder: Embedder) -> None:
        self.conn = conn
        self.info = info
        self.s = info.schema
        self.embedder = embedder
        self.touched_relations: set[int] = set()
        """Relations re-pointed or emptied by an entity merge: reconciled with the rest."""

    async def _rows(
        self, query: sql.Composed, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[Any]:
        cur = await self.conn.execute(query, params)
        rows: list[Any] = await cur.fetchall()
        return rows

    async def begin(self, log_time: datetime) -> tuple[int, datetime, bool]:
        """Realm lock, sequence and belief instant in one statement.

        Also reports whether this write is the first since communities were built (so the
        feed says once that they are stale), and refuses to write into a schema a replay
        swapped out: the caller's transaction rolls back and retries against the new one.
        """
        rows = await self._rows(
            sql.SQL(
                "UPDATE {meta} m SET seq = m.seq + 1,"
                " last_write_at = greatest(coalesce(m.last_write_at, %(t)s), %(t)s),"
                " communities_stale = m.communities_built_at IS NOT NULL"
                " FROM (SELECT communities_stale AS was FROM {meta} FOR UPDATE) old"
                " RETURNING m.seq, m.last_write_at,"
                " m.communities_built_at IS NOT NULL AND NOT old.was, m.swapped_out"
            ).format(meta=_t(self.s, "meta")),
            {"t": log_time},
        )
        seq, bt, stale, swapped_out = rows[0]
        if swapped_out:
            raise RealmSwapped(self.info.realm)
        return int(seq), bt, bool(stale)

    async def previous_status(self, space: str, doc_key: str) -> str | None:
        rows = await self._rows(
            sql.SQL("SELECT status FROM {} WHERE space = %s AND doc_key = %s FOR UPDATE").format(
                _t(self.s, "documents")
            ),
            (space, doc_key),
        )
        return str(rows[0][0]) if rows else None

    async def withdraw(self, space: str, doc_key: str, bt: datetime) -> tuple[set[int], set[int]]:
        """Expire the document's live chunks; return entities and relations they touched."""
        chunk_ids = [
            r[0]
            for r in await self._rows(
                sql.SQL(
                    "UPDATE {} SET t_expired = %s WHERE space = %s AND doc_key = %s"
                    " AND t_expired IS NULL RETURNING id"
                ).format(_t(self.s, "chunks")),
                (bt, space, doc_key),
            )
        ]
        if not chunk_ids:
            return set(), set()
        entities = {
            r[0]
            for r in await self._rows(
                sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s) RETURNING entity_id").format(
                    _t(self.s, "mentions")
                ),
                (chunk_ids,),
            )
        }
        relations = {
            r[0]
            for r in await self._rows(
                sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s) RETURNING relation_id").format(
                    _t(self.s, "relation_sources")
                ),
                (chunk_ids,),
            )
        }
        return entities, relations

    async def _vectors(self, texts: Sequence[str], known: dict[str, list[float]]) -> list[Any]:
        missing = sorted({t for t in texts if t not in known})
        if missing:
            for text, vec in zip(missing, await self.embedder.embed(missing), strict=True):
                known[text] = vec
        return [_vec_text(known[t]) for t in texts]

    async def write_contribution(
        self, doc: PreparedDocument, bt: datetime, changes: ChangeSet
    ) -> tuple[set[int], set[int]]:
        """Chunks, entities, mentions, relations and provenance of a new version."""
        space = doc.space
        vectors = dict(doc.vectors)
        chunk_rows = await self._rows(
            sql.SQL(
                "INSERT INTO {} (space, doc_key, ordinal, text, content_hash, metadata,"
                " embedding, t_created)"
                " SELECT %s, %s, o, t, %s, m, e::vector, %s"
                " FROM unnest(%s::int[], %s::text[], %s::jsonb[], %s::text[]) AS u(o, t, m, e)"
                " RETURNING id, ordinal"
            ).format(_t(self.s, "chunks")),
            (
                space, doc.doc_key, doc.content_hash, bt,
                [c.ordinal for c in doc.chunks],
                [c.text for c in doc.chunks],
                [Jsonb(c.metadata) for c in doc.chunks],
                [_vec_text(c.embedding) for c in doc.chunks],
            ),
        )
        chunk_id = {int(o): int(i) for i, o in chunk_rows}

        ids = await self._resolve_entities(doc, bt, vectors, changes)

        mention_pairs = sorted(
            {
                (chunk_id[c.ordinal], ids[name.lower()])
                for c in doc.chunks
                for name in [e.name for e in c.entities]
                + [n for r in c.relations for n in (r.subject, r.object)]
            }
        )
        if mention_pairs:
            await self.conn.execute(
                sql.SQL(
                    "INSERT INTO {} (chunk_id, entity_id)"
                    " SELECT * FROM unnest(%s::bigint[], %s::bigint[]) ON CONFLICT DO NOTHING"
                ).format(_t(self.s, "mentions")),
                ([p[0] for p in mention_pairs], [p[1] for p in mention_pairs]),
            )
        relation_ids = await self._attach_relations(doc, chunk_id, ids, bt, vectors)
        return {p[1] for p in mention_pairs}, relation_ids | self.touched_relations

    async def _resolve_entities(
        self, doc: PreparedDocument, bt: datetime, vectors: dict[str, list[float]],
        changes: ChangeSet,
    ) -> dict[str, int]:
        """Resolve every entity of the document to a row; return lower(surface) → id."""
        facts: dict[str, EntityRecord] = {}
        for chunk in doc.chunks:
            for e in chunk.entities:
                rec = EntityRecord(e.name, e.type, e.description, e.aliases)
                key = e.name.lower()
                facts[key] = merge_entity(facts[key], rec) if key in facts else rec
            for r in chunk.relations:
                for name in (r.subject, r.object):
                    facts.setdefault(name.lower(), EntityRecord(name))
        keys = sorted({k for k in facts} | {a.lower() for f in facts.values() for a in f.aliases})
        by_name: dict[str, tuple[int, EntityRecord]] = {}
        for i, name, typ, desc, aliases in await self._rows(
            sql.SQL(
                "SELECT id, name, type, description, aliases FROM {}"
                " WHERE space = %s AND lower(name) = ANY(%s)"
            ).format(_t(self.s, "entities")),
            (doc.space, keys),
        ):
            by_name[name.lower()] = (int(i), EntityRecord(name, typ, desc, tuple(aliases)))
        by_alias: dict[str, tuple[int, EntityRecord]] = {}
        for alias, i, name, typ, desc, aliases in await self._rows(
            sql.SQL(
                "SELECT a.alias_lower, e.id, e.name, e.type, e.description, e.aliases"
                " FROM {} a JOIN {} e ON e.id = a.entity_id"
                " WHERE a.space = %s AND a.alias_lower = ANY(%s) ORDER BY e.id"
            ).format(_t(self.s, "entity_aliases"), _t(self.s, "entities")),
            (doc.space, keys),
        ):
            by_alias.setdefault(alias, (int(i), EntityRecord(name, typ, desc, tuple(aliases))))

        # Decide everything in memory first (new rows get provisional negative ids), then
        # write with a handful of set-based statements instead of one round trip per row.
        # A fact whose surface forms reach several records (stored or new in this
        # document) proves them one entity: they merge into one survivor, the others are
        # absorbed (resolution.py: entities are the connected components of "shares a
        # surface form", whatever the arrival order).
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
            probes = [key, *sorted(a.lower() for a in fact.aliases)]
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
                canonical = merged.name.lower()
                entity_id = min(
                    hits, key=lambda i: (i < 0, hits[i].name.lower() != canonical, abs(i))
                )
                current = hits[entity_id]
                if (
                    canonical != current.name.lower()
                    and canonical in by_name
                    and by_name[canonical][0] not in hits
                ):
                    merged = EntityRecord(
                        current.name, merged.type, merged.description,
                        (*merged.aliases, merged.name),
                    )
                for other in hits:
                    if other != entity_id:
                        absorbed[other] = entity_id
                        pending.pop(other, None)
                        updated.pop(other, None)
            if entity_id < 0:
                pending[entity_id] = merged
            elif merged != stored[entity_id]:
                updated[entity_id] = merged
            latest[entity_id] = merged
            forms = {
                f.lower() for r in (merged, fact, *hits.values()) for f in (r.name, *r.aliases)
            }
            for form in forms:
                ids[form] = entity_id
                for table in (by_name, by_alias):
                    if form in table and table[form][0] in absorbed:
                        table[form] = (entity_id, merged)
            by_name[merged.name.lower()] = (entity_id, merged)
            for a in merged.aliases:
                by_alias.setdefault(a.lower(), (entity_id, merged))

        def survivor(i: int) -> int:
            while i in absorbed:
                i = absorbed[i]
            return i

        ids = {k: survivor(v) for k, v in ids.items()}
        temp = sorted(pending, reverse=True)
        vecs = await self._vectors(
            [render_entity(e.name, e.description) for e in [*map(pending.get, temp),
                                                             *updated.values()] if e],
            vectors,
        )
        real: dict[int, int] = {}
        if temp:
            rows = await self._rows(
                sql.SQL(
                    "INSERT INTO {} (space, name, type, description, aliases, embedding,"
                    " created_at) SELECT %s, n, t, d,"
                    " ARRAY(SELECT jsonb_array_elements_text(a)), e::vector, %s"
                    " FROM unnest(%s::text[], %s::text[], %s::text[], %s::jsonb[], %s::text[])"
                    " AS u(n, t, d, a, e) RETURNING id, name"
                ).format(_t(self.s, "entities")),
                (
                    doc.space, bt,
                    [pending[t].name for t in temp], [pending[t].type for t in temp],
                    [pending[t].description for t in temp],
                    [Jsonb(sorted(pending[t].aliases)) for t in temp],
                    vecs[: len(temp)],
                ),
            )
            returned = {str(name): int(i) for i, name in rows}
            for t in temp:
                real[t] = returned[pending[t].name]
                changes.add("entity_added", doc.space, entity=_entity_ref(real[t], pending[t]))
        if updated:
            async with self.conn.cursor() as cur:
                await cur.executemany(
                    sql.SQL(
                        "UPDATE {} SET name = %s, type = %s, description = %s, aliases = %s,"
                        " embedding = %s::vector WHERE id = %s"
                    ).format(_t(self.s, "entities")),
                    [
                        (e.name, e.type, e.description, sorted(e.aliases), vec, entity_id)
                        for (entity_id, e), vec in zip(
                            updated.items(), vecs[len(temp):], strict=True
                        )
                    ],
                )
        ids = {k: real.get(v, v) for k, v in ids.items()}
        alias_rows = sorted(
            {
                (a.lower(), real.get(entity_id, entity_id))
                for entity_id, e in [*pending.items(), *updated.items()]
                for a in e.aliases
            }
        )
        if alias_rows:
            await self.conn.execute(
                sql.SQL(
                    "INSERT INTO {} (space, alias_lower, entity_id)"
                    " SELECT %s, a, i FROM unnest(%s::text[], %s::bigint[]) AS u(a, i)"
                    " ON CONFLICT DO NOTHING"
                ).format(_t(self.s, "entity_aliases")),
                (doc.space, [a for a, _ in alias_rows], [i for _, i in alias_rows]),
            )
        moves = {x: survivor(x) for x in absorbed if x > 0}
        if moves:
            await self._absorb(doc.space, moves, bt, vectors, changes)
        return ids

    async def _absorb(
        self, space: str, moves: dict[int, int], bt: datetime,
        vectors: dict[str, list[float]], changes: ChangeSet,
    ) -> None:
        """Fold stored entities into the one they were proven to be (``moves``: absorbed →
        survivor, already holding the merged record).

        Mentions and relations move to the survivor. A relation keeps its id (and so its
        belief history) when the survivor has no edge with the same key; otherwise its
        provenance moves into that edge and it is left without any, so reconciliation
        retracts it in belief time. The absorbed row is deleted once nothing refers to it;
        otherwise it stays dormant without surface forms of its own.
        """
        m, e = _t(self.s, "mentions"), _t(self.s, "entities")
        rel, src = _t(self.s, "relations"), _t(self.s, "relation_sources")
        repointed: list[tuple[int, int, str, int, bool, str | None, str | None]] = []
        for x, k in sorted(moves.items()):
            await self.conn.execute(
                sql.SQL(
                    "INSERT INTO {m} (chunk_id, entity_id) SELECT chunk_id, %s FROM {m}"
                    " WHERE entity_id = %s ON CONFLICT DO NOTHING"
                ).format(m=m),
                (k, x),
            )
            for table in ("mentions", "entity_aliases", "community_members"):
                await self.conn.execute(
                    sql.SQL("DELETE FROM {} WHERE entity_id = %s").format(_t(self.s, table)),
                    (x,),
                )
            keep = False
            for rid, s_id, p, o_id, n, vf, vt in await self._rows(
                sql.SQL(
                    "SELECT id, subject_id, predicate, object_id, negated, valid_from, valid_to"
                    " FROM {} WHERE space = %s AND (subject_id = %s OR object_id = %s)"
                    " ORDER BY id"
                ).format(rel),
                (space, x, x),
            ):
                s2 = k if s_id == x else int(s_id)
                o2 = k if o_id == x else int(o_id)
                self.touched_relations.add(int(rid))
                other = None if s2 == o2 else await self._rows(
                    sql.SQL(
                        "SELECT id FROM {} WHERE space = %s AND subject_id = %s"
                        " AND predicate = %s AND object_id = %s AND negated = %s"
                    ).format(rel),
                    (space, s2, p, o2, n),
                )
                if s2 != o2 and not other:
                    await self.conn.execute(
                        sql.SQL("UPDATE {} SET subject_id = %s, object_id = %s WHERE id = %s")
                        .format(rel),
                        (s2, o2, rid),
                    )
                    repointed.append((int(rid), s2, str(p), o2, bool(n), vf, vt))
                    continue
                keep = True  # a self-loop now, or a duplicate of the survivor's edge
                if other:
                    target = int(other[0][0])
                    self.touched_relations.add(target)
                    await self.conn.execute(
                        sql.SQL(
                            "INSERT INTO {s} (relation_id, chunk_id, doc_key, order_key,"
                            " description, confidence, valid_from, valid_to)"
                            " SELECT %s, chunk_id, doc_key, order_key, description, confidence,"
                            " valid_from, valid_to FROM {s} WHERE relation_id = %s"
                            " ON CONFLICT DO NOTHING"
                        ).format(s=src),
                        (target, rid),
                    )
                await self.conn.execute(
                    sql.SQL("DELETE FROM {} WHERE relation_id = %s").format(src), (rid,)
                )
            ((name, typ),) = await self._rows(
                sql.SQL("SELECT name, type FROM {} WHERE id = %s").format(e), (x,)
            )
            ref = {"id": str(x), "name": str(name), "type": str(typ)}
            changes.add("entity_dormant", space, entity=ref, merged_into=str(k))
            if keep:
                await self.conn.execute(
                    sql.SQL(
                        "UPDATE {} SET aliases = '{{}}',"
                        " dormant_since = coalesce(dormant_since, %s) WHERE id = %s"
                    ).format(e),
                    (bt, x),
                )
            else:
                await self.conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(e), (x,))
        if repointed:
            names = await self._entity_names({r[1] for r in repointed} | {r[3] for r in repointed})
            texts = [render_relation(names[s], p, names[o], n, vf, vt)
                     for _, s, p, o, n, vf, vt in repointed]
            vecs = await self._vectors(texts, vectors)
            async with self.conn.cursor() as cur:
                await cur.executemany(
                    sql.SQL("UPDATE {} SET rendered = %s, embedding = %s::vector WHERE id = %s")
                    .format(rel),
                    [(t, v, r[0]) for r, t, v in zip(repointed, texts, vecs, strict=True)],
                )

    async def _attach_relations(
        self, doc: PreparedDocument, chunk_id: dict[int, int], ids: dict[str, int],
        bt: datetime, vectors: dict[str, list[float]],
    ) -> set[int]:
        """One edge per (subject, predicate, object, negated); provenance per chunk.

        Attributes of an existing edge are not touched here: ``reconcile_relations``
        recomputes them from every live contribution, this document's included.
        """
        grouped: dict[tuple[int, str, int, bool], dict[int, list[RelationAttrs]]] = {}
        for c in doc.chunks:
            for r in c.relations:
                key = (ids[r.subject.lower()], r.predicate, ids[r.object.lower()], r.negated)
                if key[0] == key[2]:
                    continue  # both ends resolved to one entity: a self-loop asserts nothing
                by_chunk = grouped.setdefault(key, {})
                by_chunk.setdefault(chunk_id[c.ordinal], []).append(
                    (r.description, r.confidence, r.valid_from, r.valid_to)
                )
        if not grouped:
            return set()
        keys = sorted(grouped)
        existing = {
            (int(s), p, int(o), bool(n)): int(i)
            for i, s, p, o, n in await self._rows(
                sql.SQL(
                    "SELECT r.id, r.subject_id, r.predicate, r.object_id, r.negated FROM {} r"
                    " JOIN unnest(%s::bigint[], %s::text[], %s::bigint[], %s::bool[])"
                    " AS k(s, p, o, n) ON r.subject_id = k.s AND r.predicate = k.p"
                    " AND r.object_id = k.o AND r.negated = k.n WHERE r.space = %s"
                ).format(_t(self.s, "relations")),
                (
                    [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
                    [k[3] for k in keys], doc.space,
                ),
            )
        }
        names = await self._entity_names({k[0] for k in keys} | {k[2] for k in keys})
        said: dict[tuple[int, str, int, bool], dict[int, RelationAttrs]] = {
            key: {
                cid: merge_relation_attrs((str(cid), a) for a in attrs)
                for cid, attrs in grouped[key].items()
            }
            for key in keys
        }
        fresh = [k for k in keys if k not in existing]
        if fresh:
            attrs = [merge_relation_attrs((str(c), a) for c, a in said[k].items()) for k in fresh]
            texts = [
                render_relation(names[k[0]], k[1], names[k[2]], k[3], a[2], a[3])
                for k, a in zip(fresh, attrs, strict=True)
            ]
            vecs = await self._vectors(texts, vectors)
            bounds = [period_bounds(a[2], a[3]) for a in attrs]
            rows = await self._rows(
                sql.SQL(
                    "INSERT INTO {} (space, subject_id, predicate, object_id, negated,"
                    " description, confidence, valid_from, valid_to, valid_from_d,"
                    " valid_to_d, weight, order_key, status, t_created, rendered, embedding)"
                    " SELECT %s, s, p, o, n, d, c, vf, vt, lo, hi, 0, %s, 'retracted', %s,"
                    " r, e::vector FROM unnest(%s::bigint[], %s::text[], %s::bigint[],"
                    " %s::bool[], %s::text[], %s::real[], %s::text[], %s::text[], %s::date[],"
                    " %s::date[], %s::text[], %s::text[])"
                    " AS u(s, p, o, n, d, c, vf, vt, lo, hi, r, e)"
                    " RETURNING id, subject_id, predicate, object_id, negated"
                ).format(_t(self.s, "relations")),
                (
                    doc.space, doc.order_key, bt,
                    [k[0] for k in fresh], [k[1] for k in fresh], [k[2] for k in fresh],
                    [k[3] for k in fresh], [a[0] for a in attrs], [a[1] for a in attrs],
                    [a[2] for a in attrs], [a[3] for a in attrs],
                    [b[0] for b in bounds], [b[1] for b in bounds], texts, vecs,
                ),
            )
            for i, s_id, p, o_id, n in rows:
                existing[(int(s_id), str(p), int(o_id), bool(n))] = int(i)
        sources = [
            (existing[key], cid, a) for key in keys for cid, a in sorted(said[key].items())
        ]
        relation_ids = {existing[key] for key in keys}
        await self.conn.execute(
            sql.SQL(
                "INSERT INTO {} (relation_id, chunk_id, doc_key, order_key, description,"
                " confidence, valid_from, valid_to)"
                " SELECT r, c, %s, %s, d, f, vf, vt FROM unnest(%s::bigint[], %s::bigint[],"
                " %s::text[], %s::real[], %s::text[], %s::text[]) AS u(r, c, d, f, vf, vt)"
                " ON CONFLICT DO NOTHING"
            ).format(_t(self.s, "relation_sources")),
            (
                doc.doc_key, doc.order_key,
                [x[0] for x in sources], [x[1] for x in sources],
                [x[2][0] for x in sources], [x[2][1] for x in sources],
                [x[2][2] for x in sources], [x[2][3] for x in sources],
            ),
        )
        return relation_ids

    async def _entity_names(self, entity_ids: set[int]) -> dict[int, str]:
        rows = await self._rows(
            sql.SQL("SELECT id, name FROM {} WHERE id = ANY(%s)").format(
                _t(self.s, "entities")
            ),
            (sorted(entity_ids),),
        )
        return {int(i): str(n) for i, n in rows}

    async def reconcile_relations(
        self, touched: set[int], bt: datetime, changes: ChangeSet,
        vectors: dict[str, list[float]] | None = None,
    ) -> None:
        """Weight, attributes, order, retraction and supersession on every touched pair.

        Everything is recomputed from live provenance, so a withdrawn chunk takes its
        description, confidence and stated period with it.
        """
        if not touched:
            return
        rows = await self._rows(
            sql.SQL(
                "WITH pairs AS (SELECT DISTINCT space, subject_id, object_id FROM {rel}"
                "  WHERE id = ANY(%s))"
                " SELECT r.id, r.space, r.subject_id, r.predicate, r.object_id, r.negated,"
                "  r.weight, r.order_key, r.description, r.confidence, r.valid_from,"
                "  r.valid_to, h.state, h.superseded_by, h.t_created, r.rendered"
                " FROM {rel} r JOIN pairs USING (space, subject_id, object_id)"
                " LEFT JOIN {hist} h ON h.relation_id = r.id AND h.t_expired IS NULL"
                " ORDER BY r.id"
            ).format(rel=_t(self.s, "relations"), hist=_t(self.s, "relation_history")),
            (sorted(touched),),
        )
        contributions: dict[int, list[tuple[str, RelationAttrs]]] = {}
        orders: dict[int, str] = {}
        for rid, cid, order_key, d, c, vf, vt in await self._rows(
            sql.SQL(
                "SELECT relation_id, chunk_id, order_key, description, confidence, valid_from,"
                " valid_to FROM {} WHERE relation_id = ANY(%s)"
            ).format(_t(self.s, "relation_sources")),
            ([int(r[0]) for r in rows],),
        ):
            contributions.setdefault(int(rid), []).append((str(cid), (d, float(c), vf, vt)))
            orders[int(rid)] = max(orders.get(int(rid), ""), order_key or "")
        live = [
            (int(r[0]), (str(r[1]), int(r[2]), int(r[4])), str(r[3]), bool(r[5]),
             orders.get(int(r[0])))
            for r in rows
            if int(r[0]) in contributions
        ]
        desired = desired_relation_states(live, self.info.exclusive_groups)
        names = await self._entity_names({int(r[2]) for r in rows} | {int(r[4]) for r in rows})
        vectors = {} if vectors is None else vectors
        attr_updates: list[tuple[Any, ...]] = []
        text_updates: list[tuple[int, str]] = []
        zeroed: list[int] = []
        transitions: list[tuple[Any, ...]] = []
        for r in rows:
            rid, space = int(r[0]), str(r[1])
            subject, obj = names[int(r[2])], names[int(r[4])]
            predicate, negated = str(r[3]), bool(r[5])
            mine = contributions.get(rid)
            if mine:
                weight, order_key = len(mine), orders[rid]
                attrs = merge_relation_attrs(mine)
                stored = (int(r[6]), r[7], r[8], float(r[9]), r[10], r[11])
                if (weight, order_key, *attrs) != stored:
                    lo, hi = period_bounds(attrs[2], attrs[3])
                    attr_updates.append((weight, order_key, *attrs, lo, hi, rid))
                    text = render_relation(subject, predicate, obj, negated, attrs[2], attrs[3])
                    if text != r[15]:
                        text_updates.append((rid, text))
                valid_from, valid_to = attrs[2], attrs[3]
            else:
                valid_from, valid_to = r[10], r[11]
                if int(r[6]) != 0:
                    zeroed.append(rid)
            transitions.append((r, rid, space, subject, predicate, obj, negated,
                                valid_from, valid_to))
        rel = _t(self.s, "relations")
        async with self.conn.cursor() as cur:
            if attr_updates:
                await cur.executemany(
                    sql.SQL(
                        "UPDATE {} SET weight = %s, order_key = %s, description = %s,"
                        " confidence = %s, valid_from = %s, valid_to = %s,"
                        " valid_from_d = %s, valid_to_d = %s WHERE id = %s"
                    ).format(rel),
                    attr_updates,
                )
            if text_updates:
                vecs = await self._vectors([t for _, t in text_updates], vectors)
                await cur.executemany(
                    sql.SQL("UPDATE {} SET rendered = %s, embedding = %s::vector WHERE id = %s")
                    .format(rel),
                    [(t, v, rid) for (rid, t), v in zip(text_updates, vecs, strict=True)],
                )
            if zeroed:
                await cur.execute(
                    sql.SQL("UPDATE {} SET weight = 0 WHERE id = ANY(%s)").format(rel), (zeroed,)
                )
        for r, rid, space, subject, predicate, obj, negated, valid_from, valid_to in transitions:
            want = desired.get(rid, ("retracted", None))
            have = ("retracted", None) if r[12] is None else (
                str(r[12]), int(r[13]) if r[13] is not None else None
            )
            if want == have:
                continue
            await self._move_history(rid, have, want, r[14], bt)
            ref = {
                "id": str(rid), "subject": subject, "predicate": predicate, "object": obj,
                "negated": negated, "valid_from": valid_from, "valid_to": valid_to,
            }
            for kind, by in _transition_kinds(have, want):
                extra = {"superseded_by": str(by)} if by is not None else {}
                changes.add(kind, space, relation=ref, **extra)

    async def _move_history(
        self, rid: int, have: tuple[str, int | None], want: tuple[str, int | None],
        open_since: datetime | None, bt: datetime,
    ) -> None:
        hist = _t(self.s, "relation_history")
        rel = _t(self.s, "relations")
        if have[0] != "retracted":
            if open_since == bt:
                await self.conn.execute(
                    sql.SQL("DELETE FROM {} WHERE relation_id = %s AND t_created = %s").format(
                        hist
                    ),
                    (rid, bt),
                )
            else:
                await self.conn.execute(
                    sql.SQL(
                        "UPDATE {} SET t_expired = %s WHERE relation_id = %s AND t_expired IS NULL"
                    ).format(hist),
                    (bt, rid),
                )
        if want[0] != "retracted":
            await self.conn.execute(
                sql.SQL(
                    "INSERT INTO {} (relation_id, state, superseded_by, t_created)"
                    " VALUES (%s, %s, %s, %s)"
                ).format(hist),
                (rid, want[0], want[1], bt),
            )
        await self.conn.execute(
            sql.SQL(
                "UPDATE {} SET status = %s, superseded_by = %s,"
                " t_expired = CASE WHEN %s = 'current' THEN NULL ELSE %s END WHERE id = %s"
            ).format(rel),
            (want[0], want[1], want[0], bt, rid),
        )

    async def reconcile_entities(self, touched: set[int], bt: datetime, changes: ChangeSet) -> None:
        """Dormant when the last mention went, revived when mentioned again."""
        if not touched:
            return
        rows = await self._rows(
            sql.SQL(
                "SELECT e.id, e.space, e.name, e.type, e.dormant_since IS NOT NULL,"
                " EXISTS (SELECT 1 FROM {m} m WHERE m.entity_id = e.id)"
                " FROM {e} e WHERE e.id = ANY(%s) ORDER BY e.id"
            ).format(m=_t(self.s, "mentions"), e=_t(self.s, "entities")),
            (sorted(touched),),
        )
        for eid, space, name, typ, dormant, mentioned in rows:
            if dormant == mentioned:
                await self.conn.execute(
                    sql.SQL("UPDATE {} SET dormant_since = %s WHERE id = %s").format(
                        _t(self.s, "entities")
                    ),
                    (None if mentioned else bt, eid),
                )
                ref = {"id": str(eid), "name": name, "type": typ}
                changes.add("entity_revived" if mentioned else "entity_dormant", space, entity=ref)

    async def upsert_document(
        self, space: str, doc_key: str, status: str, doc: PreparedDocument | None,
        source_version: str | None, error: str | None, bt: datetime,
    ) -> None:
        await self.conn.execute(
            sql.SQL(
                "INSERT INTO {} AS d (space, doc_key, status, content_hash, source_version,"
                " order_key, title, source, metadata, error, chunk_count, indexed_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (space, doc_key) DO UPDATE SET status = excluded.status,"
                " content_hash = excluded.content_hash,"
                " source_version = coalesce(excluded.source_version, d.source_version),"
                " order_key = coalesce(excluded.order_key, d.order_key),"
                " title = coalesce(excluded.title, d.title),"
                " source = coalesce(excluded.source, d.source),"
                " metadata = excluded.metadata, error = excluded.error,"
                " chunk_count = excluded.chunk_count, indexed_at = excluded.indexed_at,"
                " applied_at = clock_timestamp()"
            ).format(_t(self.s, "documents")),
            (
                space, doc_key, status,
                doc.content_hash if doc else None,
                source_version,
                doc.order_key if doc else None,
                doc.title if doc else None,
                doc.source if doc else None,
                Jsonb(doc.metadata if doc else {}),
                error,
                len(doc.chunks) if doc and status == "indexed" else 0,
                bt,
            ),
        )

    async def append_outbox(self, seq: int, bt: datetime, changes: ChangeSet) -> None:
        if not changes.items:
            return
        await self.conn.execute(
            sql.SQL(
                "INSERT INTO {} (seq, idx, kind, space, belief_time, payload)"
                " SELECT %s, i - 1, k, s, %s, p"
                " FROM unnest(%s::text[], %s::text[], %s::jsonb[]) WITH ORDINALITY AS u(k, s, p, i)"
            ).format(_t(self.s, "outbox")),
            (
                seq, bt,
                [k for k, _, _ in changes.items],
                [s for _, s, _ in changes.items],
                [Jsonb(p) for _, _, p in changes.items],
            ),
        )


def _transition_kinds(
    have: tuple[str, int | None], want: tuple[str, int | None]
) -> list[tuple[str, int | None]]:
    """Change kinds for a relation moving between belief states."""
    h, w = have[0], want[0]
    if w == "retracted":
        return [("relation_retracted", None)]
    if w == "current":
        return [("relation_restored" if h == "superseded" else "relation_added", None)]
    if h == "retracted":
        return [("relation_added", None), ("relation_superseded", want[1])]
    return [("relation_superseded", want[1])]


def _entity_ref(entity_id: int, e: EntityRecord) -> dict[str, str]:
    return {"id": str(entity_id), "name": e.name, "type": e.type}


def _vec_text(v: list[float]) -> str:
    """pgvector's text form; ``repr`` of floats is exact and far cheaper than formatting."""
    return repr(v)
