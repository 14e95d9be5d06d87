"""The community tree as the last community build stored it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from tidegraph.query_service import topics
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
from tidegraph.schemas import (
    CommunitiesResponse,
)


def router(svc: Service) -> APIRouter:
    api = APIRouter(tags=["graph"])

    @api.get("/v1/realms/{realm}/communities", response_model=CommunitiesResponse)
    async def communities(
        realm: RealmPath,
        space_: SpaceQuery = "*",
        level: Annotated[int | None, Query(ge=0, le=64)] = None,
        after_id: AfterId = 0,
        limit: Limit = 100,
        auth: Auth = None,
    ) -> Response:
        """The nested topic tree (paper §6.1): communities with their level, parent and
        children, as the last community build stored them."""
        space(space_, wildcard=True)
        page(limit, svc.settings.max_page)
        found = await svc.on_realm(
            realm,
            auth,
            lambda conn, meta: topics.community_tree(
                conn, meta, space=space_, level=level, after_id=after_id, limit=limit
            ),
        )
        return json_response(found)

    return api
