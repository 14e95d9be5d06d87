"""``tidegraph replay --realm R``: rebuild a realm from the documents topic and swap it in.

The rebuild reads the realm's partition from the beginning into a shadow schema, through
the same pipeline and writer as the indexer, while the live realm keeps serving; then it
swaps the shadow in, holding the live realm only for that transaction (see
``tidegraph.indexer.replay.rebuild``). Extraction reads the shadow's cache and then the live
realm's, so rebuilding an unchanged configuration calls no model for extraction.

``--no-swap`` keeps the shadow under its name for inspection (compare it with
``tidegraph diff``); ``--until TIME`` builds an audit copy as the log stood at TIME.
Progress (records read, realm records applied, ETA) goes to stderr; the summary to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.extraction import Pipeline, PipelineConfig
from tidegraph.indexer.replay import (
    ReplayOptions,
    ReplayProgress,
    ReplayResult,
    drop_copy,
    replay_realm,
)
from tidegraph.infra.composition import ModelRegistry
from tidegraph.infra.local_kafka import brokers_answering
from tidegraph.infra.placed import realm_dsn
from tidegraph.infra.reach import check_pg, connect_pg, kafka_unreachable
from tidegraph.infra.runtime import (
    add_concurrency_option,
    default_realm_config,
    documents_prepared_at_once,
    llm_client_if_configured,
    read_realm_config,
)
from tidegraph.schemas import (
    ConfigError,
    RealmConfig,
    Settings,
    load_settings,
    realm_schema,
    validate_realm,
)
from tidegraph.store import realm_exists


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "replay",
        help="rebuild a realm from the documents topic, then swap it in",
        description=(
            "Rebuild REALM from the documents topic into a shadow schema while the live realm "
            "keeps serving, then swap it in (the live realm is held only for the swap). "
            "The old schema is kept as realm_<R>__retired_<n>."
        ),
    )
    p.add_argument("--realm", required=True, help="realm to rebuild")
    p.add_argument(
        "--no-swap",
        action="store_true",
        help="keep the caught-up shadow under its name instead of swapping it in",
    )
    p.add_argument(
        "--shadow-name",
        metavar="NAME",
        help="label of the shadow (schema realm_<R>__shadow_<NAME>); default: next free number",
    )
    p.add_argument(
        "--until",
        metavar="ISO-TIME",
        help="build an audit copy (realm_<R>__audit_<NAME>) of the records logged "
        "at or before this instant; never swapped in",
    )
    p.add_argument(
        "--extractor",
        choices=("rules", "llm"),
        help="extractor of the rebuild (default: the realm's)",
    )
    p.add_argument(
        "--embedder",
        metavar="ID",
        help="embedder of the rebuild: hashing:<dim>, llm:<model>:<dim>, or "
        "hashing / llm (dimension from TIDEGRAPH_EMBED_DIMENSION)",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        type=Path,
        help="realm configuration JSON for the rebuild (vocabulary, aliases, groups)",
    )
    p.add_argument(
        "--drop",
        metavar="SCHEMA",
        help="drop a shadow, audit copy or retired schema of the realm (and its "
        "replay claim) instead of replaying",
    )
    add_concurrency_option(p)
    p.add_argument(
        "--fetch-records", type=int, default=500, help="records per fetch and per write transaction"
    )
    p.add_argument(
        "--lock-timeout",
        type=float,
        default=5.0,
        help="longest wait for a lock during the swap, seconds",
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEGRAPH_KAFKA_BOOTSTRAP)")
    p.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    p.add_argument("--topic-prefix", help="topic prefix (TIDEGRAPH_TOPIC_PREFIX)")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> Any:
    validate_realm(args.realm)
    settings = load_settings(
        kafka_bootstrap=args.bootstrap, pg_dsn=args.pg_dsn, topic_prefix=args.topic_prefix
    )
    if args.drop:
        return _drop(args.realm, args.drop, settings)
    options = build_options(args, settings)
    return _main(args, settings, options)


async def _drop(realm: str, schema: str, settings: Settings) -> int:
    async with connect_pg(await realm_dsn(settings.pg_dsn.get_secret_value(), realm)) as conn:
        await drop_copy(conn, realm, schema)
    print(f"dropped {schema}")
    return 0


def parse_until(text: str) -> datetime:
    """An ISO 8601 instant with a UTC offset (a naive time is ambiguous in belief time)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--until {text!r}: not an ISO 8601 date-time — give one such as 2026-12-02T10:00:00Z"
        ) from None
    if value.tzinfo is None:
        raise ConfigError(f"--until {text!r}: no UTC offset — add one (e.g. 2026-12-02T10:00:00Z)")
    return value


def build_options(args: argparse.Namespace, settings: Settings) -> ReplayOptions:
    config: RealmConfig | None = None
    if args.config is not None:
        config = read_realm_config(args.config)
    embedder = None
    if args.embedder is not None:
        embedder = default_realm_config(embedder=args.embedder).embedder
    until = parse_until(args.until) if args.until else None
    if until is not None and args.no_swap is False:
        args.no_swap = True  # an audit copy is never swapped in
    return ReplayOptions(
        realm=args.realm,
        bootstrap=settings.kafka_bootstrap,
        pg_dsn=settings.pg_dsn.get_secret_value(),
        topic=settings.documents_topic,
        swap=not args.no_swap,
        label=args.shadow_name,
        until=until,
        config=config,
        extractor=args.extractor,
        embedder=embedder,
        default_config=default_realm_config(),
        fetch_records=args.fetch_records,
        prepare_concurrency=documents_prepared_at_once(args.concurrency),
        lock_timeout=args.lock_timeout,
    )


async def _main(args: argparse.Namespace, settings: Settings, options: ReplayOptions) -> int:
    dsn = settings.pg_dsn.get_secret_value()
    await check_pg(dsn)
    dsn = await realm_dsn(dsn, options.realm)  # a replay runs where the realm lives
    options = replace(options, pg_dsn=dsn)
    if not await asyncio.to_thread(brokers_answering, settings.kafka_bootstrap, timeout=5.0):
        raise kafka_unreachable(settings.kafka_bootstrap, "no metadata answer")
    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=max(2, min(options.prepare_concurrency, 8)),
        open=False,
        kwargs={"autocommit": True},
    )
    await pool.open(wait=True, timeout=30)
    try:
        live = realm_schema(options.realm)
        async with pool.connection() as conn:
            has_live_cache = await realm_exists(conn, live)
        llm = llm_client_if_configured()
        registry = ModelRegistry(
            pool=pool,
            llm=llm,
            read_through=(live,) if has_live_cache else (),
        )
        pipeline = Pipeline(registry.extractor_for, registry.embedder_for, PipelineConfig())
        display = ProgressLine(options.realm, enabled=not args.no_progress)
        result = await replay_realm(
            options,
            pipeline.prepare,
            registry.embedder_for,
            on_progress=display.update,
            judge_for=registry.judge_for,
        )
        display.finish()
        if llm is not None:
            await llm.aclose()
    finally:
        await pool.close()
    if args.json:
        print(json.dumps(summary_json(result)))
    else:
        print(summary_text(result))
    return 0


class ProgressLine:
    """``replay R [phase] read/total records · realm records · applied · rate · ETA``."""

    def __init__(self, realm: str, *, stream: TextIO | None = None, enabled: bool = True):
        self.realm = realm
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0
        self._phase = ""
        self._latest: ReplayProgress | None = None

    def update(self, p: ReplayProgress) -> None:
        self._latest = p
        if not self.enabled:
            return
        now = time.monotonic()
        if p.phase == self._phase and now - self._last < (0.1 if self._tty else 5.0):
            return
        self._phase = p.phase
        self._last = now
        self._write(self.line(p), final=False)

    def finish(self) -> None:
        if self.enabled and self._latest is not None:
            self._write(self.line(self._latest), final=True)

    def line(self, p: ReplayProgress) -> str:
        rate = p.read / p.elapsed if p.elapsed > 0 else 0.0
        remaining = max(p.total - p.read, 0)
        eta = _clock(remaining / rate) if rate > 0 and remaining else "-"
        pct = f" {100 * p.read / p.total:3.0f}%" if p.total else ""
        return (
            f"replay {self.realm} [{p.phase}]{pct} {p.read:,}/{p.total:,} records read · "
            f"{p.realm_records:,} of the realm · {p.written:,} applied · "
            f"{rate:,.0f} records/s · ETA {eta}"
        )

    def _write(self, text: str, *, final: bool) -> None:
        if self._tty:
            self.stream.write("\r\x1b[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def summary_json(r: ReplayResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "realm": r.realm,
        "schema": r.schema,
        "built_in": r.built_in,
        "swapped": r.swapped,
        "retired": r.retired,
        "config_changed": r.config_changed,
        "partition": r.partition,
        "position": r.position,
        "records_read": r.records_read,
        "realm_records": r.realm_records,
        "written": r.written,
        "load_seconds": round(r.load_seconds, 3),
        "load_records": r.load_records,
        "load_written": r.load_written,
        "index_seconds": round(r.index_seconds, 3),
        "total_seconds": round(r.total_seconds, 3),
        "follow_seconds": round(r.follow_seconds, 3),
        "baseline_seconds": round(r.baseline_seconds, 3),
    }
    if r.swap is not None:
        body["swap"] = {
            "hold_ms": round(r.swap.hold_seconds * 1000, 1),
            "catch_up_records": r.swap.catch_up_records,
            "catch_up_ms": round(r.swap.catch_up_seconds * 1000, 1),
            "diff_ms": round(r.swap.diff_seconds * 1000, 1),
            "rebuild_seq": r.swap.rebuild_seq,
            "changes": r.swap.changes,
            "committed_at": r.swap.committed_at.isoformat(),
            "archived_carried": r.swap.archived_carried,
            "retrievals_carried": r.swap.retrievals_carried,
            "communities_carried": r.swap.communities_carried,
        }
    return body


def summary_text(r: ReplayResult) -> str:
    if r.swapped:
        kept = f"; the old schema is kept as {r.retired}" if r.retired else ""
        head = f"realm {r.realm} rebuilt in {r.built_in} and swapped in as {r.schema}{kept}"
    else:
        head = f"realm {r.realm} rebuilt into {r.schema} (not swapped in)"
    rate = r.load_records / r.load_seconds if r.load_seconds > 0 else 0.0
    lines = [
        head,
        f"  {r.records_read:,} records read on partition {r.partition} up to offset "
        f"{r.position}, {r.realm_records:,} of the realm, {r.written:,} applied",
        f"  load {r.load_seconds:.1f}s ({rate:,.0f} records/s), vector indexes "
        f"{r.index_seconds:.1f}s, total {r.total_seconds:.1f}s",
    ]
    if r.swap is not None:
        lines.append(
            f"  swap held the live realm {r.swap.hold_seconds * 1000:.0f} ms "
            f"({r.swap.catch_up_records} records applied under the lock); change feed "
            f"seq {r.swap.rebuild_seq} carries the rebuild notice and "
            f"{r.swap.changes - 1} change(s)"
        )
    if r.swapped and r.config_changed:
        lines.append(
            "  the configuration changed: restart running indexers and query services so "
            "they load the new extractor, embedder and vocabulary"
        )
    return "\n".join(lines)
