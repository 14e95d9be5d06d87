"""`tidegraph pg promote SERVER/NAME`: fail a local server over to one of its standbys."""

from __future__ import annotations

import argparse
import sys

from tidegraph.infra import local_pg, local_pg_promote, services
from tidegraph.infra.cli import add_state_dir_option
from tidegraph.infra.errors import StateDirError
from tidegraph.schemas import read_env_file


def run_promote(args: argparse.Namespace) -> int:
    state = services.state_path(args.state_dir)
    credentials = local_pg.PgCredentials.from_env(read_env_file(state))
    if credentials is None:
        raise StateDirError(f"no local PostgreSQL under {state}: nothing to promote")
    print(f"promoting standby {args.standby}", file=sys.stderr, flush=True)
    promotion = local_pg_promote.promote(state, args.standby, credentials, wait=args.timeout)
    if promotion.stopped is not None:
        print(f"stopped the old primary of {promotion.server} (pid {promotion.stopped})")
    shown = local_pg.redact(promotion.primary.dsn)
    print(f"{promotion.promoted} is the primary of server {promotion.server}: {shown}")
    for follower in promotion.followers:
        print(f"standby {follower} follows it")
    env_file = services.refresh_env_file(state)
    if env_file is not None:
        print(f"env file:  {env_file}  (rewritten: load it again, or use multi-host DSNs)")
    print(local_pg_promote.advice(promotion))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pg = sub.add_parser(
        "pg",
        help="the local PostgreSQL servers' standbys: promote one",
        description="Manage the standbys `tidegraph up --replicas N` runs.",
    )
    commands = pg.add_subparsers(dest="pg_command", required=True, metavar="COMMAND")
    promote = commands.add_parser(
        "promote",
        help="make a standby its server's primary (failover)",
        description=(
            "Promote the local standby SERVER/NAME (for example main/s1) to be its server's "
            "primary: the old primary is stopped first when it still runs, the other "
            "standbys follow the new one, and <state>/env names it. Processes given a "
            "multi-host DSN with target_session_attrs=read-write reconnect to it by "
            "themselves; others need the new DSN. In production a manager such as Patroni "
            "does this."
        ),
    )
    promote.add_argument("standby", metavar="SERVER/NAME", help="the standby, e.g. main/s1")
    promote.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for each step (60)"
    )
    add_state_dir_option(promote)
    promote.set_defaults(func=run_promote)
