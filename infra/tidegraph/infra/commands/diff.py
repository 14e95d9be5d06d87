"""``tidegraph diff --realm A --against B``: do two realms hold the same graph?

Compares documents, entities and relations with their states by names — ids differ between
a realm and its rebuild — and the current community build by levels and members, and prints
one line per difference. ``B`` (and ``A``) may be a
realm name or the schema name of a shadow, audit copy or retired realm, so a rebuild can be
checked before it is swapped in, or an audit copy against today's realm. ``--history`` adds
the belief record (relation history intervals, chunk belief times, stamps).

Exit status like diff(1): 0 when equal, 1 when different, 2 when the comparison failed.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from psycopg import AsyncConnection

from tidegraph.indexer.replay import Difference, diff_schemas, format_difference, resolve_schema
from tidegraph.infra.placed import realm_dsn
from tidegraph.infra.reach import connect_pg
from tidegraph.schemas import TidegraphError, load_settings, validate_space

EXIT_SAME = 0
EXIT_DIFFERENT = 1
EXIT_TROUBLE = 2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "diff",
        help="compare two realms (or a realm and a shadow/audit copy) by names",
        description=(
            "Compare documents, entities and relations with their states, and the current"
            " communities by level and members. Exit 0 when the two match, 1 when they"
            " differ, 2 on error."
        ),
    )
    p.add_argument("--realm", required=True, metavar="A", help="realm or schema name")
    p.add_argument("--against", required=True, metavar="B", help="realm or schema name")
    p.add_argument("--space", help="compare one space only (default: all)")
    p.add_argument(
        "--history",
        action="store_true",
        help="also compare belief history: relation, entity and document history, chunk"
        " belief times",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=200,
        help="print at most this many differences (default 200; 0: all)",
    )
    p.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    try:
        if args.space is not None:
            validate_space(args.space)
        settings = load_settings(pg_dsn=args.pg_dsn)
        dsn = await realm_dsn(settings.pg_dsn.get_secret_value(), args.realm)
        async with connect_pg(dsn) as conn:
            a, b, differences = await compare(
                conn, args.realm, args.against, space=args.space, history=args.history
            )
    except TidegraphError as exc:
        print(f"tidegraph: {exc}", file=sys.stderr)
        return EXIT_TROUBLE
    report(differences, a, b, limit=args.limit)
    return EXIT_DIFFERENT if differences else EXIT_SAME


async def compare(
    conn: AsyncConnection[Any],
    left: str,
    right: str,
    *,
    space: str | None = None,
    history: bool = False,
) -> tuple[str, str, list[Difference]]:
    """Resolve both names and compare them in one consistent snapshot."""
    a = await resolve_schema(conn, left)
    b = await resolve_schema(conn, right)
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        differences = await diff_schemas(conn, a, b, space=space, history=history)
    return a, b, differences


def report(differences: list[Difference], a: str, b: str, *, limit: int) -> None:
    shown = differences if limit <= 0 else differences[:limit]
    for d in shown:
        print(format_difference(d, a, b))
    if len(shown) < len(differences):
        print(f"… and {len(differences) - len(shown)} more")
    if not differences:
        print(f"{a} and {b} hold the same graph", file=sys.stderr)
        return
    by_kind = Counter(d.kind for d in differences)
    parts = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in sorted(by_kind.items()))
    print(f"{len(differences)} difference(s) between {a} and {b}: {parts}", file=sys.stderr)
