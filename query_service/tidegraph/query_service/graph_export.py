"""A realm's graph as other tools read it, streamed: ``tidegraph export`` and the HTTP
download both run :func:`export_graph`.

What is exported is what the listings answer for the same filters: the edges are the
relations ``GET /relations`` lists (the same edge filter and belief-time views, so
``as_believed_at`` exports exactly what was believed then and ``as_of`` filters validity as
reads do), the nodes the live entities ``GET /entities`` lists in the space, plus every
end of an exported edge (a dormant entity a superseded relation still names), so no edge
dangles. Both are read in one ``REPEATABLE READ`` snapshot through server-side cursors,
a batch at a time: memory stays bounded whatever the realm's size. The text of each
format comes from :mod:`~tidegraph.query_service.export_formats`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, NamedTuple

from psycopg import AsyncConnection, sql

from tidegraph.query_service.channels import (
    Scope,
    edge_filter,
    entity_filter,
    ents,
    parameters,
    rels,
    valid_days,
)
from tidegraph.query_service.export_formats import Format, GraphInfo
from tidegraph.query_service.reads import (
    ENTITY_LISTED,
    entity_record,
    relation_record,
    relations_listed,
)
from tidegraph.store.realms import RealmInfo

BATCH = 2000
"""Rows fetched from a server-side cursor at a time."""


class Piece(NamedTuple):
    """Text for one file of the export, with the counts written so far."""

    file: str
    text: str
    nodes: int
    edges: int


def export_scope(
    space: str, as_of: str | None, as_believed_at: datetime | None, include_superseded: bool
) -> Scope:
    """The filters of an export, as the relation listing takes them."""
    return Scope(space, valid_days(as_of), as_believed_at, include_superseded, None)


def nodes_query(schema: str, scope: Scope) -> sql.Composed:
    """Live entities in scope and every end of an exported edge, by id."""
    ends = sql.SQL(
        "SELECT r.subject_id FROM {rel} r WHERE {f} UNION SELECT r.object_id FROM {rel} r WHERE {f}"
    ).format(rel=rels(schema, scope), f=edge_filter(schema, scope))
    return sql.SQL(
        "SELECT {cols} FROM {ent} e WHERE ({live}) OR e.id IN ({ends}) ORDER BY e.id"
    ).format(cols=ENTITY_LISTED, ent=ents(schema, scope), live=entity_filter(scope), ends=ends)


def node_record(row: Any) -> dict[str, Any]:
    """A node: the entity as listed, with its state."""
    node = entity_record(row)
    node["state"] = (
        "archived" if node["archived_since"] else "dormant" if node["dormant_since"] else "live"
    )
    return node


def edge_record(row: Any) -> dict[str, Any]:
    """An edge: the relation as listed, with the ids of its ends."""
    edge = relation_record(row)
    edge["subject_id"], edge["object_id"] = str(row[15]), str(row[16])
    return edge


async def export_graph(
    conn: AsyncConnection[Any],
    meta: RealmInfo,
    info: GraphInfo,
    fmt: Format,
    *,
    batch: int = BATCH,
) -> AsyncIterator[Piece]:
    """The realm's graph in ``fmt``, piece by piece, from one snapshot (``conn`` in
    autocommit; the transaction is this generator's)."""
    scope = export_scope(info.space, info.as_of, info.as_believed_at, info.include_superseded)
    params = parameters(scope)
    nodes_file, edges_file = fmt.files
    nodes = edges = 0
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield Piece(nodes_file, fmt.head(info), 0, 0)
        async for rows in _batches(
            conn, "tidegraph_export_nodes", nodes_query(meta.schema, scope), params, batch
        ):
            nodes += len(rows)
            yield Piece(nodes_file, "".join(fmt.node(node_record(r)) for r in rows), nodes, 0)
        yield Piece(edges_file, fmt.edges_head(), nodes, 0)
        edges_query = sql.SQL("{} ORDER BY r.id").format(relations_listed(meta.schema, scope, []))
        async for rows in _batches(conn, "tidegraph_export_edges", edges_query, params, batch):
            edges += len(rows)
            yield Piece(edges_file, "".join(fmt.edge(edge_record(r)) for r in rows), nodes, edges)
        yield Piece(edges_file, fmt.tail(), nodes, edges)


async def _batches(
    conn: AsyncConnection[Any],
    name: str,
    query: sql.Composed,
    params: dict[str, Any],
    batch: int,
) -> AsyncIterator[list[Any]]:
    async with conn.cursor(name=name) as cur:
        await cur.execute(query, params)
        while rows := await cur.fetchmany(batch):
            yield rows
