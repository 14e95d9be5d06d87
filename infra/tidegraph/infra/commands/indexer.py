"""``tidegraph indexer``: run one member of the indexer consumer group."""

from __future__ import annotations

import argparse
import asyncio
import logging

from aiokafka.errors import KafkaConnectionError
from prometheus_client import start_http_server

from tidegraph.indexer.consumer import Indexer, IndexerConfig, make_pool
from tidegraph.indexer.extraction import Pipeline, PipelineConfig
from tidegraph.infra._proc import LOOPBACK, ensure_port_free
from tidegraph.infra.cli import ShowDefaults
from tidegraph.infra.composition import ModelRegistry
from tidegraph.infra.logs import set_service_level
from tidegraph.infra.placed import servers_for
from tidegraph.infra.reach import kafka_unreachable, until_stopped, wait_for_kafka, wait_for_pg
from tidegraph.infra.runtime import (
    add_concurrency_option,
    default_realm_config,
    documents_prepared_at_once,
    llm_client_if_configured,
    on_termination,
)
from tidegraph.schemas import load_settings

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "indexer",
        formatter_class=ShowDefaults,
        help="consume document versions and keep realm graphs in step",
        description="Run one member of the indexer consumer group until SIGTERM.",
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEGRAPH_KAFKA_BOOTSTRAP)")
    p.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    p.add_argument("--topic-prefix", help="topic prefix (TIDEGRAPH_TOPIC_PREFIX)")
    p.add_argument("--group", default="tidegraph-indexer", help="consumer group id")
    add_concurrency_option(p)
    p.add_argument("--max-poll-records", type=int, default=256)
    p.add_argument(
        "--catch-up-run",
        type=int,
        default=IndexerConfig.catch_up_run,
        help="records of one realm fetched back to back that are written in one transaction"
        " while the indexer is behind (0: every record on its own)",
    )
    p.add_argument(
        "--metrics-port", type=int, default=0, help="serve /metrics on this port (0: none)"
    )
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    set_service_level(args.log_level)
    settings = load_settings(
        kafka_bootstrap=args.bootstrap, pg_dsn=args.pg_dsn, topic_prefix=args.topic_prefix
    )
    if args.metrics_port:
        ensure_port_free("the indexer's metrics", args.metrics_port, option="--metrics-port")
        start_http_server(args.metrics_port, addr=LOOPBACK)
    asyncio.run(_main(args, settings))
    return 0


async def _main(args: argparse.Namespace, settings: object) -> None:
    from tidegraph.schemas.settings import Settings

    assert isinstance(settings, Settings)
    dsn = settings.pg_dsn.get_secret_value()
    if not await until_stopped(_services_answer(dsn, settings.kafka_bootstrap)):
        return
    config = IndexerConfig(
        bootstrap=settings.kafka_bootstrap,
        pg_dsn=dsn,
        servers=servers_for(dsn),
        topic=settings.documents_topic,
        dlq_topic=settings.dlq_topic,
        group_id=args.group,
        default_realm=default_realm_config(),
        prepare_concurrency=documents_prepared_at_once(args.concurrency),
        max_poll_records=args.max_poll_records,
        catch_up_run=args.catch_up_run,
    )
    pool = make_pool(config)
    registry = ModelRegistry(pool=pool, llm=llm_client_if_configured())
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for, PipelineConfig())
    indexer = Indexer(
        config, pipeline.prepare, registry.embedder_for, pool, judge_for=registry.judge_for
    )
    stopping = False

    def stop() -> None:
        nonlocal stopping
        stopping = True
        indexer.stop()

    on_termination(stop)
    try:
        await indexer.run()
    except KafkaConnectionError as exc:
        raise kafka_unreachable(settings.kafka_bootstrap, exc) from None
    except asyncio.CancelledError:
        # Told to stop while the broker is away, aiokafka's consumer.stop() re-raises the
        # cancellation of its own fetch task; nothing of ours was interrupted.
        task = asyncio.current_task()
        if not stopping or (task is not None and task.cancelling()):
            raise
        log.warning("stopped while Kafka at %s did not answer", settings.kafka_bootstrap)


async def _services_answer(dsn: str, bootstrap: str) -> None:
    await wait_for_pg(dsn)
    await wait_for_kafka(bootstrap)
