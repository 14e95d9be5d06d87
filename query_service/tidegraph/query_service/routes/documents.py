"""A document's indexing state, now or as believed at an instant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import Response

from tidegraph.query_service import reads
from tidegraph.query_service.errors import DocumentNotFound
from tidegraph.query_service.responses import json_response
from tidegraph.query_service.routes.params import (
    Auth,
    BelievedAt,
    CopyQuery,
    RealmPath,
    SpaceQuery,
    space,
    text,
)
from tidegraph.query_service.service import Service
from tidegraph.schemas import (
    DocumentResponse,
)


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

    return api
