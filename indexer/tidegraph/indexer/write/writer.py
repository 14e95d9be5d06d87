"""The ordered write phase: one record, one transaction (DESIGN invariants 2–7).

Commit order, all in one PostgreSQL transaction:

1. take the realm lock and draw the next commit sequence (``UPDATE meta … RETURNING seq``),
   which also fixes the belief instant (non-decreasing per realm) — or take the
   :class:`Stamp` of a caller that holds the lock for a run of writes (a replay batch);
2. withdraw the document's previous contribution: expire its chunks, drop their mentions
   and relation provenance;
3. write the new version's chunks, resolve its entities (``entity_writes``), attach its
   relations (``relation_writes``);
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

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection, AsyncCursor
from psycopg.types.json import Jsonb

from tidegraph.indexer.extraction.interfaces import Embedder
from tidegraph.indexer.extraction.prepared import PreparedDocument, RecordPosition
from tidegraph.indexer.write.context import (
    ChangeSet,
    WriteContext,
    ensure_vector_types,
    vec_param,
)
from tidegraph.indexer.write.entities import (
    mention_states,
    reconcile_entities,
    resolve_entities,
)
from tidegraph.indexer.write.relations import Pair, attach_relations, reconcile_relations
from tidegraph.schemas.names import name_key
from tidegraph.store import positions
from tidegraph.store.errors import RealmSwapped, is_unstorable, refusal
from tidegraph.store.realms import RealmInfo

__all__ = [
    "ChangeSet",
    "Stamp",
    "WriteResult",
    "advance_only",
    "write_document",
    "write_record",
    "write_unstorable",
]

OnRefused = Callable[[psycopg.Error], Awaitable[None]]


@dataclass(frozen=True)
class Stamp:
    """A write's sequence number, belief instant and staleness notice, drawn by a caller
    that holds the realm's meta row for a run of writes and stores it once after them (a
    replay batch): what :func:`_begin` would have drawn, without updating the row each
    time (within one transaction every update of it leaves a row version the next must
    step over)."""

    seq: int
    belief_time: datetime
    communities_stale: bool


@dataclass(frozen=True)
class WriteResult:
    """What a record's transaction did."""

    seq: int | None
    """Commit sequence drawn, ``None`` when nothing but the position moved."""
    kinds: tuple[str, ...]
    """Kinds of the changes appended, in order."""
    status: str
    """Document status after the write."""


async def advance_only(
    conn: AsyncConnection[Any], pos: RecordPosition, *, through: int | None = None
) -> None:
    """No-op, stale and dead-lettered records: move the position, write nothing else.

    ``through`` moves it over a run of such records, ``pos.offset`` to ``through``, at once.
    """
    async with conn.transaction():
        await positions.advance(
            conn,
            pos.group_id,
            pos.topic,
            pos.partition,
            pos.offset,
            pos.epoch,
            through=through,
        )


async def write_document(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    pos: RecordPosition,
    embedder: Embedder,
    doc: PreparedDocument | None,
    *,
    space: str,
    doc_key: str,
    source_version: str | None,
    advance: bool = True,
    stamp: Stamp | None = None,
    fresh: bool = False,
    within: bool = False,
) -> WriteResult:
    """Apply (``doc`` given) or delete (``doc`` None) one document version atomically.

    Runs in pipeline mode: statements whose results are not read (history moves, attribute
    updates, dormancy) travel together instead of one round trip each. ``advance=False``
    leaves the position to the caller, whose transaction holds several records (replay).
    ``stamp`` is a caller-drawn sequence and belief instant (the meta row is left alone),
    and ``fresh`` says the schema has never held the document, so there is no previous
    version to read or withdraw. ``within`` writes in the caller's transaction and
    pipeline without a savepoint of its own and without waiting for the write's last
    statements: a failure aborts the caller's whole transaction (a replay batch, which then
    writes its records again one savepoint each).
    """
    await ensure_vector_types(conn)
    async with contextlib.AsyncExitStack() as scope:
        if not within:
            await scope.enter_async_context(conn.transaction())
            await scope.enter_async_context(conn.pipeline())
        return await _write(
            conn,
            info,
            pos,
            embedder,
            doc,
            space,
            doc_key,
            source_version,
            advance,
            stamp,
            fresh,
        )


async def _write(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    pos: RecordPosition,
    embedder: Embedder,
    doc: PreparedDocument | None,
    space: str,
    doc_key: str,
    source_version: str | None,
    advance: bool,
    stamp: Stamp | None,
    fresh: bool,
) -> WriteResult:
    """:func:`write_document` inside whatever transaction and pipeline the caller holds."""
    changes = ChangeSet(space)
    ctx = WriteContext(conn, info, embedder, changes, dict(doc.vectors) if doc else {})
    # The opening statements travel together; the withdrawal reads the belief instant
    # the first one sets.
    begun = await _begin(ctx, pos.log_time) if stamp is None else None
    withdrawal = None if fresh else await _withdraw(ctx, space, doc_key, stamp)
    if begun is not None:
        stamp = await _begun(ctx, begun)
    assert stamp is not None
    seq, bt = stamp.seq, stamp.belief_time
    previous, old_entities, old_relations = (
        await _withdrawn(ctx, withdrawal) if withdrawal is not None else (None, set(), set())
    )
    new_entities: set[int] = set()
    new_pairs: set[Pair] = set()
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
        new_entities, new_pairs = await _write_contribution(ctx, doc, bt)
    # The relations' reconciliation changes no mention: the entities' states are
    # asked for now, to travel with its first statements.
    states = await mention_states(ctx, old_entities | new_entities)
    await reconcile_relations(ctx, old_relations | ctx.touched_relations, bt, pairs_of=new_pairs)
    await reconcile_entities(ctx, states, bt)
    if stamp.communities_stale:
        changes.add("communities_stale")
    await _record_document(ctx, seq, space, doc_key, status, doc, source_version, failure, bt)
    if advance:
        await positions.advance(conn, pos.group_id, pos.topic, pos.partition, pos.offset, pos.epoch)
    return WriteResult(seq, tuple(k for k, _, _ in changes.items), status)


async def write_record(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    pos: RecordPosition,
    embedder: Embedder,
    doc: PreparedDocument | BaseException | None,
    *,
    space: str,
    doc_key: str,
    content_hash: str | None,
    source_version: str | None,
    on_refused: OnRefused | None = None,
    advance: bool = True,
    stamp: Stamp | None = None,
    fresh: bool = False,
) -> WriteResult | None:
    """One record as the indexer and a replay apply it: :func:`write_document`, or — when
    PostgreSQL refuses a value of the record, in the write or in its preparation (``doc``
    is then what preparing raised) — ``on_refused`` and :func:`write_unstorable`."""
    try:
        if isinstance(doc, BaseException):
            raise doc
        return await write_document(
            conn,
            info,
            pos,
            embedder,
            doc,
            space=space,
            doc_key=doc_key,
            source_version=source_version,
            advance=advance,
            stamp=stamp,
            fresh=fresh,
        )
    except psycopg.Error as exc:
        if not is_unstorable(exc):
            raise
        if on_refused is not None:
            await on_refused(exc)
        return await write_unstorable(
            conn,
            info,
            pos,
            embedder,
            exc,
            space=space,
            doc_key=doc_key,
            content_hash=content_hash,
            source_version=source_version,
            advance=advance,
            stamp=stamp,
            fresh=fresh,
        )


async def write_unstorable(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    pos: RecordPosition,
    embedder: Embedder,
    error: BaseException,
    *,
    space: str,
    doc_key: str,
    content_hash: str | None,
    source_version: str | None,
    advance: bool = True,
    stamp: Stamp | None = None,
    fresh: bool = False,
) -> WriteResult | None:
    """Record a version PostgreSQL refused a value of (:func:`errors.is_unstorable`).

    An upsert is written as ``failed`` with only its identity, hash and the refusal — none
    of its text or attributes — and, like any failed version, replaces what the previous
    version taught. When even that is refused (a key too long for its index), or for a
    delete, only the position moves and ``None`` is returned. The record is never retried:
    the same values would be refused again.
    """
    if content_hash is not None:
        reason = "cannot be stored: " + refusal(error)
        refused = PreparedDocument(
            space=space,
            doc_key=doc_key,
            content_hash=content_hash,
            source_version=None,
            order_key=None,
            title=None,
            source=None,
            metadata={},
            chunks=(),
            vectors={},
            refused=reason,
        )
        try:
            return await write_document(
                conn,
                info,
                pos,
                embedder,
                refused,
                space=space,
                doc_key=doc_key,
                source_version=None
                if source_version and "\0" in source_version
                else source_version,
                advance=advance,
                stamp=stamp,
                fresh=fresh,
            )
        except psycopg.Error as exc:
            if not is_unstorable(exc):
                raise
    if advance:
        await advance_only(conn, pos)
    return None


async def _begin(ctx: WriteContext, log_time: datetime) -> AsyncCursor[Any]:
    """Realm lock, sequence and belief instant in one statement (read by :func:`_begun`).

    Also reports whether this write is the first since communities were built (so the
    feed says once that they are stale), and whether a replay swapped the schema out.
    """
    return await ctx.send(
        "UPDATE {meta} m SET seq = m.seq + 1,"
        " last_write_at = greatest(coalesce(m.last_write_at, %(t)s), %(t)s),"
        " communities_stale = m.communities_built_at IS NOT NULL"
        " FROM (SELECT communities_stale AS was FROM {meta} FOR UPDATE) old"
        " RETURNING m.seq, m.last_write_at,"
        " m.communities_built_at IS NOT NULL AND NOT old.was, m.swapped_out",
        {"t": log_time},
    )


async def _begun(ctx: WriteContext, begin: AsyncCursor[Any]) -> Stamp:
    """Sequence, belief instant and staleness drawn by :func:`_begin`; refuses to write
    into a schema a replay swapped out (the caller's transaction rolls back and retries
    against the new one)."""
    seq, bt, stale, swapped_out = (await ctx.fetch(begin))[0]
    if swapped_out:
        raise RealmSwapped(ctx.info.realm)
    return Stamp(int(seq), bt, bool(stale))


Withdrawal = tuple[AsyncCursor[Any], AsyncCursor[Any]]
"""The previous version's status, and what withdrawing its chunks touched."""


async def _withdraw(ctx: WriteContext, space: str, doc_key: str, stamp: Stamp | None) -> Withdrawal:
    """Read the previous version's status, expire its live chunks at the belief instant
    just drawn (or stamped) and drop their mentions and relation provenance (read by
    :func:`_withdrawn`)."""
    status = await ctx.send(
        "SELECT status FROM {documents} WHERE space = %s AND doc_key = %s FOR UPDATE",
        (space, doc_key),
    )
    instant = "(SELECT last_write_at FROM {meta})" if stamp is None else "%(bt)s"
    touched = await ctx.send(
        "WITH expired AS (UPDATE {chunks} SET t_expired = "
        + instant
        + "  WHERE space = %(space)s AND doc_key = %(key)s AND t_expired IS NULL RETURNING id),"
        " mentioned AS (DELETE FROM {mentions} WHERE chunk_id IN (SELECT id FROM expired)"
        "  RETURNING entity_id),"
        " sourced AS (DELETE FROM {relation_sources}"
        "  WHERE chunk_id IN (SELECT id FROM expired) RETURNING relation_id)"
        " SELECT true, entity_id FROM mentioned"
        " UNION ALL SELECT false, relation_id FROM sourced",
        {"space": space, "key": doc_key, "bt": stamp.belief_time if stamp else None},
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
        "INSERT INTO {chunks} (space, doc_key, ordinal, text, content_hash, metadata,"
        " embedding, t_created)"
        " SELECT %s, %s, o, t, %s, m, e, %s"
        " FROM unnest(%b::int[], %b::text[], %s::jsonb[], %b::vector[]) AS u(o, t, m, e)"
        " RETURNING id, ordinal",
        (
            doc.space,
            doc.doc_key,
            doc.content_hash,
            bt,
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
    relation_pairs = await attach_relations(ctx, doc, chunk_id, ids, bt, mentions=mention_pairs)
    return {p[1] for p in mention_pairs}, relation_pairs


async def _record_document(
    ctx: WriteContext,
    seq: int,
    space: str,
    doc_key: str,
    status: str,
    doc: PreparedDocument | None,
    source_version: str | None,
    error: str | None,
    bt: datetime,
) -> None:
    """Upsert the document's state and append the write's changes to the outbox under its
    sequence, in one statement. The changes travel as one JSON document: serialised once,
    instead of one value each written into an array literal and escaped again."""
    await ctx.run(
        "WITH state AS (INSERT INTO {documents} AS d (space, doc_key, status, content_hash,"
        " source_version, order_key, title, source, metadata, error, chunk_count, indexed_at)"
        " VALUES (%(space)s, %(key)s, %(status)s, %(hash)s, %(version)s, %(order)s, %(title)s,"
        " %(source)s, %(metadata)s, %(error)s, %(chunks)s, %(bt)s)"
        " ON CONFLICT (space, doc_key) DO UPDATE SET status = excluded.status,"
        " content_hash = excluded.content_hash,"
        " source_version = coalesce(excluded.source_version, d.source_version),"
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
            "space": space,
            "key": doc_key,
            "status": status,
            "hash": doc.content_hash if doc else None,
            "version": source_version,
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
