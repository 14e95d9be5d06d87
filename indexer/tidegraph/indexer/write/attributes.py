"""Entity attributes in belief time: what each live chunk says an entity is, the type and
description derived from it, and the append-only history of every entity's attributes.

A write records its chunks' contributions (``entity_sources``), withdrawing a version
drops its chunks' contributions with their mentions (``writer``), and a merge moves them
to the survivor. Once every row of the write is final, :func:`settle_attributes` derives
each touched entity's type and description from its live contributions
(:mod:`~tidegraph.indexer.graph.attributes`), stores what changed and reports it once as
``entity_updated``, then records the belief history of every touched entity
(:data:`~tidegraph.store.belief.ENTITIES`). ``as_believed_at`` reads take an entity as the
interval open at the instant holds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from psycopg import AsyncCursor

from tidegraph.indexer.extraction import PreparedDocument
from tidegraph.indexer.graph import (
    CONCEPT,
    Attributes,
    Contribution,
    EntityRecord,
    derive_attributes,
    render_entity,
)
from tidegraph.indexer.write.context import WriteContext
from tidegraph.schemas import name_key
from tidegraph.store import ENTITIES


def contributions(
    doc: PreparedDocument, chunk_ids: Mapping[int, int], ids: Mapping[str, int]
) -> list[tuple[int, int, str | None, str]]:
    """(entity id, chunk id, type or ``None``, description) per entity a chunk states facts
    about, reduced by the derivation rule within the chunk; a chunk that only names an
    entity (a relation endpoint) or gives it neither type nor description contributes
    nothing."""
    grouped: dict[tuple[int, int], list[Contribution]] = {}
    for chunk in doc.chunks:
        for e in chunk.entities:
            rec = EntityRecord(e.name, e.type, e.description)
            key = (ids[name_key(e.name)], chunk_ids[chunk.ordinal])
            grouped.setdefault(key, []).append(Contribution(rec.type, rec.description))
    rows = []
    for (entity_id, chunk_id), items in sorted(grouped.items()):
        typ, description = derive_attributes(items)
        if typ != CONCEPT or description:
            rows.append((entity_id, chunk_id, typ if typ != CONCEPT else None, description))
    return rows


def kept_attributes(merged: EntityRecord, stored: EntityRecord) -> EntityRecord:
    """A stored entity's record after resolution: names and aliases as merged, type and
    description as stored — those are derived afterwards from the live contributions
    (:func:`settle_attributes`), not accumulated."""
    return EntityRecord(merged.name, stored.type, stored.description, merged.aliases)


async def record_sources(
    ctx: WriteContext, doc: PreparedDocument, chunk_ids: Mapping[int, int], ids: Mapping[str, int]
) -> None:
    """Store what the version's chunks say each entity is (no round trip)."""
    rows = contributions(doc, chunk_ids, ids)
    if rows:
        await ctx.run(
            "INSERT INTO {entity_sources} (entity_id, chunk_id, type, description)"
            " SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::text[], %b::text[])",
            (
                [r[0] for r in rows],
                [r[1] for r in rows],
                [r[2] for r in rows],
                [r[3] for r in rows],
            ),
        )


async def move_sources(ctx: WriteContext, moves: Mapping[int, int]) -> None:
    """Hand the contributions of absorbed entities to their survivors (``moves``: absorbed
    → survivor), before the absorbed rows may be deleted."""
    pairs = sorted(moves.items())
    await ctx.run(
        "UPDATE {entity_sources} s SET entity_id = u.k"
        " FROM unnest(%b::bigint[], %b::bigint[]) AS u(x, k) WHERE s.entity_id = u.x",
        ([x for x, _ in pairs], [k for _, k in pairs]),
    )


async def attribute_states(ctx: WriteContext, touched: Iterable[int]) -> AsyncCursor[Any] | None:
    """Ask for each touched entity's stored attributes and live contributions, once the
    write's contributions are final; :func:`settle_attributes` reads the answer."""
    ids = sorted(set(touched))
    if not ids:
        return None
    # Per-entity subqueries: each probes the entity's own contributions through
    # entity_sources_entity, so the cost follows the touched entities, never the realm.
    return await ctx.send(
        "SELECT e.id, e.space, e.name, e.type, e.description, e.aliases,"
        " ARRAY(SELECT DISTINCT s.type FROM {entity_sources} s"
        "  WHERE s.entity_id = e.id AND s.type IS NOT NULL),"
        " ARRAY(SELECT DISTINCT s.description FROM {entity_sources} s"
        "  WHERE s.entity_id = e.id AND s.description <> '')"
        " FROM {entities} e WHERE e.id = ANY(%s) ORDER BY e.id",
        (ids,),
    )


async def settle_attributes(
    ctx: WriteContext, states: AsyncCursor[Any] | None, touched: Iterable[int], bt: datetime
) -> None:
    """Store each touched entity's derived type and description where they changed,
    report each changed entity once, and record the touched entities' attribute history
    at belief instant ``bt`` (``touched`` includes entities merged away, whose row may be
    gone: their open interval closes)."""
    if states is None:
        return
    changed: list[tuple[int, str, str, Attributes, list[str]]] = []
    for eid, space, name, typ, description, aliases, types, descriptions in await ctx.fetch(states):
        derived = derive_attributes(
            [*(Contribution(t, "") for t in types), *(Contribution(None, d) for d in descriptions)]
        )
        if derived != (typ, description):
            changed.append((int(eid), str(space), str(name), derived, sorted(aliases)))
    if changed:
        vecs = await ctx.embeddings([render_entity(c[2], c[3].description) for c in changed])
        await ctx.many(
            "UPDATE {entities} SET type = %s, description = %s, embedding = %b WHERE id = %s",
            [
                (a.type, a.description, vec, eid)
                for (eid, _, _, a, _), vec in zip(changed, vecs, strict=True)
            ],
        )
        for eid, space, name, a, aliases in changed:
            ctx.changes.restate_entity(
                space,
                {
                    "id": str(eid),
                    "name": name,
                    "type": a.type,
                    "description": a.description,
                    "aliases": aliases,
                },
            )
    await _record_history(ctx, sorted(set(touched)), bt)


async def _record_history(ctx: WriteContext, ids: list[int], bt: datetime) -> None:
    """Record the belief history of the entities ``ids`` at ``bt``
    (:data:`~tidegraph.store.belief.ENTITIES`: names, attributes, dormancy, archival; an
    entity whose row is gone closes its interval); no round trip."""
    for statement in ENTITIES.statements():
        await ctx.run(statement, {"ids": ids, "bt": bt})
