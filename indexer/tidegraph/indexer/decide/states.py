"""Reading the stored state of documents, which decides what each record means."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.indexer.decide.fold import DocState


async def load_states(
    conn: AsyncConnection[Any], schema: str, docs: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], DocState]:
    """Stored state of each ``(space, doc_key)`` that has one.

    A key holding a NUL character is never looked up: PostgreSQL text cannot hold one, so no
    such document is stored, and sending it would fail the whole lookup.
    """
    ordered = sorted(d for d in set(docs) if "\0" not in d[1])
    if not ordered:
        return {}
    cur = await conn.execute(
        sql.SQL(
            "SELECT d.space, d.doc_key, d.status, d.content_hash, d.source_version FROM {} d"
            " JOIN unnest(%s::text[], %s::text[]) AS k(s, k) ON d.space = k.s AND d.doc_key = k.k"
        ).format(sql.Identifier(schema, "documents")),
        ([d[0] for d in ordered], [d[1] for d in ordered]),
    )
    return {(s, k): DocState(status, h, v) for s, k, status, h, v in await cur.fetchall()}
