"""The graph as stored: documents, relations, entities and the community tree, each
resource in its own module; this router mounts them in that order."""

from __future__ import annotations

from fastapi import APIRouter

from tidegraph.query_service.routes import communities, documents, entities, relations
from tidegraph.query_service.service import Service


def router(svc: Service) -> APIRouter:
    api = APIRouter()
    for part in (documents, relations, entities, communities):
        api.include_router(part.router(svc))
    return api
