"""``tidegraph indexer``: run one member of the indexer consumer group."""

from __future__ import annotations

import argparse
import asyncio
import logging

from prometheus_client import start_http_server

from tidegraph.indexer.consumer.indexer import Indexer, IndexerConfig, make_pool
from tidegraph.indexer.extraction.pipeline import Pipeline, PipelineConfig
from tidegraph.infra.composition import ModelRegistry
from tidegraph.infra.runtime import default_realm_config, llm_client_if_configured, on_termination
from tidegraph.schemas.settings import load_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "indexer",
        help="consume document versions and keep realm graphs in step",
        description="Run one member of the indexer consumer group until SIGTERM.",
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEGRAPH_KAFKA_BOOTSTRAP)")
    p.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    p.add_argument("--topic-prefix", help="topic prefix (TIDEGRAPH_TOPIC_PREFIX)")
    p.add_argument("--group", default="tidegraph-indexer", help="consumer group id")
    p.add_argument("--concurrency", type=int, default=8, help="documents prepared at once")
    p.add_argument("--max-poll-records", type=int, default=256)
    p.add_argument("--metrics-port", type=int, default=0, help="serve /metrics on this port")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("tidegraph").setLevel(args.log_level.upper())
    settings = load_settings(
        kafka_bootstrap=args.bootstrap, pg_dsn=args.pg_dsn, topic_prefix=args.topic_prefix
    )
    if args.metrics_port:
        start_http_server(args.metrics_port, addr="127.0.0.1")
    asyncio.run(_main(args, settings))
    return 0


async def _main(args: argparse.Namespace, settings: object) -> None:
    from tidegraph.schemas.settings import Settings

    assert isinstance(settings, Settings)
    dsn = settings.pg_dsn.get_secret_value()
    config = IndexerConfig(
        bootstrap=settings.kafka_bootstrap,
        pg_dsn=dsn,
        topic=settings.documents_topic,
        dlq_topic=settings.dlq_topic,
        group_id=args.group,
        default_realm=default_realm_config(),
        prepare_concurrency=args.concurrency,
        max_poll_records=args.max_poll_records,
    )
    pool = make_pool(config)
    registry = ModelRegistry(pool=pool, llm=llm_client_if_configured())
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for, PipelineConfig())
    indexer = Indexer(config, pipeline.prepare, registry.embedder_for, pool)
    on_termination(indexer.stop)
    await indexer.run()
