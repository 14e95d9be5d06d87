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
from dataclasses import dataclass, replace
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
from pydantic import AwareDatetime, BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tidegraph.query_service import channels, reads, telemetry, topics
from tidegraph.query_service.auth import (
    authorize,
    reaches_every_realm,
    readable,
    require_every_realm,
)
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.context import BLOCKS
from tidegraph.query_service.db import (
    RealmCatalog,
    unavailable,
)
from tidegraph.query_service.decompose import merge, sub_questions
from tidegraph.query_service.docs import install_docs
from tidegraph.query_service.embedding import EmbedderFactory, QueryEmbedder, checked
from tidegraph.query_service.errors import (
    ChatModelNotConfigured,
    DocumentNotFound,
    EmbedderMismatch,
    InvalidRequest,
    MalformedJson,
    QueryServiceError,
    TelemetryOff,
    Unavailable,
    UnknownParameter,
)
from tidegraph.query_service.explorer import mount_explorer
from tidegraph.query_service.export_routes import export_router
from tidegraph.query_service.gate import DatabaseGate
from tidegraph.query_service.keywords import KeywordModel
from tidegraph.query_service.metrics import ServiceMetrics
from tidegraph.query_service.rerank_endpoint import Reranker, rerank_answer, wanted
from tidegraph.query_service.retrieval import (
    RetrievalLimits,
    RetrievalParams,
    prepare,
    relation_cap,
    search,
)
from tidegraph.query_service.synthesis import SYSTEM_PROMPT, ChatModel, build_prompt
from tidegraph.schemas import VERSION
from tidegraph.schemas.api import (
    AS_OF_DOC,
    ENTITIES_BELIEVED_AT_DOC,
    ChangesResponse,
    CommunitiesResponse,
    CoverageCommunitiesResponse,
    CoverageEntitiesResponse,
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
from tidegraph.schemas.api_keys import ApiKeys
from tidegraph.schemas.errors import ConfigError, ContractError, TidegraphError
from tidegraph.schemas.names import validate_space
from tidegraph.store.errors import is_transient
from tidegraph.store.figures import RealmFigures, realm_figures
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
    gate: DatabaseGate | None = None
    """The pool's outage gate; one over ``pool`` with the settings' timings when ``None``
    (the app keeps it in ``app.state.database_gate``; close it with the pool)."""
    reranker: Reranker | None = None
    """The rerank endpoint (:mod:`~tidegraph.query_service.rerank_endpoint`), if any."""


_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorResponse, "description": d}
    for s, d in {
        400: "A request body that is not JSON.",
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
        settings.ef_search_hashing_relations,
        settings.entity_similarity_floor,
    )
    embedders: dict[tuple[str, str], QueryEmbedder] = {}
    gate = deps.gate or DatabaseGate(deps.pool, settings.gate_timings())
    app = FastAPI(
        title="tidegraph query API",
        version=VERSION,  # the release; the contract's version is in its paths (/v1/…)
        description="Retrieval and synthesis over tidegraph's bi-temporal knowledge graph.",
        responses=_ERRORS,
        dependencies=[Depends(_known_query_parameters)],
        docs_url=None,  # served from a package below: works offline
        redoc_url=None,
    )
    install_docs(app)
    _install_error_handlers(app, metrics)
    mount_explorer(app, keys_required=keys.enabled)
    app.add_middleware(_Observed, metrics=metrics)
    app.add_middleware(_BodyLimit, max_bytes=settings.max_body_bytes)
    app.state.database_gate = gate

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
        relation_top_k = relation_cap(body.top_k, body.relation_top_k)
        if relation_top_k > settings.max_relation_top_k:
            raise InvalidRequest(
                f"relation_top_k {relation_top_k} exceeds the limit {settings.max_relation_top_k}"
            )
        if (body.max_relation_edges or 0) > settings.max_relation_edges:
            raise InvalidRequest(
                f"max_relation_edges {body.max_relation_edges} exceeds the limit "
                f"{settings.max_relation_edges}"
            )
        return RetrievalParams(
            body.query,
            body.mode,
            body.space,
            body.top_k,
            relation_top_k,
            body.hops,
            body.as_of,
            body.as_believed_at,
            body.include_superseded,
            tuple(body.relation_types) if body.relation_types is not None else None,
            body.fusion,
            body.similarity_share,
            body.mmr_lambda if body.mmr else None,
            body.node_distance,
            body.max_relation_edges,
            body.decompose,
            body.rerank,
        )

    async def lookup(realm: str, auth: str | None, copy: str | None = None) -> RealmInfo:
        """The realm (or its read-only ``copy``) after the key check."""
        authorize(keys, auth, realm)
        return await gate.run(lambda conn: catalog.get(conn, realm, copy))

    app.include_router(export_router(lookup, deps.pool, gate))

    async def run_retrieval(
        realm: str, auth: str | None, params: RetrievalParams, copy: str | None = None
    ) -> QueryDataResponse:
        meta = await lookup(realm, auth, copy)
        if params.mode == "bypass":
            return QueryDataResponse(
                entities=[], relations=[], chunks=[], communities=[], stats={"mode": "bypass"}
            )
        embedder = embedder_for(meta)
        rerank = wanted(params.rerank, deps.reranker)
        started = time.perf_counter()
        parts = sub_questions(params.query) if params.decompose else [params.query]
        asked = [replace(params, query=part) for part in parts]
        # keywords and vectors may come from models: no connection is held meanwhile
        prepared = [await prepare(p, embedder, meta.dimension, deps.keyword_model) for p in asked]

        async def searched(conn: AsyncConnection[Any]) -> list[QueryDataResponse]:
            return [
                await search(conn, meta, pr, p, limits)
                for pr, p in zip(prepared, asked, strict=True)
            ]

        results = await gate.run(searched)
        result = results[0]
        if len(results) > 1:
            result = merge(results, params.top_k, params.relation_top_k)
            result.stats["mode"] = params.mode
        if params.decompose:
            result.stats["decomposition"] = parts
        metrics.retrieval.labels(params.mode).observe(time.perf_counter() - started)
        if rerank and deps.reranker is not None:
            result = await rerank_answer(deps.reranker, params.query, result, metrics)
        result.stats["embedder"] = meta.embedder
        if meta.config.coverage_telemetry:
            await record_coverage(meta, params, result)
        return result

    async def record_coverage(
        meta: RealmInfo, params: RetrievalParams, result: QueryDataResponse
    ) -> None:
        """Read-side bookkeeping: a failure is logged and counted, never answered."""
        try:
            async with deps.pool.connection() as conn:
                await telemetry.record(conn, meta, params.query, params.mode, result)
        except Exception as exc:  # noqa: BLE001 — nothing here may fail the query
            metrics.telemetry_failures.labels(meta.realm).inc()
            log.warning("realm %s: coverage telemetry not recorded: %s", meta.realm, exc)

    @app.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["service"])
    async def readyz(auth: Auth = None) -> Response:
        """Readiness: the database answers and every realm's tables are usable; answered
        within ``ready_timeout`` whatever the database does. With keys configured, the
        realm count and the broken realms are told only to a key reaching every realm;
        anyone else learns ready (200) or not ready (503)."""
        detailed = reaches_every_realm(keys, auth)
        try:
            count, problems = await gate.run(realm_problems, within=settings.ready_timeout)
        except Unavailable:
            if detailed:
                raise
            raise Unavailable("not ready") from None
        if problems:
            raise Unavailable("; ".join(problems) if detailed else "not ready")
        return _json({"status": "ready", "realms": count} if detailed else {"status": "ready"})

    @app.get("/metrics", tags=["service"], response_class=Response)
    async def prometheus(auth: Auth = None) -> Response:
        """Prometheus text format; with ``metrics_require_key`` and keys configured, for a
        key reaching every realm only."""
        if settings.metrics_require_key:
            require_every_realm(keys, auth, "/metrics")
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/realms", tags=["graph"], response_model=RealmsResponse)
    async def realms(auth: Auth = None) -> Response:
        """The realms this key may read, with their sizes and head sequence."""

        async def read(conn: AsyncConnection[Any]) -> list[RealmFigures]:
            names = [realm for realm, _ in await list_realms(conn)]
            return await realm_figures(conn, only=readable(keys, auth, names))

        figures = await gate.run(read)
        return _json(
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
            await lookup(realm, auth, copy)
            raise ChatModelNotConfigured()
        data = await run_retrieval(realm, auth, params, copy)
        given = body.token_budgets
        budgets = {b: n for b in BLOCKS if given and (n := getattr(given, b)) is not None}
        prompt = build_prompt(body.query, data, body.max_prompt_chars, budgets)
        for block, st in prompt.blocks.items():
            metrics.context_items.labels(block, "retrieved").observe(st.retrieved_items)
            metrics.context_items.labels(block, "prompt").observe(st.prompt_items)
            metrics.context_chars.labels(block, "retrieved").observe(st.retrieved_chars)
            metrics.context_chars.labels(block, "prompt").observe(st.prompt_chars)
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
                    "blocks": prompt.blocks,
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
        _page(limit, settings.max_page)
        meta = await lookup(realm, auth, copy)
        page = await gate.run(
            lambda conn: reads.changes_page(
                conn, meta, after_seq=after_seq, since=since, limit=limit
            )
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
        as_believed_at: Annotated[AwareDatetime | None, Query()] = None,
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """A document's indexing state; with `as_believed_at`, the version the realm held
        at that instant (404 when it held none)."""
        _text("doc_key", doc_key)
        _space(space, wildcard=False)
        meta = await lookup(realm, auth, copy)
        state = await gate.run(
            lambda conn: reads.document_state(conn, meta, space, doc_key, as_believed_at)
        )
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
        _page(limit, settings.max_page)
        scope = channels.Scope(space, _valid_days(as_of), as_believed_at, include_superseded, None)
        meta = await lookup(realm, auth, copy)
        rows = await gate.run(
            lambda conn: reads.list_relations(
                conn,
                meta,
                scope,
                subject=subject,
                predicate=predicate,
                object_=object,
                after_id=after_id,
                limit=limit,
            )
        )
        nxt = int(rows[-1]["id"]) if len(rows) == limit else None
        return _json({"relations": rows, "next_after_id": nxt})

    @app.get("/v1/realms/{realm}/entities", tags=["graph"], response_model=EntitiesResponse)
    async def entities(
        realm: RealmPath,
        name: Annotated[str | None, Query(max_length=1024)] = None,
        space: Annotated[str, Query(max_length=64)] = "*",
        include_dormant: bool = False,
        include_archived: bool = False,
        as_believed_at: Annotated[
            AwareDatetime | None, Query(description=ENTITIES_BELIEVED_AT_DOC)
        ] = None,
        after_id: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 100,
        copy: CopyQuery = None,
        auth: Auth = None,
    ) -> Response:
        """Entities by id; with `name`, a ranked lookup by name or alias: exact matches
        first, then names and aliases beginning with it, then those with words beginning
        with its words (`name=Ada` finds Ada Lovelace). A lookup is one page. With
        `as_believed_at`, the entities and attributes believed at that instant."""
        if name is not None:
            _text("name", name)
        _space(space, wildcard=True)
        _page(limit, settings.max_page)
        meta = await lookup(realm, auth, copy)
        rows = await gate.run(
            lambda conn: reads.list_entities(
                conn,
                meta,
                name=name,
                space=space,
                include_dormant=include_dormant,
                include_archived=include_archived,
                after_id=after_id,
                limit=limit,
                believed_at=as_believed_at,
            )
        )
        nxt = int(rows[-1]["id"]) if len(rows) == limit and name is None else None
        return _json({"entities": rows, "next_after_id": nxt})

    @app.get("/v1/realms/{realm}/communities", tags=["graph"], response_model=CommunitiesResponse)
    async def communities(
        realm: RealmPath,
        space: Annotated[str, Query(max_length=64)] = "*",
        level: Annotated[int | None, Query(ge=0, le=64)] = None,
        after_id: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 100,
        auth: Auth = None,
    ) -> Response:
        """The nested topic tree (paper §6.1): communities with their level, parent and
        children, as the last community build stored them."""
        _space(space, wildcard=True)
        _page(limit, settings.max_page)
        meta = await lookup(realm, auth)
        page = await gate.run(
            lambda conn: topics.community_tree(
                conn, meta, space=space, level=level, after_id=after_id, limit=limit
            )
        )
        return _json(page)

    async def coverage_meta(realm: str, auth: str | None) -> RealmInfo:
        meta = await lookup(realm, auth)
        if not meta.config.coverage_telemetry:
            raise TelemetryOff(realm)
        return meta

    @app.get(
        "/v1/realms/{realm}/coverage/communities",
        tags=["coverage"],
        response_model=CoverageCommunitiesResponse,
    )
    async def least_retrieved_communities(
        realm: RealmPath,
        space: Annotated[str, Query(max_length=64)] = "*",
        limit: Annotated[int, Query(ge=1, le=100_000)] = 100,
        auth: Auth = None,
    ) -> Response:
        """The current communities recorded queries reached least (paper §6.1)."""
        _space(space, wildcard=True)
        _page(limit, settings.max_page)
        meta = await coverage_meta(realm, auth)

        async def read(conn: AsyncConnection[Any]) -> dict[str, Any]:
            rows = await telemetry.least_retrieved_communities(conn, meta, space=space, limit=limit)
            return {"communities": rows, "since": await telemetry.since(conn, meta)}

        return _json(await gate.run(read))

    @app.get(
        "/v1/realms/{realm}/coverage/entities",
        tags=["coverage"],
        response_model=CoverageEntitiesResponse,
    )
    async def never_retrieved_entities(
        realm: RealmPath,
        space: Annotated[str, Query(max_length=64)] = "*",
        after_id: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 100,
        auth: Auth = None,
    ) -> Response:
        """Live entities no recorded query has touched (paper §6.1), by id."""
        _space(space, wildcard=True)
        _page(limit, settings.max_page)
        meta = await coverage_meta(realm, auth)

        async def read(conn: AsyncConnection[Any]) -> tuple[list[dict[str, Any]], Any]:
            rows = await telemetry.never_retrieved_entities(
                conn, meta, space=space, after_id=after_id, limit=limit
            )
            return rows, await telemetry.since(conn, meta)

        rows, first = await gate.run(read)
        nxt = int(rows[-1]["id"]) if len(rows) == limit else None
        return _json({"entities": rows, "since": first, "next_after_id": nxt})

    return app


def _text(field: str, value: str) -> None:
    """Path and query text reaches SQL as a parameter; PostgreSQL text cannot hold NUL."""
    try:
        no_nul(value)
    except ValueError as exc:
        raise InvalidRequest(f"{field}: {exc}") from None


def _page(limit: int, max_page: int) -> None:
    """The service's page limit (a setting) beside the OpenAPI one, which is fixed."""
    if limit > max_page:
        raise InvalidRequest(f"limit {limit} exceeds the page limit {max_page}")


def _space(space: str, *, wildcard: bool) -> None:
    try:
        validate_space(space, allow_wildcard=wildcard)
    except ContractError as exc:
        raise InvalidRequest(str(exc)) from None


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump()
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
