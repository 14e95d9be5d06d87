"""``tidegraph export R --format graphml|csv|jsonl``: a realm's graph for other tools.

GraphML (Gephi, networkx, igraph), the CSV files ``neo4j-admin database import`` reads,
or JSON lines; what is exported and how each format is written is
:mod:`tidegraph.query_service.graph_export` and
:mod:`tidegraph.query_service.export_formats`. The graph is streamed from one snapshot to
the output, so memory stays bounded; a progress line goes to stderr every few seconds.
Files are written under a ``.part`` name and renamed when complete, so an interrupted or
refused export never leaves a file that looks whole.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import IO

from tidegraph.infra.cli import ShowDefaults
from tidegraph.infra.placed import command_cluster, on_realm
from tidegraph.query_service.export_formats import (
    FORMATS,
    ExportRefused,
    FormatName,
    GraphInfo,
    format_named,
)
from tidegraph.query_service.graph_export import export_graph
from tidegraph.schemas.api import valid_as_of
from tidegraph.schemas.errors import ConfigError, ContractError
from tidegraph.schemas.names import validate_space
from tidegraph.schemas.periods import BELIEF_INSTANT_FORMS, belief_instant
from tidegraph.schemas.settings import load_settings

PROGRESS_EVERY = 2.0
"""Seconds between progress lines."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "export",
        help="write a realm's graph as GraphML, neo4j-admin CSV or JSON lines",
        formatter_class=ShowDefaults,
        description="Write the relations the relation listing returns for the filters"
        " given, the live entities of the space and every end of those relations:"
        " GraphML (Gephi, networkx, igraph), CSV for `neo4j-admin database import`"
        " (nodes.csv and relationships.csv in the --output folder) or JSON lines.",
    )
    p.add_argument("realm", metavar="REALM")
    p.add_argument("--format", choices=FORMATS, default="graphml", help="output format")
    p.add_argument("--space", default="*", help="one space, or * for every space")
    p.add_argument(
        "--as-of", metavar="DATE", help="valid time: YYYY, YYYY-MM or YYYY-MM-DD, as in reads"
    )
    p.add_argument(
        "--as-believed-at",
        metavar="INSTANT",
        help=f"belief time: {BELIEF_INSTANT_FORMS}; the graph exactly as it was believed then",
    )
    p.add_argument("--include-superseded", action="store_true", help="superseded relations too")
    p.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="file to write (default: stdout); for csv, the folder of the two files (required)",
    )
    p.add_argument(
        "--array-delimiter",
        default=";",
        metavar="CHAR",
        help="csv: between the elements of a list (give neo4j-admin the same)",
    )
    p.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    p.set_defaults(func=run)


def _request(args: argparse.Namespace) -> GraphInfo:
    """The export asked for; :class:`ConfigError` naming the option that is wrong."""
    try:
        validate_space(args.space, allow_wildcard=True)
    except ContractError as exc:
        raise ConfigError(f"--space: {exc}") from None
    try:
        valid_as_of(args.as_of)
    except ValueError as exc:
        raise ConfigError(f"--as-of: {exc}") from None
    believed = None
    if args.as_believed_at is not None:
        try:
            believed = belief_instant(args.as_believed_at)
        except ValueError as exc:
            raise ConfigError(f"--as-believed-at: {exc}") from None
    return GraphInfo(args.realm, args.space, args.as_of, believed, args.include_superseded)


async def run(args: argparse.Namespace) -> int:
    info = _request(args)
    name: FormatName = args.format
    try:
        fmt = format_named(name, args.array_delimiter)
    except ExportRefused as exc:
        raise ConfigError(f"--array-delimiter: {exc}") from None
    if fmt.files[0] != fmt.files[1] and not args.output:
        raise ConfigError("--format csv writes two files: give their folder with --output")
    dsn = load_settings(pg_dsn=args.pg_dsn).pg_dsn.get_secret_value()
    sink = _Sink(args.output, fmt.files[0] != fmt.files[1])
    started = time.monotonic()
    shown = started
    nodes = edges = 0
    try:
        async with command_cluster(dsn) as cluster, on_realm(cluster, args.realm) as (conn, meta):
            async for piece in export_graph(conn, meta, info, fmt):
                sink.write(piece.file, piece.text)
                nodes, edges = piece.nodes, piece.edges
                if time.monotonic() - shown >= PROGRESS_EVERY:
                    shown = time.monotonic()
                    _say(f"{nodes:,} entities, {edges:,} relations ({shown - started:.0f} s)")
    except BaseException:
        sink.abandon()
        raise
    where = sink.finish()
    _say(
        f"wrote {nodes:,} entities and {edges:,} relations of realm {args.realm} to {where}"
        f" in {time.monotonic() - started:.1f} s"
    )
    return 0


def _say(message: str) -> None:
    print(f"export: {message}", file=sys.stderr, flush=True)


class _Sink:
    """The files an export writes: ``.part`` files renamed when complete, or stdout."""

    def __init__(self, output: str | None, folder: bool) -> None:
        self.output = output
        self.folder = folder
        self.files: dict[str, tuple[Path, IO[str]]] = {}
        if folder and output:
            Path(output).mkdir(parents=True, exist_ok=True)

    def _target(self, name: str) -> Path:
        assert self.output is not None
        return Path(self.output) / name if self.folder else Path(self.output)

    def write(self, name: str, text: str) -> None:
        if self.output is None or self.output == "-":
            sys.stdout.write(text)
            return
        if name not in self.files:
            part = self._target(name).with_name(self._target(name).name + ".part")
            self.files[name] = (part, part.open("w", encoding="utf-8"))
        self.files[name][1].write(text)

    def abandon(self) -> None:
        for part, fh in self.files.values():
            fh.close()
            part.unlink(missing_ok=True)

    def finish(self) -> str:
        if not self.files:
            sys.stdout.flush()
            return "stdout"
        for name, (part, fh) in self.files.items():
            fh.close()
            part.replace(self._target(name))
        return str(self.output)
