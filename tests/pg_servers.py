"""More PostgreSQL servers for the tests of realms placed on several: each its own
embedded server process, started by the project's own code, that a test can stop and
start again."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from tidegraph.infra import _proc, local_pg
from tidegraph.schemas.servers import Servers
from tidegraph.store.cluster import Cluster

from local_services import REPO


@dataclass
class ExtraServer:
    layout: local_pg.PgLayout
    port: int
    process: local_pg.PgProcess

    @property
    def dsn(self) -> str:
        return self.process.dsn

    def stop(self) -> None:
        local_pg.stop(self.layout)

    def start(self) -> None:
        self.process = local_pg.launch(
            self.layout, port=self.port, credentials=self.process.credentials
        )
        local_pg.wait_ready(self.layout, self.process, timeout=60)


@contextmanager
def extra_server(name: str) -> Iterator[ExtraServer]:
    """A server of its own, stopped and removed on exit. Its folder is under the
    repository's ignored ``.tidegraph/``, not pytest's temporary folders, which another
    pytest session of the same user may clean up while this one runs."""
    root = REPO / ".tidegraph" / "servers" / f"{name}-{uuid.uuid4().hex[:8]}"
    root.mkdir(parents=True)
    try:
        with _server(root) as server:
            yield server
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _server(root: Path) -> Iterator[ExtraServer]:
    layout = local_pg.PgLayout.under(root)
    port = _proc.free_port()
    process = local_pg.launch(layout, port=port)
    local_pg.wait_ready(layout, process, timeout=60)
    local_pg.ensure_vector(process.dsn)
    server = ExtraServer(layout, port, process)
    try:
        yield server
    finally:
        server.stop()


def _small_pool(_: str, dsn: str) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
    return AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False,
                               kwargs={"autocommit": True})  # fmt: skip


@asynccontextmanager
async def opened_cluster(main: str, others: dict[str, str]) -> AsyncIterator[Cluster]:
    """A cluster over ``main`` and ``others`` with small autocommit pools, opened, and
    closed on exit."""
    cluster = Cluster(Servers.of(main, others), _small_pool)
    await cluster.open()
    try:
        yield cluster
    finally:
        await cluster.close()
