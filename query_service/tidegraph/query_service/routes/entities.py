"""Entities by id, or a ranked lookup by name or alias."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from tidegraph.query_service import reads
from tidegraph.query_service.responses import json_response
from tidegraph.query_service.routes.params import (
    AfterId,
    Auth,
    CopyQuery,
    Limit,
    RealmPath,
    SpaceQuery,
    page,
    space,
    text,
)
from tidegraph.query_service.service import Service
from tidegraph.schemas import (
    ENTITIES_BELIEVED_AT_DOC,
    BeliefInstant,
    EntitiesResponse,
)


def router(svc: Service) -> APIRouter:
    api = APIRouter(tags=["graph"])

    @api.get("/v1/realms/{realm}/entities", response_model=EntitiesResponse)
    async def entities(
        realm: RealmPath,
        name: Annotated[str | None, Query(max_length=1024)] = None,
        space_: SpaceQuery = "*",
        include_dormant: bool = False,
        include_archived: bool = False,
        as_believed_at: Annotated[
            BeliefInstant | None, Query(description=ENTITIES_BELIEVED_AT_DOC)
        ] = None,
        after_id: AfterId = 0,
        limit: Limit = 100,
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """Entities by id; with `name`, a ranked lookup by name or alias: exact matches
        first, then names and aliases beginning with it, then those with words beginning
        with its words (`name=Ada` finds Ada Lovelace). A lookup is one page. With
        `as_believed_at`, the entities and attributes believed at that instant."""
        if name is not None:
            text("name", name)
        space(space_, wildcard=True)
        page(limit, svc.settings.max_page)
        rows = await svc.on_realm(
            realm,
            auth,
            lambda conn, meta: reads.list_entities(
                conn,
                meta,
                name=name,
                space=space_,
                include_dormant=include_dormant,
                include_archived=include_archived,
                after_id=after_id,
                limit=limit,
                believed_at=as_believed_at,
            ),
            copy,
        )
        nxt = rows[-1]["id"] if len(rows) == limit and name is None else None
        return json_response({"entities": rows, "next_after_id": nxt})

    return api
