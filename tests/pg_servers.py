"""More PostgreSQL servers for the tests of realms placed on several: each its own
embedded server process, started by the project's own code, that a test can stop and
start again."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tidegraph.infra import _proc, local_pg


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
def extra_server(root: Path) -> Iterator[ExtraServer]:
    """A server of its own under ``root``, stopped on exit."""
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
