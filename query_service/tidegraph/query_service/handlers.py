"""Every error answers the contract's body: the service's own errors with their status,
FastAPI's request validation as a 422 in that shape, a body that is not JSON as a 400
naming where it broke, and a transient database failure as a 503 with ``Retry-After``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Annotated, Any

import psycopg
from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from tidegraph.query_service.db import unavailable
from tidegraph.query_service.errors import (
    MalformedJson,
    QueryServiceError,
    Unavailable,
    UnknownParameter,
)
from tidegraph.query_service.metrics import ServiceMetrics
from tidegraph.query_service.replicas import TICKET
from tidegraph.query_service.responses import error_response
from tidegraph.schemas import MIN_SEQUENCE_HEADER, MIN_SEQUENCE_PARAMETER, ContractError
from tidegraph.store import is_transient

log = logging.getLogger("tidegraph.query_service.app")

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    503: "unavailable",
}


def install_error_handlers(app: FastAPI, metrics: ServiceMetrics) -> None:
    def answer(status: int, code: str, message: str) -> Response:
        metrics.errors.labels(code).inc()
        return error_response(status, code, message)

    async def service_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, QueryServiceError)
        response = answer(exc.status, exc.code, str(exc))
        if isinstance(exc, Unavailable) and exc.retry_after is not None:
            response.headers["Retry-After"] = str(exc.retry_after)
        return response

    async def contract_error(_: Request, exc: Exception) -> Response:
        return answer(422, "invalid_request", str(exc))

    async def validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        broken = [e for e in exc.errors() if e.get("type") == "json_invalid"]
        if broken:
            err = MalformedJson(_json_message(broken[0]))
            return answer(err.status, err.code, str(err))
        return answer(422, "invalid_request", _validation_message(exc))

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        return answer(exc.status_code, code, str(exc.detail))

    async def database_error(_: Request, exc: Exception) -> Response:
        if isinstance(exc, PoolTimeout) or is_transient(exc):
            err = unavailable(exc)
            response = answer(err.status, err.code, str(err))
            response.headers["Retry-After"] = str(err.retry_after)
            return response
        log.exception("database error", exc_info=exc)
        return answer(500, "internal", "internal error; see the service log")

    app.add_exception_handler(QueryServiceError, service_error)
    app.add_exception_handler(ContractError, contract_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(psycopg.Error, database_error)
    app.add_exception_handler(PoolTimeout, database_error)


def _json_message(error: Mapping[str, Any]) -> str:
    """``request body is not JSON: <why> (at character N)`` from FastAPI's decode error."""
    why = (error.get("ctx") or {}).get("error") or "not valid JSON"
    loc = error.get("loc") or ()
    where = f" (at character {loc[-1]})" if loc and isinstance(loc[-1], int) else ""
    return f"request body is not JSON: {why}{where}"


async def known_query_parameters(request: Request) -> None:
    """Refuse query-string parameters an API route does not declare (400 naming them);
    service routes (health, metrics) ignore them, as probes expect."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.query_params or not request.url.path.startswith("/v1/"):
        return
    allowed = sorted(
        {p.alias for p in dependant.query_params}
        | {p.alias for d in dependant.dependencies for p in d.query_params}
        | {MIN_SEQUENCE_PARAMETER}  # every API route's, through the app's dependency
    )
    unknown = sorted(set(request.query_params) - set(allowed))
    if unknown:
        raise UnknownParameter(unknown, allowed)


async def required_sequence(
    min_seq: Annotated[
        int | None,
        Query(
            alias=MIN_SEQUENCE_PARAMETER,
            ge=0,
            le=2**62,
            description="The realm commit sequence the answer must reflect (read-your-writes):"
            " a standby answers only once it has applied it, else the primary does. The"
            f" `{MIN_SEQUENCE_HEADER}` header says the same; the higher of the two counts.",
        ),
    ] = None,
    header: Annotated[
        int | None,
        Header(alias=MIN_SEQUENCE_HEADER, ge=0, le=2**62, include_in_schema=False),
    ] = None,
) -> None:
    """The request's required sequence, into its read ticket (set by the middleware)."""
    ticket = TICKET.get()
    given = [n for n in (min_seq, header) if n is not None]
    if ticket is not None and given:
        ticket.min_seq = max(given)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {str(err.get('msg', 'invalid')).removeprefix('Value error, ')}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
