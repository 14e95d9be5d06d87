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
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from fastapi.responses import StreamingResponse
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from pydantic import AwareDatetime

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
from tidegraph.schemas.api import AS_OF_DOC, valid_as_of
from tidegraph.schemas.errors import ContractError
from tidegraph.schemas.names import validate_space
from tidegraph.store.realms import RealmInfo

Lookup = Callable[[str, str | None], Awaitable[RealmInfo]]
"""``(realm, Authorization header) → realm``, after the key check."""


def export_router(
    lookup: Lookup, pool: AsyncConnectionPool[AsyncConnection[Any]], gate: DatabaseGate
) -> APIRouter:
    """The export route over ``pool``; ``lookup`` checks the key and finds the realm."""
    router = APIRouter()

    @router.get(
        "/v1/realms/{realm}/export",
        tags=["graph"],
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
        realm: Annotated[str, Path(description="Realm name.", max_length=64)],
        format: Annotated[FormatName, Query(description="graphml, csv or jsonl.")] = "graphml",  # noqa: A002
        space: Annotated[str, Query(max_length=64)] = "*",
        as_of: Annotated[str | None, Query(description=AS_OF_DOC)] = None,
        as_believed_at: Annotated[AwareDatetime | None, Query()] = None,
        include_superseded: bool = False,
        array_delimiter: Annotated[
            str, Query(min_length=1, max_length=1, description="CSV: between array elements.")
        ] = ";",
        auth: Annotated[str | None, Header(alias="Authorization", include_in_schema=False)] = None,
    ) -> StreamingResponse:
        """The realm's graph as other tools read it: the relations the relation listing
        returns for these filters, the live entities of the space and every end of those
        relations. GraphML for Gephi, networkx or igraph; CSV for `neo4j-admin database
        import` (a zip of `nodes.csv` and `relationships.csv`); JSON lines."""
        try:
            validate_space(space, allow_wildcard=True)
            valid_as_of(as_of)
            fmt = format_named(format, array_delimiter)
        except (ContractError, ValueError, ExportRefused) as exc:
            raise InvalidRequest(str(exc)) from None
        meta = await lookup(realm, auth)
        gate.raise_if_down()
        info = GraphInfo(realm, space, as_of, as_believed_at, include_superseded)
        body = _pieces(pool, meta, info, fmt)
        suffix = "zip" if fmt.files[0] != fmt.files[1] else fmt.files[0].rsplit(".", 1)[1]
        stamp = f"-{_stamp(as_believed_at)}" if as_believed_at else ""
        return StreamingResponse(
            _zipped(body) if suffix == "zip" else (p.text.encode() async for p in body),
            media_type="application/zip" if suffix == "zip" else fmt.media_type,
            headers={"content-disposition": f'attachment; filename="{realm}{stamp}.{suffix}"'},
        )

    return router


async def _pieces(
    pool: AsyncConnectionPool[AsyncConnection[Any]], meta: RealmInfo, info: GraphInfo, fmt: Format
) -> AsyncIterator[Piece]:
    async with pool.connection() as conn:
        async for piece in export_graph(conn, meta, info, fmt):
            yield piece


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
