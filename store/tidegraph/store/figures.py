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

from tidegraph.schemas import MAIN
from tidegraph.store import realm_positions
from tidegraph.store.cluster import Cluster
from tidegraph.store.errors import ServerUnavailable
from tidegraph.store.realms import list_realms, placements


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
    server: str = MAIN
    """The server holding it."""


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
    conn: AsyncConnection[Any],
    *,
    only: Collection[str] | None = None,
    realms: list[tuple[str, str]] | None = None,
    server: str = MAIN,
) -> list[RealmFigures]:
    """Figures of the realms (realm, schema) ``realms`` on ``conn``'s server ``server`` —
    by default the catalogue's realms on ``main`` — or of those in ``only``, by name."""
    out = []
    for realm, schema in await list_realms(conn) if realms is None else realms:
        if only is not None and realm not in only:
            continue
        figures = await schema_figures(conn, realm, schema, server)
        if figures is not None:
            out.append(figures)
    return out


async def figures_everywhere(
    cluster: Cluster, *, only: Collection[str] | None = None
) -> tuple[list[RealmFigures], list[str]]:
    """Figures of every realm on every server, by name, and what kept some from being
    counted (a server that does not answer: its realms are left out, the others counted)."""
    async with cluster.connection(MAIN) as main:
        placed = await placements(main)
    by_server: dict[str, list[tuple[str, str]]] = {}
    for p in placed:
        by_server.setdefault(p.server, []).append((p.realm, p.schema))
    out: list[RealmFigures] = []
    problems: list[str] = []
    for server, realms in sorted(by_server.items()):
        try:
            async with cluster.connection(server, wait=5) as conn:
                out += await realm_figures(conn, only=only, realms=realms, server=server)
        except ServerUnavailable as exc:
            problems.append(f"{exc} — {len(realms)} realm(s) not counted")
    return sorted(out, key=lambda f: f.realm), problems


async def schema_figures(
    conn: AsyncConnection[Any], realm: str, schema: str, server: str = MAIN
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
        server,
    )
