"""The query service on a real socket, for the client, MCP and explorer tests.

:func:`app_in_thread` runs the app under uvicorn in a thread with its own event loop (the
pool belongs to that loop); :func:`spawn_serve` runs ``tidegraph serve`` as a process, with
the change publisher, for tests that need the topic or kill things.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import uvicorn

from tidegraph.connectors.bulk import text_document
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

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server(threading.Thread):
    def __init__(
        self, dsn: str, port: int, settings: QuerySettings, embedder: QueryEmbedder | None
    ) -> None:
        super().__init__(daemon=True)
        self.dsn, self.port, self.settings, self.embedder = dsn, port, settings, embedder
        self.ready = threading.Event()
        self.server: uvicorn.Server | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        pool = make_pool(self.dsn, min_size=1, max_size=4)
        await pool.open(wait=True)
        try:
            app = create_app(self.settings, Deps(pool=pool, embedders=embedders(self.embedder)))
            config = uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False
            )
            self.server = uvicorn.Server(config)
            self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
            serving = asyncio.create_task(self.server.serve())
            while not self.server.started:
                if serving.done():
                    await serving
                await asyncio.sleep(0.02)
            self.ready.set()
            await serving
        finally:
            await pool.close()


@contextmanager
def app_in_thread(
    dsn: str, *, embedder: QueryEmbedder | None = None, **settings: Any
) -> Iterator[str]:
    """The query app on a free loopback port (query embedder ``hashing:8`` unless given);
    yields its URL."""
    server = _Server(dsn, free_port(), QuerySettings(**settings), embedder)
    server.start()
    assert server.ready.wait(60), "server did not start"
    if server.error is not None:
        raise server.error
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        assert server.server is not None
        server.server.should_exit = True
        server.join(30)


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


CORPUS = REPO / "examples" / "corpus"


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
        """Documents of ``examples/corpus``, read as ``publish`` reads them (each file's
        front matter date is its order)."""
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
