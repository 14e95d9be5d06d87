"""`tidegraph pg promote SERVER/NAME`: fail a local server over to one of its standbys;
`tidegraph pg rejoin SERVER`: make the old primary a standby of the new one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tidegraph.infra import local_pg, local_pg_promote, local_pg_rejoin, services
from tidegraph.infra.cli import add_state_dir_option
from tidegraph.infra.errors import StateDirError
from tidegraph.schemas import read_env_file


def _local(args: argparse.Namespace, what: str) -> tuple[Path, local_pg.PgCredentials]:
    state = services.state_path(args.state_dir)
    credentials = local_pg.PgCredentials.from_env(read_env_file(state))
    if credentials is None:
        raise StateDirError(f"no local PostgreSQL under {state}: nothing to {what}")
    return state, credentials


def run_promote(args: argparse.Namespace) -> int:
    state, credentials = _local(args, "promote")
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


def run_rejoin(args: argparse.Namespace) -> int:
    state, credentials = _local(args, "rejoin")
    print(f"rewinding the old primary of {args.server}", file=sys.stderr, flush=True)
    done = local_pg_rejoin.rejoin(state, args.server, credentials, wait=args.timeout)
    print(f"pg_rewind: {done.rewind}")
    print(f"the old primary ({done.retired}) is standby {done.standby} of {done.server}")
    env_file = services.refresh_env_file(state)
    if env_file is not None:
        print(f"env file:  {env_file}  (rewritten: TIDEGRAPH_PG_STANDBYS names it)")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pg = sub.add_parser(
        "pg",
        help="the local PostgreSQL servers' standbys: promote one, rejoin an old primary",
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
    rejoin = commands.add_parser(
        "rejoin",
        help="make a server's old primary a standby of its new one (after promote)",
        description=(
            "Rewind the most recently retired primary of SERVER with pg_rewind (what it "
            "committed after the promotion's fork is thrown away: the indexer applied those "
            "records again from Kafka, and the change feed never showed them) and start it "
            "as a standby of the current primary. <state>/env names it."
        ),
    )
    rejoin.add_argument("server", metavar="SERVER", help="the server, e.g. main")
    rejoin.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the standby (60)"
    )
    add_state_dir_option(rejoin)
    rejoin.set_defaults(func=run_rejoin)
