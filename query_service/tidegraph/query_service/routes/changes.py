"""The change feed, read over HTTP: a page by commit sequence or by belief time, shown once
every standby of the realm's server has it (as the changes topic is)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response
from pydantic import AwareDatetime

from tidegraph.query_service import reads
from tidegraph.query_service.errors import InvalidRequest
from tidegraph.query_service.responses import json_response
from tidegraph.query_service.routes.params import Auth, CopyQuery, Limit, RealmPath, page
from tidegraph.query_service.service import Service
from tidegraph.schemas import ChangesResponse


def router(svc: Service) -> APIRouter:
    api = APIRouter(tags=["changes"])

    @api.get("/v1/realms/{realm}/changes", response_model=ChangesResponse)
    async def changes(
        realm: RealmPath,
        after_seq: Annotated[int | None, Query(ge=0, le=2**62)] = None,
        since: Annotated[AwareDatetime | None, Query()] = None,
        limit: Limit = 100,
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """A page of the change feed, by commit sequence or by belief time."""
        if after_seq is not None and since is not None:
            raise InvalidRequest("give either after_seq or since, not both")
        page(limit, svc.settings.max_page)
        found = await svc.on_feed(
            realm,
            auth,
            lambda conn, meta: reads.changes_page(
                conn, meta, after_seq=after_seq, since=since, limit=limit
            ),
            copy,
        )
        return json_response(found)

    return api
