"""The graph as stored: a document's state, relations, a relation's belief history,
entities, and the community tree."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response

from tidegraph.query_service import channels, history, reads, topics
from tidegraph.query_service.errors import DocumentNotFound, RelationNotFound
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
    valid_days,
)
from tidegraph.query_service.service import Service
from tidegraph.schemas import (
    AS_OF_DOC,
    BELIEVED_AT_DOC,
    ENTITIES_BELIEVED_AT_DOC,
    BeliefInstant,
    CommunitiesResponse,
    DocumentResponse,
    EntitiesResponse,
    RelationHistoryResponse,
    RelationsResponse,
)

BelievedAt = Annotated[BeliefInstant | None, Query(description=BELIEVED_AT_DOC)]


def router(svc: Service) -> APIRouter:
    api = APIRouter(tags=["graph"])

    @api.get("/v1/realms/{realm}/documents/{doc_key:path}", response_model=DocumentResponse)
    async def document(
        realm: RealmPath,
        doc_key: Annotated[str, Path(min_length=1, max_length=1024)],
        space_: SpaceQuery = "default",
        as_believed_at: BelievedAt = None,
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """A document's indexing state; with `as_believed_at`, the version the realm held
        at that instant (404 when it held none)."""
        text("doc_key", doc_key)
        space(space_, wildcard=False)
        state = await svc.on_realm(
            realm,
            auth,
            lambda conn, meta: reads.document_state(conn, meta, space_, doc_key, as_believed_at),
            copy,
        )
        if state is None:
            raise DocumentNotFound(realm, space_, doc_key)
        return json_response(state)

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
