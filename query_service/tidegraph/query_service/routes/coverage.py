"""Coverage telemetry read back (paper §6.1): what recorded queries reached least, and
what they never touched."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from psycopg import AsyncConnection

from tidegraph.query_service import telemetry
from tidegraph.query_service.errors import TelemetryOff
from tidegraph.query_service.responses import json_response
from tidegraph.query_service.routes.params import (
    AfterId,
    Auth,
    Limit,
    RealmPath,
    SpaceQuery,
    page,
    space,
)
from tidegraph.query_service.service import Service
from tidegraph.schemas import CoverageCommunitiesResponse, CoverageEntitiesResponse
from tidegraph.store import RealmInfo


def router(svc: Service) -> APIRouter:
    api = APIRouter(tags=["coverage"])

    def recorded(meta: RealmInfo) -> None:
        if not meta.config.coverage_telemetry:
            raise TelemetryOff(meta.realm)

    @api.get("/v1/realms/{realm}/coverage/communities", response_model=CoverageCommunitiesResponse)
    async def least_retrieved_communities(
        realm: RealmPath, space_: SpaceQuery = "*", limit: Limit = 100, auth: Auth = None
    ) -> Response:
        """The current communities recorded queries reached least (paper §6.1)."""
        space(space_, wildcard=True)
        page(limit, svc.settings.max_page)
        recorded(await svc.lookup(realm, auth))

        async def read(conn: AsyncConnection[Any], meta: RealmInfo) -> dict[str, Any]:
            rows = await telemetry.least_retrieved_communities(
                conn, meta, space=space_, limit=limit
            )
            return {"communities": rows, "since": await telemetry.since(conn, meta)}

        return json_response(await svc.on_realm(realm, auth, read))

    @api.get("/v1/realms/{realm}/coverage/entities", response_model=CoverageEntitiesResponse)
    async def never_retrieved_entities(
        realm: RealmPath,
        space_: SpaceQuery = "*",
        after_id: AfterId = 0,
        limit: Limit = 100,
        auth: Auth = None,
    ) -> Response:
        """Live entities no recorded query has touched (paper §6.1), by id."""
        space(space_, wildcard=True)
        page(limit, svc.settings.max_page)
        recorded(await svc.lookup(realm, auth))

        async def read(conn: AsyncConnection[Any], meta: RealmInfo) -> tuple[Any, Any]:
            rows = await telemetry.never_retrieved_entities(
                conn, meta, space=space_, after_id=after_id, limit=limit
            )
            return rows, await telemetry.since(conn, meta)

        rows, first = await svc.on_realm(realm, auth, read)
        nxt = rows[-1]["id"] if len(rows) == limit else None
        return json_response({"entities": rows, "since": first, "next_after_id": nxt})

    return api
