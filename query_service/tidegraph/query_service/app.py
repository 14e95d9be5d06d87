"""The HTTP API (CONTRACT.md, "HTTP API"): :func:`create_app` builds it from settings and
injected dependencies, so the same app runs under ``tidegraph serve``, in tests through
``httpx.ASGITransport`` and in the benchmark.

Every error answers ``{"error": {"code", "message"}}``: the service's own errors carry
their status, FastAPI's request validation becomes a 422 in that shape, and a transient
database failure a 503. Authentication comes before anything that could reveal whether a
realm exists: no key 401, a key for other realms 403, then an unknown realm 404.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Annotated, Any

import orjson
import psycopg
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from pydantic import AwareDatetime
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tidegraph.query_service import channels, reads
from tidegraph.query_service.auth import authorize, reachable
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import (
    RealmCatalog,
    unavailable,
)
from tidegraph.query_service.docs import install_docs
from tidegraph.query_service.embedding import EmbedderFactory, QueryEmbedder, checked
from tidegraph.query_service.errors import (
    ChatModelNotConfigured,
    DocumentNotFound,
    EmbedderMismatch,
    InvalidRequest,
    MalformedJson,
    QueryServiceError,
    Unavailable,
    UnknownParameter,
)
from tidegraph.query_service.keywords import KeywordModel
from tidegraph.query_service.metrics import ServiceMetrics
from tidegraph.query_service.models import (
    AS_OF_DOC,
    ChangesResponse,
    DocumentResponse,
    EntitiesResponse,
    ErrorResponse,
    QueryDataRequest,
    QueryDataResponse,
    QueryRequest,
    QueryResponse,
    RealmsResponse,
    RelationsResponse,
    no_nul,
    valid_as_of,
)
from tidegraph.query_service.retrieval import (
    RetrievalLimits,
    RetrievalParams,
    RetrievalResult,
    prepare,
    search,
)
from tidegraph.query_service.synthesis import SYSTEM_PROMPT, ChatModel, build_prompt
from tidegraph.schemas.api_keys import ApiKeys
from tidegraph.schemas.errors import ConfigError, ContractError, TidegraphError
from tidegraph.schemas.names import validate_space
from tidegraph.store.errors import is_transient
from tidegraph.store.figures import realm_figures
from tidegraph.store.realms import RealmInfo, list_realms, realm_problems

log = logging.getLogger(__name__)

Pool = AsyncConnectionPool[AsyncConnection[Any]]
RealmPath = Annotated[str, Path(description="Realm name.", max_length=64)]
CopyQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Read a copy of the realm instead of the realm itself, read-only:"
        " `audit_<label>` (made by `tidegraph replay --until`: the realm as the log stood"
        " then), `retired_<label>` or `shadow_<label>`; `tidegraph realm copies R` lists them.",
    ),
]
Auth = Annotated[str | None, Header(alias="Authorization", include_in_schema=False)]


@dataclass(frozen=True)
class Deps:
    """What the app is given rather than builds: the composition root owns their lifecycle."""

    pool: Pool
    """An opened pool (see :func:`tidegraph.query_service.db.make_pool`)."""
    embedders: EmbedderFactory
    """``(realm, pinned id) → embedder`` for query vectors."""
    chat: ChatModel | None = None
    """Chat model for ``/query``; without one ``/query`` answers 503."""
    keyword_model: KeywordModel | None = None
    """Model-backed keyword extraction; lexical when ``None``."""
    registry: CollectorRegistry | None = None
    """Where metrics register; a private registry when ``None``."""


_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorResponse, "description": d}
    for s, d in {
        401: "No key or an unknown key.",
        403: "The key does not reach this realm.",
        404: "Unknown realm (or document).",
        409: "Query embedder is not the realm's.",
        422: "Invalid request or a limit exceeded.",
        503: "A dependency is unavailable.",
    }.items()
}


def create_app(settings: QuerySettings, deps: Deps) -> FastAPI:
    """The query API over the realms in ``deps.pool``'s database."""
    keys = ApiKeys.parse(settings.api_keys.get_secret_value() if settings.api_keys else None)
    catalog = RealmCatalog(settings.realm_cache_seconds)
    metrics = ServiceMetrics(deps.registry or CollectorRegistry(auto_describe=True))
    limits = RetrievalLimits(
        settings.edge_cap,
        settings.channel_depth,
        settings.rrf_k,
        settings.community_weights,
        (settings.ef_search, settings.ef_search_relations, settings.ef_search_chunks),
    )
    embedders: dict[tuple[str, str], QueryEmbedder] = {}
    app = FastAPI(
        title="tidegraph query API",
        version="1",
        description="Retrieval and synthesis over tidegraph's bi-temporal knowledge graph.",
        responses=_ERRORS,
        dependencies=[Depends(_known_query_parameters)],
        docs_url=None,  # served from a package below: works offline
        redoc_url=None,
    )
    install_docs(app)
    _install_error_handlers(app, metrics)
    app.add_middleware(_Observed, metrics=metrics)
    app.add_middleware(_BodyLimit, max_bytes=settings.max_body_bytes)

    async def realm_meta(
        conn: AsyncConnection[Any], realm: str, auth: str | None, copy: str | None = None
    ) -> RealmInfo:
        authorize(keys, auth, realm)
        return await catalog.get(conn, realm, copy)

    def embedder_for(meta: RealmInfo) -> QueryEmbedder:
        key = (meta.realm, meta.embedder)
        if key not in embedders:
            try:
                embedders[key] = deps.embedders(meta.realm, meta.embedder)
            except ConfigError as exc:
                raise EmbedderMismatch(meta.realm, meta.embedder, f"none ({exc})") from None
        return checked(embedders[key], meta.realm, meta.embedder, meta.dimension)

    def params_of(body: QueryDataRequest) -> RetrievalParams:
        if len(body.query) > settings.max_query_chars:
            raise InvalidRequest(f"query longer than {settings.max_query_chars} characters")
        if body.top_k > settings.max_top_k:
            raise InvalidRequest(f"top_k {body.top_k} exceeds the limit {settings.max_top_k}")
        if body.hops > settings.max_hops:
            raise InvalidRequest(f"hops {body.hops} exceeds the limit {settings.max_hops}")
        if body.relation_top_k > settings.max_relation_top_k:
            raise InvalidRequest(
                f"relation_top_k {body.relation_top_k} exceeds the limit "
                f"{settings.max_relation_top_k}"
            )
        return RetrievalParams(
            body.query,
            body.mode,
            body.space,
            body.top_k,
            body.relation_top_k,
            body.hops,
            body.as_of,
            body.as_believed_at,
            body.include_superseded,
            tuple(body.relation_types) if body.relation_types is not None else None,
            body.fusion,
            body.similarity_share,
        )

    async def run_retrieval(
        realm: str, auth: str | None, params: RetrievalParams, copy: str | None = None
    ) -> RetrievalResult:
        async with deps.pool.connection() as conn:
            meta = await realm_meta(conn, realm, auth, copy)
        if params.mode == "bypass":
            return RetrievalResult([], [], [], [], {"mode": "bypass"})
        embedder = embedder_for(meta)
        started = time.perf_counter()
        # keywords and vectors may come from models: no connection is held meanwhile
        prepared = await prepare(params, embedder, meta.dimension, deps.keyword_model)
        async with deps.pool.connection() as conn:
            result = await search(conn, meta, prepared, params, limits)
        metrics.retrieval.labels(params.mode).observe(time.perf_counter() - started)
        result.stats["embedder"] = meta.embedder
        return result

    @app.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["service"])
    async def readyz() -> Response:
        """Readiness: the database answers and every realm's tables are usable."""
        async with deps.pool.connection() as conn:
            count, problems = await realm_problems(conn)
        if problems:
            raise Unavailable("; ".join(problems))
        return _json({"status": "ready", "realms": count})

    @app.get("/metrics", tags=["service"], response_class=Response)
    async def prometheus() -> Response:
        """Prometheus text format."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/realms", tags=["graph"], response_model=RealmsResponse)
    async def realms(auth: Auth = None) -> Response:
        """The realms the caller's key reaches, with their size and head sequence."""
        async with deps.pool.connection() as conn:
            names = [realm for realm, _ in await list_realms(conn)]
            figures = await realm_figures(conn, only=reachable(keys, auth, names))
        return _json(
            {
                "realms": [
                    {
                        "realm": f.realm,
                        "documents": f.documents,
                        "entities": f.entities,
                        "relations": f.relations,
                        "head_seq": f.head_seq,
                        "last_write_at": f.last_write_at,
                        "embedder": f.embedder,
                        "extractor": f.extractor,
                    }
                    for f in figures
                ]
            }
        )

    @app.post("/v1/realms/{realm}/query_data", tags=["query"], response_model=QueryDataResponse)
    async def query_data(
        realm: RealmPath, body: QueryDataRequest, copy: CopyQuery = None, auth: Auth = None
    ) -> Response:
        """Retrieval without synthesis."""
        return _json(await run_retrieval(realm, auth, params_of(body), copy))

    @app.post("/v1/realms/{realm}/query", tags=["query"], response_model=QueryResponse)
    async def query(
        realm: RealmPath, body: QueryRequest, copy: CopyQuery = None, auth: Auth = None
    ) -> Response:
        """Retrieval plus a synthesised answer with references."""
        params = params_of(body)
        if deps.chat is None:
            async with deps.pool.connection() as conn:
                await realm_meta(conn, realm, auth, copy)
            raise ChatModelNotConfigured()
        data = await run_retrieval(realm, auth, params, copy)
        prompt = build_prompt(body.query, data, body.max_prompt_chars)
        try:
            answer = await deps.chat(SYSTEM_PROMPT, prompt.text)
        except TidegraphError as exc:
            raise Unavailable(f"the chat model failed: {exc}") from exc
        return _json(
            {
                "answer": answer,
                "references": prompt.references,
                "prompt": {
                    "retrieved_chars": prompt.retrieved_chars,
                    "prompt_chars": prompt.prompt_chars,
                    "clipped": prompt.clipped,
                    "budget": prompt.budget,
                },
                "data": data,
            }
        )

    @app.get("/v1/realms/{realm}/changes", tags=["changes"], response_model=ChangesResponse)
    async def changes(
        realm: RealmPath,
        after_seq: Annotated[int | None, Query(ge=0, le=2**62)] = None,
        since: Annotated[AwareDatetime | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 100,
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """A page of the change feed, by commit sequence or by belief time."""
        if after_seq is not None and since is not None:
            raise InvalidRequest("give either after_seq or since, not both")
        if limit > settings.max_page:
            raise InvalidRequest(f"limit {limit} exceeds the page limit {settings.max_page}")
        async with deps.pool.connection() as conn:
            meta = await realm_meta(conn, realm, auth, copy)
            page = await reads.changes_page(
                conn, meta, after_seq=after_seq, since=since, limit=limit
            )
        return _json(page)

    @app.get(
        "/v1/realms/{realm}/documents/{doc_key:path}",
        tags=["graph"],
        response_model=DocumentResponse,
    )
    async def document(
        realm: RealmPath,
        doc_key: Annotated[str, Path(min_length=1, max_length=1024)],
        space: Annotated[str, Query(max_length=64)] = "default",
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """A document's indexing state."""
        _text("doc_key", doc_key)
        _space(space, wildcard=False)
        async with deps.pool.connection() as conn:
            meta = await realm_meta(conn, realm, auth, copy)
            state = await reads.document_state(conn, meta, space, doc_key)
        if state is None:
            raise DocumentNotFound(realm, space, doc_key)
        return _json(state)

    @app.get("/v1/realms/{realm}/relations", tags=["graph"], response_model=RelationsResponse)
    async def relations(
        realm: RealmPath,
        subject: Annotated[str | None, Query(max_length=1024)] = None,
        predicate: Annotated[str | None, Query(max_length=128)] = None,
        object: Annotated[str | None, Query(max_length=1024)] = None,  # noqa: A002
        space: Annotated[str, Query(max_length=64)] = "*",
        as_of: Annotated[str | None, Query(description=AS_OF_DOC)] = None,
        as_believed_at: Annotated[AwareDatetime | None, Query()] = None,
        include_superseded: bool = False,
        after_id: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 100,
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """Relations by canonical names and predicate; current ones unless asked."""
        for field, text in (("subject", subject), ("predicate", predicate), ("object", object)):
            if text is not None:
                _text(field, text)
        _space(space, wildcard=True)
        if limit > settings.max_page:
            raise InvalidRequest(f"limit {limit} exceeds the page limit {settings.max_page}")
        scope = channels.Scope(space, _valid_days(as_of), as_believed_at, include_superseded, None)
        async with deps.pool.connection() as conn:
            meta = await realm_meta(conn, realm, auth, copy)
            rows = await reads.list_relations(
                conn,
                meta,
                scope,
                subject=subject,
                predicate=predicate,
                object_=object,
                after_id=after_id,
                limit=limit,
            )
        nxt = int(rows[-1]["id"]) if len(rows) == limit else None
        return _json({"relations": rows, "next_after_id": nxt})

    @app.get("/v1/realms/{realm}/entities", tags=["graph"], response_model=EntitiesResponse)
    async def entities(
        realm: RealmPath,
        name: Annotated[str | None, Query(max_length=1024)] = None,
        space: Annotated[str, Query(max_length=64)] = "*",
        include_dormant: bool = False,
        after_id: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 100,
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """Entities by canonical name or alias."""
        if name is not None:
            _text("name", name)
        _space(space, wildcard=True)
        if limit > settings.max_page:
            raise InvalidRequest(f"limit {limit} exceeds the page limit {settings.max_page}")
        async with deps.pool.connection() as conn:
            meta = await realm_meta(conn, realm, auth, copy)
            rows = await reads.list_entities(
                conn,
                meta,
                name=name,
                space=space,
                include_dormant=include_dormant,
                after_id=after_id,
                limit=limit,
            )
        nxt = int(rows[-1]["id"]) if len(rows) == limit else None
        return _json({"entities": rows, "next_after_id": nxt})

    return app


def _text(field: str, value: str) -> None:
    """Path and query text reaches SQL as a parameter; PostgreSQL text cannot hold NUL."""
    try:
        no_nul(value)
    except ValueError as exc:
        raise InvalidRequest(f"{field}: {exc}") from None


def _space(space: str, *, wildcard: bool) -> None:
    try:
        validate_space(space, allow_wildcard=wildcard)
    except ContractError as exc:
        raise InvalidRequest(str(exc)) from None


def _default(obj: Any) -> Any:
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def _json(body: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(body, default=_default, option=orjson.OPT_UTC_Z),
        status_code=status,
        media_type="application/json",
    )


def error_response(status: int, code: str, message: str) -> Response:
    """The contract's error body."""
    return _json({"error": {"code": code, "message": message}}, status)


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


def _install_error_handlers(app: FastAPI, metrics: ServiceMetrics) -> None:
    def answer(status: int, code: str, message: str) -> Response:
        metrics.errors.labels(code).inc()
        return error_response(status, code, message)

    async def service_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, QueryServiceError)
        return answer(exc.status, exc.code, str(exc))

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
            return answer(err.status, err.code, str(err))
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


async def _known_query_parameters(request: Request) -> None:
    """Refuse query-string parameters an API route does not declare (400 naming them);
    service routes (health, metrics) ignore them, as probes expect."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None or not request.query_params or not request.url.path.startswith("/v1/"):
        return
    allowed = sorted(
        {p.alias for p in dependant.query_params}
        | {p.alias for d in dependant.dependencies for p in d.query_params}
    )
    unknown = sorted(set(request.query_params) - set(allowed))
    if unknown:
        raise UnknownParameter(unknown, allowed)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


class _BodyLimit:
    """Refuse request bodies over ``max_bytes`` (declared or streamed) with a 422.

    Bodies are read up to the limit before the app sees them (they are small JSON), so an
    oversized stream is refused before any parsing, whatever the framework does with it.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes or declared < 0:
                    await self._refuse(send)
                    return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        response = error_response(
            422, "request_too_large", f"request body exceeds {self.max_bytes} bytes"
        )
        await send(
            {
                "type": "http.response.start",
                "status": 422,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": bytes(response.body)})


def _valid_days(as_of: str | None) -> tuple[date, date] | None:
    """The days a query-string ``as_of`` covers; 422 naming it when it is no date."""
    try:
        return channels.valid_days(valid_as_of(as_of))
    except ValueError as exc:
        raise InvalidRequest(f"as_of: {exc}") from None


class _Observed:
    """Count and time every request by route template (never by raw path)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
