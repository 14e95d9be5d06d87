"""The HTTP API (CONTRACT.md, "HTTP API"): :func:`create_app` builds it from settings and
injected dependencies, so the same app runs under ``tidegraph serve``, in tests through
``httpx.ASGITransport`` and in the benchmark.

The routes live in :mod:`~tidegraph.query_service.routes`, one router per resource, over a
shared :class:`~tidegraph.query_service.service.Service`. Every error answers
``{"error": {"code", "message"}}`` (:mod:`~tidegraph.query_service.handlers`).
Authentication comes before anything that could reveal whether a realm exists: no key 401,
a key for other realms 403, then an unknown realm 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI
from prometheus_client import CollectorRegistry
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import RealmCatalog
from tidegraph.query_service.docs import install_docs
from tidegraph.query_service.embedding import EmbedderFactory
from tidegraph.query_service.explorer import mount_explorer
from tidegraph.query_service.gate import DatabaseGate, Gates
from tidegraph.query_service.handlers import (
    install_error_handlers,
    known_query_parameters,
    required_sequence,
)
from tidegraph.query_service.keywords import KeywordModel
from tidegraph.query_service.metrics import ServiceMetrics
from tidegraph.query_service.middleware import BodyLimit, Observed, ReadHeaders
from tidegraph.query_service.replicas import ReadRouter
from tidegraph.query_service.rerank_endpoint import Reranker
from tidegraph.query_service.retrieval import RetrievalLimits
from tidegraph.query_service.routes import changes, coverage, export, graph, query, service
from tidegraph.query_service.service import Service
from tidegraph.query_service.synthesis import ChatModel
from tidegraph.schemas import VERSION, ApiKeys, ErrorResponse, Servers
from tidegraph.store import Cluster

Pool = AsyncConnectionPool[AsyncConnection[Any]]


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
    cluster: Cluster | None = None
    """Every server realms live on, ``main``'s pool being ``pool``; ``None``: ``pool``'s
    server alone. The composition root opens and closes it; the gates of the other
    servers (``app.state.database_gates``) close with ``aclose``."""
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
    """The query API over the realms of ``deps``' servers."""
    keys = ApiKeys.parse(settings.api_keys.get_secret_value() if settings.api_keys else None)
    metrics = ServiceMetrics(deps.registry or CollectorRegistry(auto_describe=True))
    gate = deps.gate or DatabaseGate(deps.pool, settings.gate_timings())
    cluster = deps.cluster or Cluster(
        Servers.single(_dsn(deps.pool)), _no_other_server, main_pool=deps.pool
    )
    gates = Gates(cluster, gate, lambda result: metrics.db_checks.labels(result).inc())
    svc = Service(
        settings,
        keys,
        gates,
        RealmCatalog(settings.realm_cache_seconds),
        metrics,
        RetrievalLimits(
            settings.edge_cap,
            settings.channel_depth,
            settings.rrf_k,
            settings.community_weights,
            (settings.ef_search, settings.ef_search_relations, settings.ef_search_chunks),
            settings.ef_search_hashing_relations,
            settings.entity_similarity_floor,
        ),
        deps.embedders,
        ReadRouter(gates, settings.replica_policy(), metrics),
        deps.keyword_model,
        deps.reranker,
    )
    app = FastAPI(
        title="tidegraph query API",
        version=VERSION,  # the release; the contract's version is in its paths (/v1/…)
        description="Retrieval and synthesis over tidegraph's bi-temporal knowledge graph.",
        responses=_ERRORS,
        dependencies=[Depends(known_query_parameters), Depends(required_sequence)],
        docs_url=None,  # served from a package below: works offline
        redoc_url=None,
    )
    install_docs(app)
    install_error_handlers(app, metrics)
    mount_explorer(app, keys_required=keys.enabled)
    app.add_middleware(ReadHeaders)
    app.add_middleware(Observed, metrics=metrics)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.state.database_gate = gate
    app.state.database_gates = gates
    for api in (
        service.router(svc),
        query.router(svc, deps.chat),
        changes.router(svc),
        graph.router(svc),
        coverage.router(svc),
        export.router(svc),
    ):
        app.include_router(api)
    return app


def _dsn(pool: Pool) -> str:
    return pool.conninfo if isinstance(pool.conninfo, str) else ""


def _no_other_server(name: str, dsn: str) -> Pool:
    raise AssertionError(f"a single-server app has no pool for server {name!r}")
