"""The automatic community builder: a realm's communities rebuilt once its graph is quiet.

A background task of the query service (replicas may all run it: a realm being built
elsewhere is skipped).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, LiteralString

import psycopg
from psycopg import AsyncConnection, sql

from tidegraph.indexer.communities.detect import ClusterParams
from tidegraph.indexer.communities.reports import model_reporter
from tidegraph.indexer.communities.store import build_communities
from tidegraph.indexer.extraction import Embedder
from tidegraph.indexer.models import HashingEmbedder
from tidegraph.schemas import MAIN, ConfigError, TidegraphError, parse_embedder
from tidegraph.store import Cluster, RealmInfo, open_realm, placements

if TYPE_CHECKING:  # the model client (openai) is imported only by who calls it
    from tidegraph.indexer.models.client import LLMClient

__all__ = ["auto_build_loop"]

log = logging.getLogger("tidegraph.indexer.communities.store")


def _q(template: LiteralString, schema: str, table: str) -> sql.Composed:
    """``template`` naming the realm's ``table`` as ``{t}``."""
    return sql.SQL(template).format(t=sql.Identifier(schema, table))


def _hashing_only(info: RealmInfo) -> Embedder:
    spec = parse_embedder(info.embedder)
    if spec.kind != "hashing":
        raise ConfigError(f"realm {info.realm!r} is pinned to {info.embedder!r}: pass embedder_for")
    return HashingEmbedder(spec.dimension)


async def auto_build_loop(
    cluster: Cluster,
    quiet_seconds: float,
    *,
    embedder_for: Callable[[RealmInfo], Embedder] | None = None,
    llm: LLMClient | None = None,
    params: ClusterParams | None = None,
    poll_seconds: float | None = None,
    realms: Sequence[str] | None = None,
) -> None:
    """Rebuild a realm's communities once its graph has been quiet for ``quiet_seconds``.

    Runs until cancelled; meant as a background task of the query service. A realm is due
    when its feed said ``communities_stale`` since the last build, or it was never built
    and has been written to; it is quiet when no document was applied for
    ``quiet_seconds`` (database clock). Every space of a due realm is rebuilt in one
    build. Replicas may all run it: a realm being built elsewhere is skipped. A build that
    fails is logged and not retried until the realm is written again. ``embedder_for``
    gives a realm's pinned embedder (the composition root's ``ModelRegistry.embedder_for``);
    without it only ``hashing:*`` realms can be built. ``realms`` limits it to those.
    Each realm is built on its own server; a server that does not answer is skipped.
    """
    poll = poll_seconds if poll_seconds is not None else max(1.0, min(quiet_seconds / 4, 30.0))
    embedder_of = embedder_for or _hashing_only
    failed_at: dict[str, int] = {}
    while True:
        try:
            async with cluster.connection(MAIN) as main:
                placed = await placements(main)
            for p in placed:
                if realms is not None and p.realm not in realms:
                    continue
                async with cluster.connection(p.server) as conn:
                    await _maybe_build(
                        conn,
                        p.realm,
                        p.schema,
                        quiet_seconds,
                        embedder_of,
                        llm,
                        params,
                        failed_at,
                        p.server,
                    )
        except (psycopg.Error, TidegraphError) as exc:
            log.warning("automatic community builds: %s", exc)
        await asyncio.sleep(poll)


async def _maybe_build(
    conn: AsyncConnection[Any],
    realm: str,
    schema: str,
    quiet_seconds: float,
    embedder_of: Callable[[RealmInfo], Embedder],
    llm: LLMClient | None,
    params: ClusterParams | None,
    failed_at: dict[str, int],
    server: str,
) -> None:
    cur = await conn.execute(
        _q(
            "SELECT seq, communities_stale OR (communities_built_at IS NULL AND seq > 0),"
            " swapped_out FROM {t}",
            schema,
            "meta",
        )
    )
    row = await cur.fetchone()
    if row is None or not row[1] or row[2] or failed_at.get(realm) == int(row[0]):
        return
    cur = await conn.execute(
        _q("SELECT extract(epoch FROM now() - max(applied_at)) FROM {t}", schema, "documents")
    )
    idle = await cur.fetchone()
    if idle is not None and idle[0] is not None and float(idle[0]) < quiet_seconds:
        return
    try:
        info = await open_realm(conn, realm, schema=schema, server=server)
        reporter = model_reporter(llm, realm) if llm is not None else None
        result = await build_communities(
            conn, info, embedder_of(info), params=params, reporter=reporter, wait=False
        )
    except (psycopg.Error, TidegraphError) as exc:
        if not getattr(exc, "retriable", False):
            failed_at[realm] = int(row[0])  # retried once the realm is written again
        log.warning("realm %s: automatic community build failed: %s", realm, exc)
        return
    if result is not None:
        failed_at.pop(realm, None)
        log.info(
            "realm %s: communities rebuilt at seq %d (%s)",
            realm,
            result.seq,
            ", ".join(f"{b.space}: {b.written}" for b in result.spaces),
        )
