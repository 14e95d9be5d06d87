"""A realm's headline figures, for operators (`tidegraph status`, `realm list`).

Counted in one statement per realm; what is counted is what a query sees now: documents by
status (and those indexed with refused facts), entities not dormant, relations current and
believed.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.store import realm_positions
from tidegraph.store.realms import list_realms


@dataclass(frozen=True)
class RealmFigures:
    """One realm's size and where its change feed stands."""

    realm: str
    schema: str
    documents: dict[str, int]
    """Document count by status (indexed, deleted, failed)."""
    entities: int
    """Entities not dormant."""
    relations: int
    """Relations current and believed now."""
    head_seq: int
    """Latest commit sequence of the realm's change feed."""
    last_write_at: datetime | None
    embedder: str
    extractor: str
    refused_facts: int = 0
    """Documents indexed with some of the facts they supplied refused (their status'
    ``error`` says which)."""
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    """(topic, partition) → where the realm stands: its records below are settled."""


_FIGURES = sql.SQL(
    "SELECT (SELECT coalesce(jsonb_object_agg(status, n), '{{}}') FROM"
    "  (SELECT status, count(*) AS n FROM {s}.documents GROUP BY status) d),"
    " (SELECT count(*) FROM {s}.entities WHERE dormant_since IS NULL),"
    " (SELECT count(*) FROM {s}.relations WHERE status = 'current' AND t_expired IS NULL),"
    " m.seq, m.last_write_at, m.embedder, m.extractor,"
    " (SELECT count(*) FROM {s}.documents WHERE status = 'indexed' AND error IS NOT NULL)"
    " FROM {s}.meta m"
)


async def realm_figures(
    conn: AsyncConnection[Any], *, only: Collection[str] | None = None
) -> list[RealmFigures]:
    """Figures of every registered realm (or of those in ``only``), by name."""
    out = []
    for realm, schema in await list_realms(conn):
        if only is not None and realm not in only:
            continue
        figures = await schema_figures(conn, realm, schema)
        if figures is not None:
            out.append(figures)
    return out


async def schema_figures(
    conn: AsyncConnection[Any], realm: str, schema: str
) -> RealmFigures | None:
    """Figures of the realm ``schema`` holds (the live one or a copy)."""
    cur = await conn.execute(_FIGURES.format(s=sql.Identifier(schema)))
    row = await cur.fetchone()
    if row is None:
        return None
    docs, entities, relations, seq, last_write, embedder, extractor, refused = row
    return RealmFigures(
        realm,
        schema,
        {str(k): int(v) for k, v in docs.items()},
        int(entities),
        int(relations),
        int(seq),
        last_write,
        str(embedder),
        str(extractor),
        int(refused),
        await realm_positions.read(conn, schema),
    )
