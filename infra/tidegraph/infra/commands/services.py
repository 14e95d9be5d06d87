"""`tidegraph up`, `down` and `status`: the local Kafka broker and PostgreSQL server."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys

from tidegraph.connectors import ensure_topics
from tidegraph.infra import (
    local_kafka_plan,
    local_pg,
    local_pg_servers,
    local_pg_standbys,
    services,
)
from tidegraph.infra.cli import add_state_dir_option
from tidegraph.infra.realm_status import as_json, data_status, render
from tidegraph.infra.tables import aligned
from tidegraph.schemas import kafka_security, load_settings, read_env_file


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _print_status(status: services.ServiceStatus) -> None:
    rows = [("SERVICE", "STATE", "ORIGIN", "ADDRESS", "PID", "DETAIL")]
    for s in status.services:
        state = "running" if s.running else "stopped"
        if s.started:
            state = "started"
        rows.append((s.name, state, s.origin, s.shown or "-", str(s.pid or "-"), s.detail))
        rows += [_broker_row(b) for b in s.brokers]
    for name, extra in local_pg_servers.processes(status.state_dir).items():
        address = local_pg.redact(extra.dsn)
        rows.append((f"postgres {name}", "running", "local", address, str(extra.pid), ""))
    for label, standby in local_pg_standbys.processes(status.state_dir).items():
        address = local_pg.redact(standby.dsn)
        server = label.split("/", 1)[0]
        row = (f"postgres {label}", "running", "local", address, str(standby.pid))
        rows.append((*row, f"standby of {server}"))
    for line in aligned(rows):
        print(line)
    print(f"state dir: {status.state_dir}")
    if status.env_file is not None:
        print(f"env file:  {status.env_file}  (load into a shell with: . {status.env_file})")


def _broker_row(broker: services.BrokerState) -> tuple[str, str, str, str, str, str]:
    """One node of a local cluster, under the kafka row."""
    return (
        f"  node {broker.node_id}",
        "running" if broker.running else "stopped",
        "local",
        broker.address,
        str(broker.pid or "-"),
        f"controller {broker.controller}",
    )


def _as_json(status: services.ServiceStatus) -> str:
    standbys = [
        {"name": label, "follows": label.split("/", 1)[0], "port": p.port, "pid": p.pid}
        for label, p in local_pg_standbys.processes(status.state_dir).items()
    ]
    return json.dumps(
        {
            "state_dir": str(status.state_dir),
            "env_file": str(status.env_file) if status.env_file else None,
            "services": {
                s.name: {
                    "running": s.running,
                    "origin": s.origin,
                    "address": s.shown,
                    "pid": s.pid,
                    "detail": s.detail,
                    **(
                        {"brokers": [dataclasses.asdict(b) for b in s.brokers]} if s.brokers else {}
                    ),
                    **({"standbys": standbys} if s.name == "postgres" and standbys else {}),
                }
                for s in status.services
            },
        },
        indent=2,
    )


def _selected(args: argparse.Namespace) -> tuple[str, ...]:
    only: list[str] | None = args.only
    return tuple(only) if only else services.SERVICES


def run_up(args: argparse.Namespace) -> int:
    status = services.up(
        args.state_dir,
        kafka_port=args.kafka_port,
        kafka_controller_port=args.kafka_controller_port,
        pg_port=args.pg_port,
        services=_selected(args),
        timeout=args.timeout,
        progress=_progress,
        pg_servers=args.pg_servers,
        kafka_brokers=args.brokers,
        replicas=args.replicas,
    )
    _print_status(status)
    if "kafka" in _selected(args):
        # This process read the env file before `up` wrote it: log in as it now says.
        written = read_env_file(status.state_dir)
        os.environ.update({k: v for k, v in written.items() if k in kafka_security.ENV_KEYS})
        settings = load_settings(kafka_bootstrap=status.kafka_bootstrap)
        for warning in asyncio.run(ensure_topics(status.kafka_bootstrap, settings)):
            print(f"warning: {warning}", file=sys.stderr)
        print(
            f"topics:    {settings.documents_topic}, {settings.changes_topic}, {settings.dlq_topic}"
        )
    return 0


def run_down(args: argparse.Namespace) -> int:
    stopped = services.down(args.state_dir, services=_selected(args))
    for s in stopped:
        print(f"stopped {s.name} (pid {s.pid})")
    if not stopped:
        print("nothing to stop: no service started by `tidegraph up` runs from this state dir")
    return 0


def run_status(args: argparse.Namespace) -> int:
    status = services.status(args.state_dir)
    data = None
    if status.ok:
        settings = load_settings(kafka_bootstrap=status.kafka_bootstrap, pg_dsn=status.pg_dsn)
        data = asyncio.run(
            data_status(status.pg_dsn, status.kafka_bootstrap, settings.documents_topic, args.group)
        )
    if args.json:
        body = json.loads(_as_json(status))
        if data is not None:
            body.update(as_json(data))
        print(json.dumps(body, indent=2))
    else:
        _print_status(status)
        if data is not None:
            print(render(data))
    problem = services.unavailable(status)
    if problem is not None:
        print(f"tidegraph: {problem}", file=sys.stderr)
    return 0 if status.ok else 1


def _only_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--only",
        action="append",
        choices=services.SERVICES,
        help="act on this service only (repeatable; default: both)",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = sub.add_parser(
        "up",
        help="start (or reuse) the local Kafka broker and PostgreSQL server",
        description=(
            "Start Apache Kafka (KRaft, one node, or three with --brokers 3) and PostgreSQL "
            "with pgvector under the state folder, or reuse them when they already run; write "
            "<state>/env. A service named by TIDEGRAPH_KAFKA_BOOTSTRAP or TIDEGRAPH_PG_DSN is "
            "only checked, not started."
        ),
    )
    up.add_argument("--kafka-port", type=int, help="broker port ($TIDEGRAPH_KAFKA_PORT, 9092)")
    up.add_argument(
        "--kafka-controller-port",
        type=int,
        help="KRaft controller port (Kafka port + number of brokers)",
    )
    up.add_argument(
        "--brokers",
        type=int,
        choices=local_kafka_plan.SUPPORTED,
        help="Kafka nodes: 1, or a cluster of 3 (each broker and controller; node i on Kafka "
        "port + i - 1, controller port + i - 1) ($TIDEGRAPH_KAFKA_BROKERS; default: as many "
        "as run here, else 1)",
    )
    up.add_argument("--pg-port", type=int, help="PostgreSQL port ($TIDEGRAPH_PG_PORT, 54329)")
    up.add_argument("--timeout", type=float, help="seconds to wait for each service (90)")
    up.add_argument(
        "--pg-servers",
        type=int,
        default=1,
        metavar="N",
        help="local PostgreSQL servers to run: main and pg2 … pgN on the next ports, named"
        " in the env file as TIDEGRAPH_PG_SERVERS (default 1)",
    )
    up.add_argument(
        "--replicas",
        type=int,
        default=0,
        metavar="N",
        help="streaming standbys of each local PostgreSQL server (made by pg_basebackup, "
        "named SERVER/s1 … in the env file as TIDEGRAPH_PG_STANDBYS; default 0; those made "
        "earlier always start again)",
    )
    _only_option(up)
    add_state_dir_option(up)
    up.set_defaults(func=run_up)

    down = sub.add_parser(
        "down",
        help="stop what `tidegraph up` started from this state folder",
        description="Stop the services `up` started here; external services are left alone.",
    )
    _only_option(down)
    add_state_dir_option(down)
    down.set_defaults(func=run_down)

    status = sub.add_parser(
        "status",
        help="show the services and whether they answer",
        description="Show both services; exits 1 when one of them is not running.",
    )
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument(
        "--group", default="tidegraph-indexer", help="indexer group whose lag to show"
    )
    add_state_dir_option(status)
    status.set_defaults(func=run_status)
