"""``tidegraph realm create|show|telemetry``: pin a realm's configuration before its first
record; turn its coverage telemetry on or off later."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import psycopg

from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.names import realm_schema, validate_realm
from tidegraph.schemas.realm_config import PRESET_NAMES, RealmConfig, preset
from tidegraph.schemas.settings import load_settings
from tidegraph.store.errors import RealmSchemaError
from tidegraph.store.realms import (
    create_realm,
    ensure_control,
    open_realm,
    realm_exists,
    set_coverage_telemetry,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("realm", help="create a realm or show its configuration")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create",
        help="create a realm with a preset or a configuration file",
        description="Create REALM before its first record; its embedder is fixed from then on.",
    )
    create.add_argument("realm")
    create.add_argument("--preset", choices=PRESET_NAMES)
    create.add_argument("--config", type=Path, help="JSON file (CONTRACT 'Realm configuration')")
    create.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    create.set_defaults(func=_create)
    show = actions.add_parser("show", help="print the configuration in force")
    show.add_argument("realm")
    show.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    show.set_defaults(func=_show)
    telemetry = actions.add_parser(
        "telemetry",
        help="turn coverage telemetry on or off",
        description="Record (on) or stop recording (off) what each query touches: the "
        "query text's hash, entities, communities, time (paper §6.1). Query services "
        "follow within their realm cache interval.",
    )
    telemetry.add_argument("realm")
    telemetry.add_argument("state", choices=("on", "off"))
    telemetry.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    telemetry.set_defaults(func=_telemetry)


def _config(args: argparse.Namespace) -> RealmConfig:
    if args.config is not None and args.preset is not None:
        raise ConfigError("give --preset or --config, not both")
    if args.config is not None:
        return RealmConfig.from_json(args.config.read_bytes())
    if args.preset is not None:
        return preset(args.preset)
    return RealmConfig()


async def _create(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    config = _config(args)
    dsn = load_settings(pg_dsn=args.pg_dsn).pg_dsn.get_secret_value()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await ensure_control(conn)
        if await realm_exists(conn, realm_schema(realm)):
            info = await open_realm(conn, realm)
            if info.embedder != config.embedder:
                raise ConfigError(
                    f"realm {realm!r} exists with embedder {info.embedder!r}; "
                    "an embedder is fixed for a realm's lifetime (replay into a new one)"
                )
            print(f"realm {realm} already exists", file=sys.stderr)
            return 1
        info = await create_realm(conn, realm, config)
    print(f"created realm {realm} ({info.extractor}, {info.embedder})")
    return 0


async def _show(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    dsn = load_settings(pg_dsn=args.pg_dsn).pg_dsn.get_secret_value()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        if not await realm_exists(conn, realm_schema(realm)):
            raise RealmSchemaError(f"realm {realm!r} does not exist")
        info = await open_realm(conn, realm)
    sys.stdout.write(info.config.to_json().decode() + "\n")
    return 0


async def _telemetry(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    dsn = load_settings(pg_dsn=args.pg_dsn).pg_dsn.get_secret_value()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        if not await realm_exists(conn, realm_schema(realm)):
            raise RealmSchemaError(f"realm {realm!r} does not exist")
        info = await set_coverage_telemetry(conn, realm, args.state == "on")
    print(f"realm {realm}: coverage telemetry {'on' if info.config.coverage_telemetry else 'off'}")
    return 0
