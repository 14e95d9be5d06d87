"""``tidegraph retention`` and ``tidegraph unarchive``: retention as demotion (paper §6.1).

``retention --realm R --keep F`` scores the realm's live entities (retrieval recency and
frequency from its coverage telemetry, degree, belief-time age) and archives those outside
the best-scoring share ``F``: withheld from retrieval and community construction, kept in
the store, reported on the change feed. ``--dry-run`` prints the choice and writes nothing.
``unarchive --realm R --entity ID`` (repeatable) or ``--all`` gives them back. Nothing is
ever deleted.
"""

from __future__ import annotations

import argparse
import sys

import orjson
import psycopg

from tidegraph.indexer.retention import archive, plan_retention, unarchive
from tidegraph.infra.placed import realm_dsn
from tidegraph.schemas import ConfigError, TransientError, load_settings, validate_realm
from tidegraph.store import open_realm


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "retention",
        help="archive a realm's least valuable entities (reversible, nothing deleted)",
        description="Score live entities by retrieval recency and frequency (coverage "
        "telemetry must be on), degree and belief-time age; archive all but the best "
        "--keep share. Archived entities are withheld from retrieval and communities.",
    )
    p.add_argument("--realm", required=True)
    p.add_argument(
        "--keep", type=float, required=True, help="share of live entities to keep, in [0, 1]"
    )
    p.add_argument("--dry-run", action="store_true", help="print the choice, write nothing")
    p.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=_retention)
    u = sub.add_parser(
        "unarchive",
        help="give archived entities back to retrieval and communities",
        description="Restore archived entities: the given ids, or every one with --all.",
    )
    u.add_argument("--realm", required=True)
    which = u.add_mutually_exclusive_group(required=True)
    which.add_argument("--entity", action="append", type=int, metavar="ID")
    which.add_argument("--all", action="store_true")
    u.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    u.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    u.set_defaults(func=_unarchive)


async def _connect(pg_dsn: str | None, realm: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """A connection to the server holding ``realm``."""
    dsn = await realm_dsn(load_settings(pg_dsn=pg_dsn).pg_dsn.get_secret_value(), realm)
    try:
        return await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    except psycopg.OperationalError as exc:
        raise TransientError(f"PostgreSQL is unreachable: {exc}") from exc


async def _retention(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    if not 0.0 <= args.keep <= 1.0:
        raise ConfigError(f"--keep must be a fraction in [0, 1], not {args.keep}")
    async with await _connect(args.pg_dsn, realm) as conn:
        info = await open_realm(conn, realm)
        plan = await plan_retention(conn, info, args.keep)
        seq = None
        if not args.dry_run:
            done = await archive(conn, info, [i for i, _, _ in plan.archive])
            seq = done.seq
    if args.json:
        body = {
            "realm": realm,
            "dry_run": args.dry_run,
            "considered": plan.considered,
            "seq": seq,
            "archived": [{"id": str(i), "name": n, "score": s} for i, n, s in plan.archive],
        }
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
        return 0
    verb = "would archive" if args.dry_run else "archived"
    for i, name, score in plan.archive:
        print(f"{i}\t{score:.4f}\t{name}")
    print(f"{realm}: {verb} {len(plan.archive)} of {plan.considered} live entities", end="")
    print(f" (commit {seq})" if seq is not None else "")
    return 0


async def _unarchive(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    async with await _connect(args.pg_dsn, realm) as conn:
        info = await open_realm(conn, realm)
        done = await unarchive(conn, info, None if args.all else args.entity)
    if args.json:
        body = {"realm": realm, "seq": done.seq, "restored": [str(i) for i in done.entity_ids]}
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
        return 0
    print(
        f"{realm}: restored {len(done.entity_ids)} entities"
        + (f" (commit {done.seq})" if done.seq is not None else "")
    )
    return 0
