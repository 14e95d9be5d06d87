"""What every route shares: the key check, where each realm lives, and running database
work on the realm's own server.

A request names a realm; :meth:`Service.lookup` checks the caller's key against it first
(nothing is revealed to a key that may not read it), then finds it through the catalogue
(:class:`~tidegraph.query_service.db.RealmCatalog`, cached a few seconds). Its work then
runs through the gate of the server holding it (:class:`~tidegraph.query_service.gate.
Gates`): one server's outage answers 503 for its realms only. Reads may be answered by
the server's streaming standbys (:class:`~tidegraph.query_service.replicas.ReadRouter`);
writes never are. A realm that left its server under a cached answer — moved, deleted,
rebuilt — is looked up again once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection

from tidegraph.query_service import telemetry
from tidegraph.query_service.auth import authorize
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import RealmCatalog
from tidegraph.query_service.decompose import merge, sub_questions
from tidegraph.query_service.embedding import EmbedderFactory, QueryEmbedder, checked
from tidegraph.query_service.errors import EmbedderMismatch, InvalidRequest
from tidegraph.query_service.gate import Gates
from tidegraph.query_service.keywords import KeywordModel
from tidegraph.query_service.metrics import ServiceMetrics
from tidegraph.query_service.replicas import Reader, ReadRouter
from tidegraph.query_service.rerank_endpoint import Reranker, rerank_answer, wanted
from tidegraph.query_service.retrieval import (
    RetrievalLimits,
    RetrievalParams,
    prepare,
    relation_cap,
    search,
)
from tidegraph.schemas import ApiKeys, ConfigError, QueryDataRequest, QueryDataResponse
from tidegraph.store import RealmInfo

log = logging.getLogger("tidegraph.query_service.app")

T = TypeVar("T")
Work = Callable[[AsyncConnection[Any]], Awaitable[T]]

_GONE = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)
"""What work on a realm raises when its schema left the server a cached answer named."""


@dataclass
class Service:
    """The routes' shared state and the few operations they all use."""

    settings: QuerySettings
    keys: ApiKeys
    gates: Gates
    catalog: RealmCatalog
    metrics: ServiceMetrics
    limits: RetrievalLimits
    embedders: EmbedderFactory
    router: ReadRouter
    keyword_model: KeywordModel | None = None
    reranker: Reranker | None = None
    _embedders: dict[tuple[str, str], QueryEmbedder] = field(default_factory=dict)

    async def lookup(self, realm: str, auth: str | None, copy: str | None = None) -> RealmInfo:
        """The realm (or its read-only ``copy``) after the key check."""
        authorize(self.keys, auth, realm)
        return await self.catalog.get(self.gates, realm, copy)

    async def on_realm(
        self,
        realm: str,
        auth: str | None,
        work: Callable[[AsyncConnection[Any], RealmInfo], Awaitable[T]],
        copy: str | None = None,
    ) -> T:
        """Read-only ``work(conn, meta)`` on the realm's server or one of its standbys
        (:mod:`~tidegraph.query_service.replicas`), after the key check; looked up again
        once when the realm's schema left the server the cache named."""

        async def start(meta: RealmInfo) -> T:
            return await self._reader(copy)(meta, lambda conn: work(conn, meta))

        return await self.placed(realm, auth, start, copy)

    async def placed(
        self,
        realm: str,
        auth: str | None,
        start: Callable[[RealmInfo], Awaitable[T]],
        copy: str | None = None,
    ) -> T:
        """``start(meta)`` after the key check, looked up again once when the realm's schema
        left the server the cache named; for work that holds a connection of its own
        beyond one gated call (a streamed download)."""
        meta = await self.lookup(realm, auth, copy)
        try:
            return await start(meta)
        except _GONE:
            self.catalog.invalidate(realm)
            return await start(await self.lookup(realm, auth, copy))

    async def on_feed(
        self,
        realm: str,
        auth: str | None,
        work: Callable[[AsyncConnection[Any], RealmInfo], Awaitable[T]],
        copy: str | None = None,
    ) -> T:
        """:meth:`on_realm` for the change feed: answered only once every standby of the
        realm's server has what was read (:meth:`~tidegraph.query_service.replicas.
        ReadRouter.fenced`), so no failover takes back a change already shown."""

        async def start(meta: RealmInfo) -> T:
            return await self.router.fenced(meta, lambda conn: work(conn, meta), self._reader(copy))

        return await self.placed(realm, auth, start, copy)

    def _reader(self, copy: str | None) -> Reader:
        """A realm's copies are read on the primary: no required sequence describes them."""
        return self.router.on_primary if copy is not None else self.router.read

    async def run(self, meta: RealmInfo, work: Work[T], within: float | None = None) -> T:
        """``work`` on a connection to the primary of the server holding ``meta``: the
        writes (telemetry) and whatever must see the primary."""
        gate = await self.gates.of(meta.server)
        return await gate.run(work, within=within)

    def embedder_for(self, meta: RealmInfo) -> QueryEmbedder:
        key = (meta.realm, meta.embedder)
        if key not in self._embedders:
            try:
                self._embedders[key] = self.embedders(meta.realm, meta.embedder)
            except ConfigError as exc:
                raise EmbedderMismatch(meta.realm, meta.embedder, f"none ({exc})") from None
        return checked(self._embedders[key], meta.realm, meta.embedder, meta.dimension)

    def params_of(self, body: QueryDataRequest) -> RetrievalParams:
        """A request's retrieval parameters, checked against the service's limits."""
        s = self.settings
        if len(body.query) > s.max_query_chars:
            raise InvalidRequest(f"query longer than {s.max_query_chars} characters")
        if body.top_k > s.max_top_k:
            raise InvalidRequest(f"top_k {body.top_k} exceeds the limit {s.max_top_k}")
        if body.hops > s.max_hops:
            raise InvalidRequest(f"hops {body.hops} exceeds the limit {s.max_hops}")
        relation_top_k = relation_cap(body.top_k, body.relation_top_k)
        if relation_top_k > s.max_relation_top_k:
            raise InvalidRequest(
                f"relation_top_k {relation_top_k} exceeds the limit {s.max_relation_top_k}"
            )
        if (body.max_relation_edges or 0) > s.max_relation_edges:
            raise InvalidRequest(
                f"max_relation_edges {body.max_relation_edges} exceeds the limit "
                f"{s.max_relation_edges}"
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

    async def retrieve(
        self, realm: str, auth: str | None, params: RetrievalParams, copy: str | None = None
    ) -> QueryDataResponse:
        """``query_data``: keywords and vectors first (they may call models: no connection
        is held meanwhile), then the search on the realm's server."""
        meta = await self.lookup(realm, auth, copy)
        if params.mode == "bypass":
            return QueryDataResponse(
                entities=[], relations=[], chunks=[], communities=[], stats={"mode": "bypass"}
            )
        embedder = self.embedder_for(meta)
        rerank = wanted(params.rerank, self.reranker)
        started = time.perf_counter()
        parts = sub_questions(params.query) if params.decompose else [params.query]
        asked = [replace(params, query=part) for part in parts]
        prepared = [await prepare(p, embedder, meta.dimension, self.keyword_model) for p in asked]

        async def searched(conn: AsyncConnection[Any], on: RealmInfo) -> list[QueryDataResponse]:
            return [
                await search(conn, on, pr, p, self.limits)
                for pr, p in zip(prepared, asked, strict=True)
            ]

        results = await self.on_realm(realm, auth, searched, copy)
        result = results[0]
        if len(results) > 1:
            result = merge(results, params.top_k, params.relation_top_k)
            result.stats["mode"] = params.mode
        if params.decompose:
            result.stats["decomposition"] = parts
        self.metrics.retrieval.labels(params.mode).observe(time.perf_counter() - started)
        if rerank and self.reranker is not None:
            result = await rerank_answer(self.reranker, params.query, result, self.metrics)
        result.stats["embedder"] = meta.embedder
        if meta.config.coverage_telemetry and copy is None:  # a copy is read-only
            await self._record_coverage(meta, params, result)
        return result

    async def _record_coverage(
        self, meta: RealmInfo, params: RetrievalParams, result: QueryDataResponse
    ) -> None:
        """Read-side bookkeeping: a failure is logged and counted, never answered. A copy
        that moved away since the realm was looked up (fenced or gone) is looked up again,
        so the row lands with the realm, not with the copy left behind."""

        async def write(at: RealmInfo) -> bool:
            try:
                return await self.run(
                    at, lambda conn: telemetry.record(conn, at, params.query, params.mode, result)
                )
            except _GONE:
                return False

        try:
            written = await write(meta)
            if not written:
                self.catalog.invalidate(meta.realm)
                written = await write(await self.catalog.get(self.gates, meta.realm))
            reason = "the realm moved again meanwhile"
        except Exception as exc:  # noqa: BLE001 — nothing here may fail the query
            written, reason = False, str(exc)
        if not written:
            self.metrics.telemetry_failures.labels(meta.realm).inc()
            log.warning("realm %s: coverage telemetry not recorded: %s", meta.realm, reason)
