"""``tidegraph communities --realm R``: rebuild a realm's community reports (paper §6).

Snapshots the current entity graph of each space, partitions it (Leiden with a fixed seed;
label propagation only where leidenalg cannot be imported), writes a report per community
— with the model endpoint when one is configured, extractive otherwise — and replaces the
spaces' previous communities in one transaction that appends ``communities_built`` to the
change feed. Progress goes to stderr, one summary line per space to stdout (``--json`` for
a machine-readable result).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import orjson
import psycopg

from tidegraph.indexer.communities import BuildResult, ClusterParams, build_communities
from tidegraph.infra.placed import realm_dsn
from tidegraph.schemas import TransientError, load_settings, validate_realm, validate_space
from tidegraph.store import open_realm


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "communities",
        help="rebuild a realm's community reports",
        description="Detect communities of the current entity graph and replace the "
        "stored community reports (every space by default).",
    )
    p.add_argument("--realm", required=True, help="realm to build")
    p.add_argument(
        "--space",
        action="append",
        metavar="S",
        help="space to build (repeatable; default: every space of the realm)",
    )
    p.add_argument(
        "--resolution", type=float, default=1.0, help="Leiden resolution γ (default 1.0)"
    )
    p.add_argument(
        "--min-size", type=int, default=3, help="drop communities smaller than this (default 3)"
    )
    p.add_argument("--levels", type=int, default=1, help="hierarchy levels (default 1: flat)")
    p.add_argument("--seed", type=int, default=None, help="clustering seed (default fixed)")
    p.add_argument(
        "--denial-factor",
        type=float,
        default=0.25,
        help="weight scale of a denied relation, below 1 (default 0.25)",
    )
    p.add_argument(
        "--algorithm",
        choices=("auto", "leiden", "label_propagation"),
        default="auto",
        help="auto = Leiden, label propagation only if leidenalg cannot be imported",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="extractive reports even when a model endpoint is configured",
    )
    p.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    spaces = [validate_space(s) for s in args.space] if args.space else None
    extra: dict[str, Any] = {} if args.seed is None else {"seed": args.seed}
    params = ClusterParams(
        resolution=args.resolution,
        min_size=args.min_size,
        levels=args.levels,
        denial_factor=args.denial_factor,
        method=args.algorithm,
        **extra,
    )
    settings = load_settings(pg_dsn=args.pg_dsn)
    started = time.monotonic()

    def progress(message: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {message}", file=sys.stderr, flush=True)

    # The model client is imported only when the command runs: `--help` stays instant.
    from tidegraph.indexer.communities.reports import model_reporter
    from tidegraph.infra.composition import ModelRegistry
    from tidegraph.infra.runtime import llm_client_if_configured

    llm = llm_client_if_configured()
    try:
        try:
            dsn = await realm_dsn(settings.pg_dsn.get_secret_value(), realm)
            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            raise TransientError(f"PostgreSQL is unreachable: {exc}") from exc
        async with conn:
            info = await open_realm(conn, realm)
            embedder = ModelRegistry(llm=llm).embedder_for(info)
            reporter = None
            if llm is not None and not args.offline:
                reporter = model_reporter(llm, realm)
                progress(f"reports by model {llm.settings.model} at {llm.endpoint}")
            else:
                progress("extractive offline reports")
            result = await build_communities(
                conn,
                info,
                embedder,
                params=params,
                spaces=spaces,
                reporter=reporter,
                progress=progress,
            )
    finally:
        if llm is not None:
            await llm.aclose()
    assert result is not None  # wait=True never skips
    _print(result, args.json)
    return 0


def _print(result: BuildResult, as_json: bool) -> None:
    if as_json:
        body = {
            "realm": result.realm,
            "seq": result.seq,
            "built_at": result.built_at.isoformat(),
            "graph_moved": result.graph_moved,
            "timings": dict(result.timings),
            "spaces": [
                {
                    "space": b.space,
                    "entities": b.entities,
                    "relations": b.relations,
                    "method": b.method,
                    "clusters_per_level": list(b.clusters),
                    "written": b.written,
                    "failed": b.failed,
                    "largest_share": b.largest_share,
                }
                for b in result.spaces
            ],
        }
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
        return
    for b in result.spaces:
        print(
            f"{result.realm}/{b.space}: {b.written} communities written"
            + (f" ({b.failed} failed)" if b.failed else "")
            + f", per level {list(b.clusters)}, {b.method}, largest holds "
            f"{b.largest_share:.1%} of {b.entities} entities"
        )
    if result.graph_moved:
        print("the graph changed during the build: communities are already marked stale")
