"""Relations by names and predicate, and one relation's belief history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response

from tidegraph.query_service import channels, history, reads
from tidegraph.query_service.errors import RelationNotFound
from tidegraph.query_service.responses import json_response
from tidegraph.query_service.routes.params import (
    AfterId,
    Auth,
    BelievedAt,
    CopyQuery,
    Limit,
    RealmPath,
    SpaceQuery,
    page,
    space,
    text,
    valid_days,
)
from tidegraph.query_service.service import Service
from tidegraph.schemas import (
    AS_OF_DOC,
    RelationHistoryResponse,
    RelationsResponse,
)


def router(svc: Service) -> APIRouter:
    api = APIRouter(tags=["graph"])

    @api.get("/v1/realms/{realm}/relations", response_model=RelationsResponse)
    async def relations(
        realm: RealmPath,
        subject: Annotated[str | None, Query(max_length=1024)] = None,
        predicate: Annotated[str | None, Query(max_length=128)] = None,
        object: Annotated[str | None, Query(max_length=1024)] = None,  # noqa: A002
        space_: SpaceQuery = "*",
        as_of: Annotated[str | None, Query(description=AS_OF_DOC)] = None,
        as_believed_at: BelievedAt = None,
        include_superseded: bool = False,
        after_id: AfterId = 0,
        limit: Limit = 100,
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """Relations by canonical names and predicate; current ones unless asked."""
        for field, value in (("subject", subject), ("predicate", predicate), ("object", object)):
            if value is not None:
                text(field, value)
        space(space_, wildcard=True)
        page(limit, svc.settings.max_page)
        scope = channels.Scope(space_, valid_days(as_of), as_believed_at, include_superseded, None)
        rows = await svc.on_realm(
            realm,
            auth,
            lambda conn, meta: reads.list_relations(
                conn,
                meta,
                scope,
                subject=subject,
                predicate=predicate,
                object_=object,
                after_id=after_id,
                limit=limit,
            ),
            copy,
        )
        nxt = rows[-1]["id"] if len(rows) == limit else None
        return json_response({"relations": rows, "next_after_id": nxt})

    @api.get(
        "/v1/realms/{realm}/relations/{relation_id}/history",
        response_model=RelationHistoryResponse,
    )
    async def relation_belief_history(
        realm: RealmPath,
        relation_id: Annotated[int, Path(ge=1, le=2**63 - 1, description="A relation id.")],
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """A relation's belief history: each interval it was believed current or
        superseded (by what, how), oldest first."""
        found = await svc.on_realm(
            realm,
            auth,
            lambda conn, meta: history.relation_history(conn, meta, relation_id),
            copy,
        )
        if found is None:
            raise RelationNotFound(realm, relation_id)
        return json_response(found)

    return api
