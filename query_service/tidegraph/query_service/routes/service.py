"""The service's own routes: liveness, readiness, metrics, and the realms a key reads."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg import AsyncConnection

from tidegraph.query_service.auth import reaches_every_realm, readable, require_every_realm
from tidegraph.query_service.errors import Unavailable
from tidegraph.query_service.responses import json_response
from tidegraph.query_service.routes.params import Auth
from tidegraph.query_service.service import Service
from tidegraph.schemas import MAIN, RealmsResponse
from tidegraph.store import Placement, RealmFigures, placements, realm_figures, realm_problems


def router(svc: Service) -> APIRouter:
    api = APIRouter()

    @api.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @api.get("/readyz", tags=["service"])
    async def readyz(auth: Auth = None) -> Response:
        """Readiness: the database answers and every realm's tables are usable; answered
        within ``ready_timeout`` whatever the database does. A server other than ``main``
        that does not answer leaves the service ready (its realms answer 503; the others
        are served) and is named under ``unreachable``. With keys configured, the realm
        count, the broken realms and the unreachable servers are told only to a key
        reaching every realm; anyone else learns ready (200) or not ready (503)."""
        detailed = reaches_every_realm(svc.keys, auth)
        try:
            count, problems, unreachable = await _problems(svc)
        except Unavailable:
            if detailed:
                raise
            raise Unavailable("not ready") from None
        if problems:
            raise Unavailable("; ".join(problems) if detailed else "not ready")
        body: dict[str, Any] = {"status": "ready"}
        if detailed:
            body["realms"] = count
            if unreachable:
                body["unreachable"] = unreachable
        return json_response(body)

    @api.get("/metrics", tags=["service"], response_class=Response)
    async def prometheus(auth: Auth = None) -> Response:
        """Prometheus text format; with ``metrics_require_key`` and keys configured, for a
        key reaching every realm only."""
        if svc.settings.metrics_require_key:
            require_every_realm(svc.keys, auth, "/metrics")
        return Response(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @api.get("/v1/realms", tags=["graph"], response_model=RealmsResponse)
    async def realms(auth: Auth = None) -> Response:
        """The realms this key may read, with their sizes and head sequence (503 while a
        server holding one of them does not answer)."""
        main = await svc.gates.of(MAIN)
        placed = await main.run(placements)
        names = readable(svc.keys, auth, [p.realm for p in placed])
        figures: list[RealmFigures] = []
        for server, on in _by_server([p for p in placed if p.realm in names]).items():
            gate = await svc.gates.of(server)

            async def read(
                conn: AsyncConnection[Any],
                at: str = server,
                realms: list[tuple[str, str]] = on,
            ) -> list[RealmFigures]:
                return await realm_figures(conn, realms=realms, server=at)

            figures += await gate.run(read)
        return json_response(
            {
                "realms": [
                    {
                        "realm": f.realm,
                        "embedder": f.embedder,
                        "documents": f.documents.get("indexed", 0),
                        "entities": f.entities,
                        "relations": f.relations,
                        "head_seq": f.head_seq,
                    }
                    for f in sorted(figures, key=lambda f: f.realm)
                ]
            }
        )

    return api


def _by_server(placed: list[Placement]) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for p in placed:
        out.setdefault(p.server, []).append((p.realm, p.schema))
    return out


async def _problems(svc: Service) -> tuple[int, list[str], list[str]]:
    """(realms, why some cannot serve, servers that do not answer) within ``ready_timeout``."""
    within = svc.settings.ready_timeout
    main = await svc.gates.of(MAIN)
    placed = await main.run(placements, within=within)
    problems: list[str] = []
    unreachable: list[str] = []
    for server, on in _by_server(placed).items():
        gate = await svc.gates.of(server)

        async def check(conn: AsyncConnection[Any], realms: list[tuple[str, str]] = on) -> Any:
            return await realm_problems(conn, realms)

        try:
            _, found = await gate.run(check, within=within)
        except Unavailable:
            if server == MAIN:
                raise
            unreachable.append(server)
            continue
        problems += found
    return len(placed), problems, unreachable
