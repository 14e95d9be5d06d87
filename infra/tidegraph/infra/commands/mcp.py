"""``tidegraph mcp``: serve the query API's tools to agents (Model Context Protocol), over
stdio (default: an agent starts this command) or streamable HTTP."""

from __future__ import annotations

import argparse
import os

from tidegraph.schemas import ConfigError, is_loopback


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mcp",
        help="MCP server for agents over the query API",
        description="Expose query_data, entity lookup, relations with history, relation "
        "provenance and recent changes as MCP tools, through the HTTP query API.",
    )
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--url", help="query service URL (TIDEGRAPH_URL, default 127.0.0.1:8080)")
    p.add_argument(
        "--api-key", help="key for stdio calls (TIDEGRAPH_API_KEY); HTTP callers send their own"
    )
    p.add_argument("--host", default="127.0.0.1", help="HTTP transport: interface")
    p.add_argument("--port", type=int, default=8090, help="HTTP transport: port")
    p.add_argument("--path", default="/mcp", help="HTTP transport: endpoint path")
    p.set_defaults(func=run)


async def run(args: argparse.Namespace) -> int:
    from tidegraph.infra.mcp_server import build_server

    if args.transport == "stdio":
        key = args.api_key or os.environ.get("TIDEGRAPH_API_KEY")
        await build_server(args.url, key).run_stdio_async()
        return 0
    if not is_loopback(args.host) and not args.url:
        raise ConfigError("give --url of the query service when listening beyond loopback")
    server = build_server(args.url, None)
    await server.run_streamable_http_async(
        host=args.host, port=args.port, streamable_http_path=args.path
    )
    return 0
