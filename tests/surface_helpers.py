"""The query service on a real socket, for the client, MCP and explorer tests.

:func:`app_in_thread` runs the app under uvicorn in a thread with its own event loop (the
pool belongs to that loop); :func:`spawn_serve` runs ``tidegraph serve`` as a process, with
the change publisher, for tests that need the topic or kill things.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tidegraph.connectors.bulk import text_document
from tidegraph.infra.package_files import sample_corpus
from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.query_service.embedding import QueryEmbedder
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.realm_config import preset
from tidegraph.store.realms import create_realm, ensure_control

from indexer_helpers import (
    Topics,
    make_topics,
    publish,
    running_indexer,
    stored_position,
    wait_for,
)
from query_helpers import embedders
from thread_server import served

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def app_in_thread(
    dsn: str, *, embedder: QueryEmbedder | None = None, **settings: Any
) -> Iterator[str]:
    """The query app on a free loopback port (query embedder ``hashing:8`` unless given);
    yields its URL."""

    async def build(stack: AsyncExitStack) -> Any:
        pool = make_pool(dsn, min_size=1, max_size=4)
        await pool.open(wait=True)
        stack.push_async_callback(pool.close)
        return create_app(QuerySettings(**settings), Deps(pool=pool, embedders=embedders(embedder)))

    with served(build) as url:
        yield url


@contextmanager
def spawn_serve(
    pg_dsn: str,
    bootstrap: str,
    prefix: str,
    *,
    realms: tuple[str, ...] = (),
    api_keys: str | None = None,
) -> Iterator[str]:
    """``tidegraph serve`` with its publisher (only ``realms`` when given); yields its URL."""
    port = free_port()
    env = {**os.environ, "TIDEGRAPH_PG_DSN": pg_dsn, "TIDEGRAPH_KAFKA_BOOTSTRAP": bootstrap}
    env.pop("TIDEGRAPH_API_KEYS", None)
    if api_keys is not None:
        env["TIDEGRAPH_API_KEYS"] = api_keys
    args = [sys.executable, "-m", "tidegraph.infra.cli", "serve", "--port", str(port)]
    args += ["--topic-prefix", prefix, "--log-level", "warning", "--pool-size", "3"]
    for realm in realms:
        args += ["--publish-realm", realm]
    log = Path(tempfile.gettempdir()) / "tidegraph-test-logs"
    log.mkdir(exist_ok=True)
    with open(log / f"serve-{prefix}.log", "ab") as err:
        proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"serve exited; see {log}/serve-{prefix}.log"
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve did not become healthy"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


CORPUS = sample_corpus()


@dataclass
class LivePipeline:
    """A realm fed through the real topic and indexer; :meth:`publish` waits until applied."""

    realm: str
    topics: Topics
    pg_dsn: str
    group: str
    sent: int = 0

    async def publish(self, docs: list[DocumentVersion]) -> None:
        await publish(self.topics, docs)
        self.sent += len(docs)
        n = self.sent

        async def applied() -> bool:
            return await stored_position(self.pg_dsn, self.group, self.topics.documents) >= n

        await wait_for(applied, 120, f"{n} documents indexed")

    @property
    def corpus_dir(self) -> Path:
        return CORPUS

    def corpus(self, *names: str) -> list[DocumentVersion]:
        """Documents of the sample corpus ``tidegraph demo`` ships, read as ``publish``
        reads them (each file's front matter date is its order)."""
        return [text_document(CORPUS / name, name, self.realm, source="test") for name in names]


@asynccontextmanager
async def live_pipeline(
    bootstrap: str, pg_dsn: str, realm: str, prefix: str
) -> AsyncIterator[LivePipeline]:
    """A narrative-preset realm (rules extractor, hashing embedder) and a running indexer."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(conn, realm, preset("narrative", embedder="hashing:64"))
    topics = await make_topics(bootstrap, prefix)
    group = f"{prefix}-indexer"
    async with running_indexer(topics, pg_dsn, group):
        yield LivePipeline(realm, topics, pg_dsn, group)
