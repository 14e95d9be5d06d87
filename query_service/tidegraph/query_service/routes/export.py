"""``GET /v1/realms/{realm}/export``: the graph as a download (the explorer's button).

The same bytes ``tidegraph export`` writes (:mod:`~tidegraph.query_service.graph_export`),
streamed as they are read, so a large realm never sits in the service's memory. CSV is two
files, so it comes as a zip holding ``nodes.csv`` and ``relationships.csv``, deflated on
the fly. The key check and the realm lookup come first, as on every route; a failure once
the body has started (the database going away, a value the format refuses) can only cut
the download short, which the client sees as an incomplete transfer — never as a complete
file of a different graph.
"""

from __future__ import annotations

import zipfile
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from tidegraph.query_service.errors import InvalidRequest
from tidegraph.query_service.export_formats import (
    ExportRefused,
    Format,
    FormatName,
    GraphInfo,
    format_named,
)
from tidegraph.query_service.gate import DatabaseGate
from tidegraph.query_service.graph_export import Piece, export_graph
from tidegraph.query_service.routes.graph import BelievedAt
from tidegraph.query_service.routes.params import Auth, RealmPath, SpaceQuery, space
from tidegraph.query_service.service import Service
from tidegraph.schemas.api import AS_OF_DOC, valid_as_of
from tidegraph.store.realms import RealmInfo


def router(svc: Service) -> APIRouter:
    """The export route; the key check and the realm's server come from ``svc``."""
    api = APIRouter(tags=["graph"])

    @api.get(
        "/v1/realms/{realm}/export",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "The graph: GraphML, a zip of neo4j-admin CSV files, or JSON lines.",
                "content": {
                    "application/graphml+xml": {},
                    "application/zip": {},
                    "application/x-ndjson": {},
                },
            }
        },
    )
    async def export(
        realm: RealmPath,
        format: Annotated[FormatName, Query(description="graphml, csv or jsonl.")] = "graphml",  # noqa: A002
        space_: SpaceQuery = "*",
        as_of: Annotated[str | None, Query(description=AS_OF_DOC)] = None,
        as_believed_at: BelievedAt = None,
        include_superseded: bool = False,
        array_delimiter: Annotated[
            str, Query(min_length=1, max_length=1, description="CSV: between array elements.")
        ] = ";",
        auth: Auth = None,
    ) -> StreamingResponse:
        """The realm's graph as other tools read it: the relations the relation listing
        returns for these filters, the live entities of the space and every end of those
        relations. GraphML for Gephi, networkx or igraph; CSV for `neo4j-admin database
        import` (a zip of `nodes.csv` and `relationships.csv`); JSON lines."""
        space(space_, wildcard=True)
        try:
            valid_as_of(as_of)
            fmt = format_named(format, array_delimiter)
        except (ValueError, ExportRefused) as exc:
            raise InvalidRequest(str(exc)) from None
        info = GraphInfo(realm, space_, as_of, as_believed_at, include_superseded)

        async def start(meta: RealmInfo) -> AsyncIterator[Piece]:
            gate = await svc.gates.of(meta.server)
            gate.raise_if_down()
            return await _started(_pieces(gate, meta, info, fmt))

        body = await svc.placed(realm, auth, start)
        suffix = "zip" if fmt.files[0] != fmt.files[1] else fmt.files[0].rsplit(".", 1)[1]
        stamp = f"-{_stamp(as_believed_at)}" if as_believed_at else ""
        return StreamingResponse(
            _zipped(body) if suffix == "zip" else (p.text.encode() async for p in body),
            media_type="application/zip" if suffix == "zip" else fmt.media_type,
            headers={"content-disposition": f'attachment; filename="{realm}{stamp}.{suffix}"'},
        )

    return api


async def _pieces(
    gate: DatabaseGate, meta: RealmInfo, info: GraphInfo, fmt: Format
) -> AsyncGenerator[Piece]:
    """The export on a connection of its own from the realm's server, held while the
    body streams (outside the gate's deadline, which bounds single requests)."""
    async with gate.pool.connection() as conn:
        async for piece in export_graph(conn, meta, info, fmt):
            yield piece


async def _started(pieces: AsyncGenerator[Piece]) -> AsyncIterator[Piece]:
    """``pieces`` once its first rows are read: a failure to reach the realm (its server
    down, its schema moved away) is then still an error answer or a second lookup, not a
    download cut short."""
    try:
        first = [await anext(pieces), await anext(pieces)]  # the head, then rows read
    except BaseException:
        await pieces.aclose()
        raise

    async def rest() -> AsyncIterator[Piece]:
        for piece in first:
            yield piece
        async for piece in pieces:
            yield piece

    return rest()


class _Drain:
    """A write-only stream ``zipfile`` writes into, emptied after each piece (it cannot
    seek, so ``zipfile`` writes sizes after each member's data)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.chunks.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def take(self) -> bytes:
        out = b"".join(self.chunks)
        self.chunks.clear()
        return out


async def _zipped(pieces: AsyncIterator[Piece]) -> AsyncIterator[bytes]:
    """The pieces as members of a zip, one member per file, streamed."""
    drain = _Drain()
    with zipfile.ZipFile(drain, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        member: Any = None
        name = ""
        async for piece in pieces:
            if piece.file != name:
                if member is not None:
                    member.close()
                name = piece.file
                member = archive.open(name, "w", force_zip64=True)
            member.write(piece.text.encode())
            yield drain.take()
        if member is not None:
            member.close()
    yield drain.take()


def _stamp(instant: datetime) -> str:
    return instant.strftime("%Y%m%dT%H%M%S")
