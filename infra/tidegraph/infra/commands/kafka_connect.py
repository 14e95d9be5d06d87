"""`tidegraph kafka-connect up|down|debezium-postgres|file-sink`: a local Kafka Connect worker.

The worker (distributed mode, one node, REST on loopback) logs in to the broker the way
every tidegraph client does (``TIDEGRAPH_KAFKA_*``, which `tidegraph up` writes), and keeps
its files under ``<state>/connect``. Connectors are added through its REST API; their
secrets stay in the worker's ``secrets.properties``.
"""

from __future__ import annotations

import argparse
import sys

from psycopg import conninfo

from tidegraph.connectors import load_connector_settings
from tidegraph.infra import _proc, connect_configs, local_connect
from tidegraph.infra import services as local_services
from tidegraph.schemas import KafkaSecurity, load_settings


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "kafka-connect",
        help="a local Kafka Connect worker with Debezium and FileStreamSink",
        description="Run a local Kafka Connect worker and add connectors to it.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start the worker (fetches its jars once)")
    up.add_argument("--port", type=int, default=local_connect.DEFAULT_REST_PORT, help="REST port")
    up.add_argument("--group", default="tidegraph-connect", help="the Connect cluster's group")
    up.set_defaults(func=run_up)
    down = actions.add_parser("down", help="stop the worker `up` started")
    down.set_defaults(func=run_down)
    pg = actions.add_parser(
        "debezium-postgres", help="add a Debezium PostgreSQL connector (default: local server)"
    )
    pg.add_argument("--name", required=True, help="connector name; also the topic prefix")
    pg.add_argument("--table", action="append", required=True, help="schema.table, repeatable")
    pg.add_argument("--dsn", help="source database (default: $TIDEGRAPH_PG_REPLICATION_DSN)")
    pg.add_argument("--no-schemas", action="store_true", help="JSON without embedded schemas")
    pg.set_defaults(func=run_postgres)
    sink = actions.add_parser("file-sink", help="add a FileStreamSink of a topic")
    sink.add_argument("--name", required=True)
    sink.add_argument("--topic", required=True, help="e.g. tidegraph.changes")
    sink.add_argument("--file", required=True, help="file the worker appends each record to")
    sink.set_defaults(func=run_file_sink)


def _layout(args: argparse.Namespace) -> local_connect.ConnectLayout:
    state = local_services.state_path(getattr(args, "state_dir", None))
    return local_connect.ConnectLayout.under(state)


def _url(args: argparse.Namespace) -> str:
    running = local_connect.running(_layout(args))
    if running is None:
        raise local_connect.ConnectorError(
            "-", "no worker runs here: run tidegraph kafka-connect up"
        )
    return running.url


def run_up(args: argparse.Namespace) -> int:
    layout = _layout(args)
    found = local_connect.running(layout)
    if found is not None:
        _say(f"Kafka Connect already runs: {found.url} (pid {found.pid})")
        return 0
    _proc.ensure_port_free("Kafka Connect", args.port, option="--port")
    settings = load_settings()
    worker = local_connect.WorkerSettings(
        bootstrap=settings.kafka_bootstrap,
        security=KafkaSecurity(),
        rest_port=args.port,
        group=args.group,
    )
    _say("fetching Kafka Connect and Debezium with Maven when missing (once)")
    runtime = local_connect.prepare()
    process = local_connect.launch(layout, runtime, worker, {})
    local_connect.wait_ready(layout, process, timeout=180)
    _say(f"Kafka Connect {local_connect.CONNECT_VERSION}: {process.url} (pid {process.pid})")
    _say(f"log: {layout.log}")
    return 0


def run_down(args: argparse.Namespace) -> int:
    pid = local_connect.stop(_layout(args))
    _say("stopped" if pid is not None else "no worker was running")
    return 0


def run_postgres(args: argparse.Namespace) -> int:
    layout = _layout(args)
    url = _url(args)
    secret = load_connector_settings().pg_replication_dsn
    dsn = args.dsn or (secret or load_settings().pg_dsn).get_secret_value()
    key = f"pg.{args.name}.password"
    local_connect.write_secrets(
        layout, {key: str(conninfo.conninfo_to_dict(dsn).get("password") or "")}
    )
    config = connect_configs.debezium_postgres(
        dsn=dsn, password=layout.secret(key), tables=args.table, topic_prefix=args.name,
        slot=args.name.replace("-", "_").lower(), schemas=not args.no_schemas,
    )  # fmt: skip
    local_connect.put_connector(url, args.name, config)
    local_connect.wait_running(url, args.name)
    _say(f"connector {args.name} runs; its topics: {args.name}.<schema>.<table>")
    return 0


def run_file_sink(args: argparse.Namespace) -> int:
    url = _url(args)
    local_connect.put_connector(
        url, args.name, connect_configs.file_sink(topic=args.topic, path=args.file)
    )
    local_connect.wait_running(url, args.name)
    _say(f"connector {args.name} writes {args.topic} to {args.file}")
    return 0
