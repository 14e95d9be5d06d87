"""``tidegraph realm create|show``: pin a realm's configuration before its first record."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tidegraph.infra.reach import connect_pg
from tidegraph.infra.runtime import read_realm_config
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.names import realm_schema, validate_realm
from tidegraph.schemas.realm_config import PRESET_NAMES, RealmConfig, preset
from tidegraph.schemas.settings import load_settings
from tidegraph.store.errors import RealmSchemaError
from tidegraph.store.realms import create_realm, ensure_control, open_realm, realm_exists


class RealmExistsError(ConfigError):
    """`realm create` of a realm that exists with another configuration."""

    def __init__(self, realm: str, differences: list[str]) -> None:
        super().__init__(
            f"realm {realm!r} exists with another configuration (in force → requested: "
            f"{'; '.join(differences)}) — `tidegraph realm show {realm}` prints the one in "
            "force; change a configuration with `tidegraph replay --realm "
            f"{realm} --config FILE`"
        )
        self.realm = realm
        self.differences = differences


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


def _config(args: argparse.Namespace) -> RealmConfig:
    if args.config is not None and args.preset is not None:
        raise ConfigError("give --preset or --config, not both")
    if args.config is not None:
        return read_realm_config(args.config)
    if args.preset is not None:
        return preset(args.preset)
    return RealmConfig()


async def _create(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    config = _config(args)
    dsn = load_settings(pg_dsn=args.pg_dsn).pg_dsn.get_secret_value()
    async with connect_pg(dsn) as conn:
        await ensure_control(conn)
        if await realm_exists(conn, realm_schema(realm)):
            info = await open_realm(conn, realm)
            differences = info.config.differences(config)
            if differences:
                raise RealmExistsError(realm, differences)
            print(f"realm {realm} already exists with this configuration", file=sys.stderr)
            return 0
        info = await create_realm(conn, realm, config)
    print(f"created realm {realm} ({info.extractor}, {info.embedder})")
    return 0


async def _show(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    dsn = load_settings(pg_dsn=args.pg_dsn).pg_dsn.get_secret_value()
    async with connect_pg(dsn) as conn:
        if not await realm_exists(conn, realm_schema(realm)):
            raise RealmSchemaError(f"realm {realm!r} does not exist")
        info = await open_realm(conn, realm)
    sys.stdout.write(info.config.to_json().decode() + "\n")
    return 0
