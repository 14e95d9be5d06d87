"""`tidegraph connect fs|http|postgres`: the long-running source connectors."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import sys
from pathlib import Path

from tidegraph.connectors.api_keys import parse_api_keys
from tidegraph.connectors.config import load_connector_settings
from tidegraph.connectors.fs import FsConnector, SyncReport, default_state_path
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.connectors.textfiles import TEXT_GLOBS
from tidegraph.infra.commands._connector_args import (
    add_kafka_options,
    prepare_topics,
    settings_from,
)
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.names import DEFAULT_SPACE, validate_realm, validate_space


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM, so a connector finishes its batch and exits."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "connect",
        help="run a source connector (files, HTTP ingest, PostgreSQL table)",
        description="Run a connector that turns upstream changes into document versions.",
    )
    kinds = parser.add_subparsers(dest="connector", metavar="SOURCE", required=True)
    _register_fs(kinds)
    _register_http(kinds)


# ------------------------------------------------------------------------------------ fs


def _register_fs(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fs = kinds.add_parser(
        "fs",
        help="a folder of text and Markdown files",
        description=(
            "Publish every matching file of DIR (doc_key = path relative to DIR), then with "
            "--watch publish changes and deletions as they happen. A state file remembers "
            "what Kafka acknowledged, so a restart does not resend unchanged files."
        ),
    )
    fs.add_argument("dir", type=Path, metavar="DIR")
    fs.add_argument("--realm", required=True)
    fs.add_argument("--space", default=DEFAULT_SPACE)
    fs.add_argument(
        "--glob",
        action="append",
        dest="globs",
        metavar="GLOB",
        help=f"files to publish, repeatable (default: {' '.join(TEXT_GLOBS)})",
    )
    fs.add_argument("--watch", action="store_true", help="keep publishing changes")
    fs.add_argument("--state", type=Path, help="state file (default: <state dir>/fs/…)")
    fs.add_argument(
        "--rescan", type=float, default=60.0, help="full rescan interval when watching (s)"
    )
    fs.add_argument("--poll", action="store_true", help="poll instead of OS notifications")
    add_kafka_options(fs)
    fs.set_defaults(func=run_fs)


def _summary(report: SyncReport) -> str:
    return (
        f"{len(report.upserts)} published, {len(report.deletes)} deleted, "
        f"{report.unchanged} unchanged, {len(report.skipped)} skipped"
    )


def run_fs(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    space = validate_space(args.space)
    root: Path = args.dir
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder")
    return asyncio.run(_fs(args, realm, space, root))


async def _fs(args: argparse.Namespace, realm: str, space: str, root: Path) -> int:
    settings, connector_settings = settings_from(args)
    await prepare_topics(args, settings, connector_settings)
    state_dir = getattr(args, "state_dir", None) or settings.state_dir
    state_path = args.state or default_state_path(state_dir, realm, root)
    producer = DocumentProducer.from_settings(
        settings, max_document_bytes=connector_settings.max_document_bytes
    )
    async with producer:
        connector = FsConnector(
            producer,
            realm,
            root,
            state_path=state_path,
            globs=args.globs or TEXT_GLOBS,
            space=space,
            on_event=_say,
        )
        report = await connector.snapshot()
        _say(f"snapshot: {_summary(report)}")
        if not args.watch:
            return 0
        _say(f"watching {root} (Ctrl-C to stop)")
        await connector.watch(
            _stop_on_signals(), rescan_interval=args.rescan, force_polling=args.poll or None
        )
    return 0


# ---------------------------------------------------------------------------------- http


def _register_http(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    http = kinds.add_parser(
        "http",
        help="an HTTP endpoint documents are PUT to",
        description=(
            "Serve PUT/DELETE /v1/ingest/{realm}/documents/{doc_key} and POST "
            "/v1/ingest/{realm}/documents:batch. Answers 202 with partition and offset only "
            "after Kafka acknowledged. Keys come from $TIDEGRAPH_API_KEYS "
            "(key1=realm_a,realm_b;key2=*); without keys it listens on loopback only."
        ),
    )
    http.add_argument("--host", default="127.0.0.1", help="address to listen on")
    http.add_argument("--port", type=int, default=8081, help="port (default 8081)")
    http.add_argument(
        "--send-timeout", type=float, help="seconds to wait for Kafka before a 503 (default 10)"
    )
    add_kafka_options(http)
    http.set_defaults(func=run_http)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_http(args: argparse.Namespace) -> int:
    import uvicorn
    from tidegraph.connectors.http_ingest import IngestService, create_app

    settings, _ = settings_from(args)
    connector_settings = load_connector_settings(
        max_document_bytes=args.max_document_bytes, send_timeout=args.send_timeout
    )
    secret = connector_settings.api_keys
    keys = parse_api_keys(secret.get_secret_value() if secret else None)
    if not keys.configured and not _loopback(args.host):
        raise ConfigError(
            f"refusing to listen on {args.host} without API keys: set TIDEGRAPH_API_KEYS "
            "or listen on a loopback address"
        )
    asyncio.run(prepare_topics(args, settings, connector_settings))
    producer = DocumentProducer.from_settings(
        settings, max_document_bytes=connector_settings.max_document_bytes
    )
    app = create_app(IngestService(producer, connector_settings), keys)
    _say(f"ingest on http://{args.host}:{args.port} → {settings.documents_topic}")
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info", lifespan="on")
    uvicorn.Server(config).run()
    return 0
