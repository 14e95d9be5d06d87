"""``tidegraph serve``: the HTTP query API and the change publisher in one process.

Composition: each realm's query embedder is built from the realm's pinned id
(``hashing:<dim>`` → the offline hashing embedder, ``llm:<model>:<dim>`` → the model
endpoint), the chat model for ``/query`` from the model endpoint when one is configured.
Without API keys the service refuses to listen beyond loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry

from tidegraph.infra._proc import ensure_port_free
from tidegraph.infra.cli import ShowDefaults
from tidegraph.infra.http_server import BoundedConfig, HttpLimits
from tidegraph.infra.logs import set_service_level
from tidegraph.infra.placed import servers_for
from tidegraph.infra.reach import until_stopped, wait_for_pg
from tidegraph.infra.runtime import llm_client_if_configured
from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings, load_query_settings
from tidegraph.query_service.db import make_pool
from tidegraph.query_service.embedding import EmbedderFactory, QueryEmbedder
from tidegraph.query_service.gate import DatabaseGate
from tidegraph.query_service.keywords import (
    KEYWORD_PROMPT,
    KeywordModel,
    Keywords,
    parse_model_keywords,
)
from tidegraph.query_service.publisher import ChangePublisher, KafkaChangeSink
from tidegraph.query_service.rerank_endpoint import RerankEndpoint, RerankSettings
from tidegraph.query_service.synthesis import ChatModel
from tidegraph.schemas.api_keys import ApiKeys, require_loopback
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.realm_config import parse_embedder
from tidegraph.schemas.settings import Settings, load_settings
from tidegraph.schemas.topics import changes_topic
from tidegraph.store.cluster import Cluster

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="HTTP query API and change publisher",
        formatter_class=ShowDefaults,
        description="Serve the query API (CONTRACT.md, HTTP API) and publish each realm's "
        "changes to <prefix>.changes (one publisher per realm across replicas).",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    p.add_argument("--port", type=int, default=8080, help="port to listen on")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEGRAPH_KAFKA_BOOTSTRAP)")
    p.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    p.add_argument("--topic-prefix", help="topic prefix (TIDEGRAPH_TOPIC_PREFIX)")
    p.add_argument("--no-publisher", action="store_true", help="serve queries only")
    p.add_argument(
        "--publish-realm",
        action="append",
        metavar="REALM",
        help="publish only this realm's changes (repeatable; default: every realm)",
    )
    p.add_argument("--pool-size", type=int, default=16, help="database connections")
    p.add_argument(
        "--communities-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="rebuild a realm's communities after this many quiet seconds (0: never)",
    )
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    set_service_level(args.log_level)
    settings = load_settings(
        kafka_bootstrap=args.bootstrap, pg_dsn=args.pg_dsn, topic_prefix=args.topic_prefix
    )
    query_settings = load_query_settings()
    keys = ApiKeys.parse(
        query_settings.api_keys.get_secret_value() if query_settings.api_keys else None
    )
    require_loopback(args.host, keys)
    ensure_port_free("the query service", args.port, args.host, option="--port")
    asyncio.run(_serve_when_ready(args, settings, query_settings))
    return 0


async def _serve_when_ready(
    args: argparse.Namespace, settings: Settings, query: QuerySettings
) -> None:
    """Wait (saying so) until PostgreSQL answers, then serve."""
    if await until_stopped(wait_for_pg(settings.pg_dsn.get_secret_value())):
        await serve(args, settings, query)


def embedder_factory(llm: Any) -> EmbedderFactory:
    """Realm → query embedder in the realm's pinned geometry (never a fallback)."""

    def build(realm: str, pinned: str) -> QueryEmbedder:
        spec = parse_embedder(pinned)
        if spec.kind == "hashing":
            from tidegraph.indexer.models.hashing import HashingEmbedder

            return HashingEmbedder(spec.dimension)
        if llm is None:
            raise ConfigError(
                f"realm {realm!r} is pinned to {pinned!r} and no model endpoint is "
                "configured (set TIDEGRAPH_LLM_BASE_URL)"
            )
        from tidegraph.indexer.models.embedder import LLMEmbedder

        return LLMEmbedder(llm, dimension=spec.dimension, realm=realm, model=spec.model)

    return build


def chat_model(llm: Any) -> ChatModel | None:
    """The endpoint's chat model as the query service's ``ChatModel``, if configured."""
    if llm is None:
        return None

    class _Chat:
        async def __call__(self, system: str, prompt: str) -> str:
            result = await llm.chat(
                [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
                realm="query",
            )
            return str(result.content)

    return _Chat()


def keyword_model(llm: Any) -> KeywordModel | None:
    """Dual-level keywords from the chat model when one is configured (paper §7.2); any
    failure falls back to the lexical extractor inside the query service."""
    if llm is None:
        return None

    async def extract(query: str) -> Keywords:
        result = await llm.chat(
            [{"role": "user", "content": KEYWORD_PROMPT + query}], realm="query", deadline=10.0
        )
        return parse_model_keywords(str(result.content))

    return extract


async def serve(
    args: argparse.Namespace,
    settings: Settings,
    query: QuerySettings,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until uvicorn exits (signals), or until ``stop`` is set by an embedding caller."""
    registry = CollectorRegistry(auto_describe=True)
    dsn = settings.pg_dsn.get_secret_value()
    pool = make_pool(dsn, min_size=2, max_size=args.pool_size, ef_search=query.ef_search)
    await pool.open(wait=True)
    cluster = Cluster(
        servers_for(dsn),
        lambda _, other: make_pool(
            other, min_size=1, max_size=args.pool_size, ef_search=query.ef_search
        ),
        main_pool=pool,
    )
    llm = llm_client_if_configured()
    rerank_settings = RerankSettings()
    reranker = RerankEndpoint(rerank_settings) if rerank_settings.url else None
    gate = DatabaseGate(pool, query.gate_timings())
    app = create_app(
        query,
        Deps(
            pool,
            embedder_factory(llm),
            chat=chat_model(llm),
            keyword_model=keyword_model(llm),
            registry=registry,
            gate=gate,
            reranker=reranker,
            cluster=cluster,
        ),
    )
    server = uvicorn.Server(
        BoundedConfig(
            app,
            limits=HttpLimits(),
            host=args.host,
            port=args.port,
            log_level=args.log_level.lower(),
            log_config=None,  # uvicorn's loggers propagate to the one format (infra.logs)
            lifespan="off",
            access_log=False,
        )
    )
    publisher: ChangePublisher | None = None
    sink: KafkaChangeSink | None = None
    task: asyncio.Task[None] | None = None
    if not args.no_publisher:
        await _ensure_changes_topic(settings)
        sink = KafkaChangeSink(settings.kafka_bootstrap, settings.changes_topic)
        publisher = ChangePublisher(
            dsn, sink, registry=registry, realms=args.publish_realm, cluster=cluster
        )
        task = asyncio.create_task(publisher.run(), name="change-publisher")
    builder: asyncio.Task[None] | None = None
    if getattr(args, "communities_quiet", 0.0) > 0:
        from tidegraph.indexer.communities.auto import auto_build_loop
        from tidegraph.infra.composition import ModelRegistry

        builder = asyncio.create_task(
            auto_build_loop(
                cluster,
                args.communities_quiet,
                embedder_for=ModelRegistry(llm=llm).embedder_for,
                llm=llm,
                realms=args.publish_realm,
            ),
            name="community-builder",
        )
    watcher: asyncio.Task[None] | None = None
    if stop is not None:

        async def _exit_on_stop() -> None:
            await stop.wait()
            server.should_exit = True

        watcher = asyncio.create_task(_exit_on_stop(), name="serve-stop")
    try:
        await server.serve()
    finally:
        for background in (watcher, builder):
            if background is not None:
                background.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await background
        if publisher is not None and task is not None:
            publisher.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if sink is not None:
            await sink.stop()
        if llm is not None:
            await llm.aclose()
        if reranker is not None:
            await reranker.aclose()
        await app.state.database_gates.aclose()
        await gate.aclose()
        await cluster.close()


async def _ensure_changes_topic(settings: Settings) -> None:
    """Create ``<prefix>.changes`` when missing; a broker that refuses is logged, not fatal
    (it may create topics on first write, and the publisher retries until Kafka answers)."""
    from tidegraph.connectors.topics import ensure_topic_specs

    try:
        for warning in await ensure_topic_specs(
            settings.kafka_bootstrap, [changes_topic(settings.topic_prefix)]
        ):
            log.warning("%s", warning)
    except Exception as exc:  # noqa: BLE001 - publishing retries; serving must start
        log.warning("could not ensure topic %s: %s", settings.changes_topic, exc)
