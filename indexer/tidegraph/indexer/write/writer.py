"""Applying one document version to a realm's graph (DESIGN invariants 2–7).

:func:`apply_version` is the one write, for the live indexer and the replay alike. It runs
inside a transaction (and pipeline) its caller owns, under a :class:`Stamp` its caller's
sequencer drew, and does, in order:

1. withdraw the document's previous contribution (unless the realm never held it): expire
   its chunks, drop their mentions, entity contributions and relation provenance;
2. write the new version's chunks, resolve its entities (``entities``), attach its
   relations (``relations``);
3. reconcile every touched relation (weight, order, retraction, supersession) and every
   touched entity (dormancy, revival, and restoring an archived entity the version
   mentions; type and description derived from the live chunks, attribute history)
   against belief time;
4. upsert the document state, with the highest ``source_version`` the decision folded;
5. append the changes to the outbox under the stamp's sequence number.

The caller moves the consumer position in the same transaction (``units``), so a failure
anywhere rolls everything back and a crash neither skips nor repeats a record.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, AsyncCursor
from psycopg.types.json import Jsonb

from tidegraph.indexer.decide import DocState
from tidegraph.indexer.extraction import Embedder, PreparedDocument
from tidegraph.indexer.write.attributes import (
    attribute_states,
    record_sources,
    settle_attributes,
)
from tidegraph.indexer.write.context import (
    ChangeSet,
    WriteContext,
    ensure_vector_types,
    realm_query,
    vec_param,
)
from tidegraph.indexer.write.entities import (
    mention_states,
    reconcile_entities,
    resolve_entities,
)
from tidegraph.indexer.write.reconcile import reconcile_relations
from tidegraph.indexer.write.relations import Pair, attach_relations
from tidegraph.indexer.write.sequencer import Stamp
from tidegraph.schemas import ChangeKind, name_key
from tidegraph.store import DOCUMENTS, RealmInfo

__all__ = [
    "UNKNOWN",
    "ChangeSet",
    "Unknown",
    "Version",
    "WriteResult",
    "apply_version",
    "remember_version",
    "refused_version",
]


class Unknown(enum.Enum):
    """Whether the realm held the document is not known to the caller."""

    UNKNOWN = "unknown"


UNKNOWN = Unknown.UNKNOWN


@dataclass(frozen=True)
class Version:
    """One document version as the write needs it."""

    space: str
    doc_key: str
    doc: PreparedDocument | None
    """The prepared version; ``None`` deletes the document."""
    source_version: str | None
    """The highest version seen of the document, this record's included (``fold``)."""
    previous: DocState | None | Unknown
    """The document's state before: ``None`` when the realm never held it (nothing to
    withdraw), :data:`UNKNOWN` when the caller did not decide against stored state."""
    offset: int
    """The record's log offset, which the ids of the rows it creates derive from."""


@dataclass(frozen=True)
class WriteResult:
    """What a version's write did."""

    seq: int
    """Commit sequence drawn."""
    kinds: tuple[str, ...]
    """Kinds of the changes appended, in order."""
    status: str
    """Document status after the write."""


async def apply_version(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    embedder: Embedder,
    version: Version,
    stamp: Stamp,
) -> WriteResult:
    """Write ``version`` in the caller's transaction under ``stamp``.

    Statements whose results are not read travel without a round trip each when the caller
    holds a pipeline; a failure surfaces by the caller's pipeline or transaction at the
    latest, and aborts it.
    """
    await ensure_vector_types(conn)
    space, doc_key, doc = version.space, version.doc_key, version.doc
    changes = ChangeSet(space)
    ctx = WriteContext(
        conn, info, embedder, changes, dict(doc.vectors) if doc else {}, offset=version.offset
    )
    bt = stamp.belief_time
    if version.previous is None:
        previous, old_entities, old_relations = None, set[int](), set[int]()
    else:
        previous, old_entities, old_relations = await _withdrawn(
            ctx, await _withdraw(ctx, space, doc_key, bt)
        )
    new_entities: set[int] = set()
    new_pairs: set[Pair] = set()
    failure = doc.failure if doc is not None else None
    if doc is None:
        status = "deleted"
        changes.add(ChangeKind.DOCUMENT_DELETED, doc_key=doc_key)
    elif failure is not None:
        status = "failed"
        changes.add(ChangeKind.DOCUMENT_FAILED, doc_key=doc_key, error=failure)
    else:
        status = "indexed"
        replaced = previous in ("indexed", "failed")
        changes.add(
            ChangeKind.DOCUMENT_REPLACED if replaced else ChangeKind.DOCUMENT_INDEXED,
            doc_key=doc_key,
        )
        new_entities, new_pairs = await _write_contribution(ctx, doc, bt)
    # The relations' reconciliation changes no mention nor contribution: the entities'
    # states are asked for now, to travel with its first statements.
    touched = old_entities | new_entities
    states = await mention_states(ctx, touched, new_entities)
    attributes = await attribute_states(ctx, touched | ctx.absorbed)
    await reconcile_relations(ctx, old_relations | ctx.touched_relations, bt, pairs_of=new_pairs)
    if ctx.unannounced:  # the feed would never tell of these edges
        raise RuntimeError(f"relations born unreconciled: {sorted(ctx.unannounced)}")
    await reconcile_entities(ctx, states, bt)
    await settle_attributes(ctx, attributes, touched | ctx.absorbed, bt)
    if stamp.communities_stale:
        changes.add(ChangeKind.COMMUNITIES_STALE)
    error = doc.notice if doc is not None else None
    await _record_document(ctx, stamp.seq, version, status, error, bt)
    return WriteResult(stamp.seq, tuple(str(k) for k, _, _ in changes.items), status)


async def remember_version(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    space: str,
    doc_key: str,
    state: DocState,
    log_time: datetime,
) -> None:
    """Store the highest version seen of a document a record did not otherwise change (a
    re-send or a delete of a document not held, under a newer version): later records
    are then decided the same from the database as from the decide loop's memory. A
    document the realm never held is remembered as deleted. No sequence is drawn: the
    graph and the feed do not change. The document's history takes the change at the later
    of the realm's last belief instant and the record's log time, so a read
    ``as_believed_at`` an earlier instant does not see it."""
    cur = await conn.execute(
        realm_query(
            info.schema,
            "WITH kept AS (INSERT INTO {documents} AS d (space, doc_key, status, content_hash,"
            " source_version, indexed_at) VALUES (%(space)s, %(doc_key)s, %(status)s,"
            " %(hash)s, %(version)s, %(t)s) ON CONFLICT (space, doc_key)"
            " DO UPDATE SET source_version = excluded.source_version)"
            " SELECT greatest(coalesce(last_write_at, %(t)s), %(t)s) FROM {meta}",
        ),
        {
            "space": space,
            "doc_key": doc_key,
            "status": state.status,
            "hash": state.content_hash,
            "version": state.source_version,
            "t": log_time,
        },
    )
    row = await cur.fetchone()
    params = {"space": space, "doc_key": doc_key, "bt": row[0] if row else log_time}
    for statement in DOCUMENTS.statements():
        await conn.execute(realm_query(info.schema, statement), params)


def refused_version(version: Version, content_hash: str | None, reason: str) -> Version | None:
    """What is written instead of a version PostgreSQL refused a value of: a ``failed``
    version with only its identity, hash and the refusal — none of its text or attributes
    — which, like any failed version, replaces what the previous one taught. ``None`` for
    a delete, which has nothing to record but its position."""
    if content_hash is None:
        return None
    refused = PreparedDocument(
        space=version.space,
        doc_key=version.doc_key,
        content_hash=content_hash,
        source_version=None,
        order_key=None,
        title=None,
        source=None,
        metadata={},
        chunks=(),
        vectors={},
        refused="cannot be stored: " + reason,
    )
    return Version(
        version.space, version.doc_key, refused, version.source_version, UNKNOWN, version.offset
    )


Withdrawal = tuple[AsyncCursor[Any], AsyncCursor[Any]]
"""The previous version's status, and what withdrawing its chunks touched."""


async def _withdraw(ctx: WriteContext, space: str, doc_key: str, bt: datetime) -> Withdrawal:
    """Read the previous version's status, expire its live chunks and their mentions at
    the belief instant and drop their relation provenance and entity contributions (the
    relations' and entities' histories keep what they taught; read by
    :func:`_withdrawn`)."""
    status = await ctx.send(
        "SELECT status FROM {documents} WHERE space = %s AND doc_key = %s FOR UPDATE",
        (space, doc_key),
    )
    touched = await ctx.send(
        "WITH expired AS (UPDATE {chunks} SET t_expired = %(bt)s"
        "  WHERE space = %(space)s AND doc_key = %(key)s AND t_expired IS NULL RETURNING id),"
        " mentioned AS (UPDATE {mentions} SET t_expired = %(bt)s"
        "  WHERE chunk_id IN (SELECT id FROM expired) AND t_expired IS NULL"
        "  RETURNING entity_id),"
        " sourced AS (DELETE FROM {relation_sources}"
        "  WHERE chunk_id IN (SELECT id FROM expired) RETURNING relation_id),"
        " described AS (DELETE FROM {entity_sources} WHERE chunk_id IN (SELECT id FROM expired))"
        " SELECT true, entity_id FROM mentioned"
        " UNION ALL SELECT false, relation_id FROM sourced",
        {"space": space, "key": doc_key, "bt": bt},
    )
    return status, touched


async def _withdrawn(
    ctx: WriteContext, withdrawal: Withdrawal
) -> tuple[str | None, set[int], set[int]]:
    """Previous status, and the entities and relations the withdrawn chunks touched."""
    status, touched = withdrawal
    previous = next((str(r[0]) for r in await ctx.fetch(status)), None)
    rows = await ctx.fetch(touched)
    return previous, {int(i) for e, i in rows if e}, {int(i) for e, i in rows if not e}


async def _write_contribution(
    ctx: WriteContext, doc: PreparedDocument, bt: datetime
) -> tuple[set[int], set[Pair]]:
    """Chunks, entities, mentions, relations and provenance of a new version; returns the
    entities mentioned and the pairs related."""
    inserted = await ctx.send(
        "INSERT INTO {chunks} (id, space, doc_key, ordinal, text, content_hash, metadata,"
        " embedding, t_created)"
        " SELECT i, %s, %s, o, t, %s, m, e, %s"
        " FROM unnest(%b::bigint[], %b::int[], %b::text[], %s::jsonb[], %b::vector[])"
        " AS u(i, o, t, m, e) RETURNING id, ordinal",
        (
            doc.space,
            doc.doc_key,
            doc.content_hash,
            bt,
            ctx.new_ids(len(doc.chunks)),
            [c.ordinal for c in doc.chunks],
            [c.text for c in doc.chunks],
            [Jsonb(c.metadata) for c in doc.chunks],
            [vec_param(c.embedding) for c in doc.chunks],
        ),
    )
    ids = await resolve_entities(ctx, doc, bt)  # its lookups travel with the chunk insert
    chunk_id = {int(o): int(i) for i, o in await ctx.fetch(inserted)}
    mention_pairs = sorted(
        {
            (chunk_id[c.ordinal], ids[name_key(name)])
            for c in doc.chunks
            for name in [e.name for e in c.entities]
            + [n for r in c.relations for n in (r.subject, r.object)]
        }
    )
    await record_sources(ctx, doc, chunk_id, ids)
    relation_pairs = await attach_relations(ctx, doc, chunk_id, ids, bt, mentions=mention_pairs)
    return {p[1] for p in mention_pairs}, relation_pairs


async def _record_document(
    ctx: WriteContext,
    seq: int,
    version: Version,
    status: str,
    error: str | None,
    bt: datetime,
) -> None:
    """Upsert the document's state and append the write's changes to the outbox under its
    sequence, in one statement. The changes travel as one JSON document: serialised once,
    instead of one value each written into an array literal and escaped again."""
    doc = version.doc
    await ctx.run(
        "WITH state AS (INSERT INTO {documents} AS d (space, doc_key, status, content_hash,"
        " source_version, order_key, title, source, metadata, error, chunk_count, indexed_at)"
        " VALUES (%(space)s, %(key)s, %(status)s, %(hash)s, %(version)s, %(order)s, %(title)s,"
        " %(source)s, %(metadata)s, %(error)s, %(chunks)s, %(bt)s)"
        " ON CONFLICT (space, doc_key) DO UPDATE SET status = excluded.status,"
        " content_hash = excluded.content_hash, source_version = excluded.source_version,"
        " order_key = coalesce(excluded.order_key, d.order_key),"
        " title = coalesce(excluded.title, d.title),"
        " source = coalesce(excluded.source, d.source),"
        " metadata = excluded.metadata, error = excluded.error,"
        " chunk_count = excluded.chunk_count, indexed_at = excluded.indexed_at,"
        " applied_at = clock_timestamp())"
        " INSERT INTO {outbox} (seq, idx, kind, space, belief_time, payload)"
        " SELECT %(seq)s, i - 1, c ->> 0, c ->> 1, %(bt)s, c -> 2"
        " FROM jsonb_array_elements(%(changes)s) WITH ORDINALITY AS u(c, i)",
        {
            "space": version.space,
            "key": version.doc_key,
            "status": status,
            "hash": doc.content_hash if doc else None,
            "version": version.source_version,
            "order": doc.order_key if doc else None,
            "title": doc.title if doc else None,
            "source": doc.source if doc else None,
            "metadata": Jsonb(doc.metadata if doc else {}),
            "error": error,
            "chunks": len(doc.chunks) if doc and status == "indexed" else 0,
            "bt": bt,
            "seq": seq,
            "changes": Jsonb(ctx.changes.items),
        },
    )
    for statement in DOCUMENTS.statements():
        await ctx.run(statement, {"space": version.space, "doc_key": version.doc_key, "bt": bt})
