"""`tidegraph connect fs|http|postgres|debezium`: the long-running source connectors."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from tidegraph.connectors import (
    TEXT_GLOBS,
    CaptureSpec,
    DocumentProducer,
    FsConnector,
    PostgresCdc,
    SyncReport,
    default_state_path,
    load_connector_settings,
    load_row_mapping,
    pgoutput,
)
from tidegraph.infra import services as local_services
from tidegraph.infra._proc import ensure_port_free
from tidegraph.infra.commands._connector_args import (
    add_kafka_options,
    add_order_option,
    prepare_topics,
    settings_from,
)
from tidegraph.infra.commands._debezium import register_debezium
from tidegraph.infra.logs import set_service_level
from tidegraph.schemas import (
    DEFAULT_SPACE,
    ApiKeys,
    ConfigError,
    require_loopback,
    validate_realm,
    validate_space,
)


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
        help="run a source connector (files, HTTP ingest, PostgreSQL table, Debezium topics)",
        description="Run a connector that turns upstream changes into document versions.",
    )
    kinds = parser.add_subparsers(dest="connector", metavar="SOURCE", required=True)
    _register_fs(kinds)
    _register_http(kinds)
    _register_postgres(kinds)
    register_debezium(kinds)


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
    add_order_option(fs)
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
    state_dir = local_services.state_path(getattr(args, "state_dir", None), settings)
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
            order_from=args.order_key_from,
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
    _say("stopped")
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


def run_http(args: argparse.Namespace) -> int:
    import uvicorn

    from tidegraph.connectors.http_ingest import IngestService, create_app
    from tidegraph.infra.http_server import BoundedConfig, HttpLimits

    settings, _ = settings_from(args)
    connector_settings = load_connector_settings(
        max_document_bytes=args.max_document_bytes, send_timeout=args.send_timeout
    )
    secret = connector_settings.api_keys
    keys = ApiKeys.parse(secret.get_secret_value() if secret else None)
    require_loopback(args.host, keys)
    ensure_port_free("the ingest service", args.port, args.host, option="--port")
    asyncio.run(prepare_topics(args, settings, connector_settings))
    producer = DocumentProducer.from_settings(
        settings, max_document_bytes=connector_settings.max_document_bytes
    )
    app = create_app(IngestService(producer, connector_settings), keys)
    _say(f"ingest on http://{args.host}:{args.port} → {settings.documents_topic}")
    set_service_level("INFO")
    config = BoundedConfig(
        app,
        limits=HttpLimits(),
        host=args.host,
        port=args.port,
        log_level="info",
        log_config=None,
        lifespan="on",
    )
    uvicorn.Server(config).run()
    return 0


# ------------------------------------------------------------------------------ postgres


def _register_postgres(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pg = kinds.add_parser(
        "postgres",
        help="a PostgreSQL table, through logical decoding",
        description=(
            "Capture a table's rows as document versions: a publication and a pgoutput "
            "replication slot, an initial load consistent with the slot, then inserts, "
            "updates and deletes as they commit. The slot advances only after Kafka "
            "acknowledged, so a crash loses nothing. --drop-slot removes slot and publication."
        ),
    )
    pg.add_argument(
        "--dsn",
        help="PostgreSQL connection string of a role with REPLICATION that owns the table "
        "(default: $TIDEGRAPH_PG_REPLICATION_DSN, then $TIDEGRAPH_PG_DSN)",
    )
    pg.add_argument("--table", required=True, help="table, optionally schema-qualified")
    pg.add_argument(
        "--key-column",
        help="column whose value is the doc_key (with --facts: the mapping's key)",
    )
    pg.add_argument("--content-column", help="column holding the text (unless --facts)")
    pg.add_argument(
        "--facts",
        type=Path,
        metavar="MAPPING",
        help="publish each row as facts (entities, relations with validity) per this YAML or "
        "JSON mapping file instead of a text column; doc_key = <table>/<key> (README, "
        "'Facts supplied on the record')",
    )
    pg.add_argument("--title-column", help="column holding the title")
    pg.add_argument("--order-column", help="column whose value is the order_key")
    pg.add_argument("--realm", required=True)
    pg.add_argument("--space", default=DEFAULT_SPACE)
    pg.add_argument("--slot", help="slot and publication name (default: tidegraph_<realm>_<table>)")
    pg.add_argument("--drop-slot", action="store_true", help="drop slot and publication, then exit")
    pg.add_argument(
        "--max-in-flight",
        type=int,
        default=20_000,
        help="documents awaiting Kafka's acknowledgement before reading pauses",
    )
    add_kafka_options(pg)
    pg.set_defaults(func=run_postgres)


async def _cdc_progress(cdc: PostgresCdc, stop: asyncio.Event, every: float = 5.0) -> None:
    """A progress line every few seconds while changes flow."""
    last = -1
    started = asyncio.get_running_loop().time()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
        stats = cdc.stats
        if stats.published != last:
            last = stats.published
            rate = stats.published / max(asyncio.get_running_loop().time() - started, 1e-9)
            _say(
                f"{stats.snapshot_rows} rows loaded, {stats.changes} changes, "
                f"{stats.published} published ({rate:,.0f}/s), {stats.refused} refused, "
                f"confirmed {pgoutput.int_to_lsn(stats.confirmed_lsn)}"
            )


def run_postgres(args: argparse.Namespace) -> int:
    return asyncio.run(_postgres(args, capture_spec(args)))


def capture_spec(args: argparse.Namespace) -> CaptureSpec:
    """The capture the flags describe: a text column, or facts per a mapping file."""
    facts = load_row_mapping(args.facts) if args.facts is not None else None
    if facts is None and (args.content_column is None or args.key_column is None):
        raise ConfigError("connect postgres needs --key-column and --content-column, or --facts")
    if facts is not None and args.content_column is not None:
        raise ConfigError("give --content-column or --facts, not both")
    key = args.key_column or (facts.facts_table(args.table).key if facts is not None else None)
    assert key is not None
    return CaptureSpec(
        table=args.table,
        key_column=key,
        content_column=args.content_column,
        facts=facts,
        title_column=args.title_column,
        order_column=args.order_column,
        realm=validate_realm(args.realm),
        space=validate_space(args.space),
        slot=args.slot,
    )


async def _postgres(args: argparse.Namespace, spec: CaptureSpec) -> int:
    settings, connector_settings = settings_from(args)
    replication = connector_settings.pg_replication_dsn
    dsn = args.dsn or (replication or settings.pg_dsn).get_secret_value()
    producer = DocumentProducer.from_settings(
        settings, max_document_bytes=connector_settings.max_document_bytes
    )
    cdc = PostgresCdc(
        dsn, spec, producer, max_in_flight=args.max_in_flight, on_event=_say,
    )  # fmt: skip
    if args.drop_slot:
        dropped = await cdc.drop()
        _say("dropped " + (", ".join(dropped) if dropped else "nothing (no slot or publication)"))
        return 0
    await prepare_topics(args, settings, connector_settings)
    stop = _stop_on_signals()
    progress = asyncio.create_task(_cdc_progress(cdc, stop))
    try:
        async with producer:
            await cdc.run(stop)
    finally:
        stop.set()
        await progress
    stats = cdc.stats
    _say(
        f"stopped: {stats.snapshot_rows} rows loaded, {stats.changes} changes, "
        f"{stats.published} published, {stats.refused} refused"
    )
    return 0
