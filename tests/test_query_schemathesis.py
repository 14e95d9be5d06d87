"""Property-based run of every operation in /openapi.json: no input yields a 5xx.

The app runs under a real uvicorn on a free loopback port, in a thread with its own event
loop (the pool belongs to that loop), over a small realm written through the writer, with
a scripted chat model so ``/query`` answers too.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.schemas.realm_config import RealmConfig

from fix_pg import database_of_its_own
from graph_helpers import GraphHarness, ent, rel
from query_helpers import embedders, write_doc

pytestmark = pytest.mark.postgres

REALM = "sx" + uuid.uuid4().hex[:10]


class _Chat:
    async def __call__(self, system: str, prompt: str) -> str:
        return "scripted answer [1]"


async def _build_realm(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, REALM, RealmConfig(embedder="hashing:8"))
        await write_doc(
            g,
            "a.md",
            [
                (
                    "Ada Lovelace worked with Charles Babbage from 1833.",
                    [ent("Ada Lovelace"), ent("Charles Babbage")],
                    [rel("Ada Lovelace", "worked_with", "Charles Babbage", vf="1833")],
                ),
            ],
        )
        await write_doc(
            g,
            "b.md",
            [
                (
                    "Babbage never met Mordred.",
                    [ent("Charles Babbage"), ent("Mordred")],
                    [rel("Charles Babbage", "met", "Mordred", negated=True)],
                ),
            ],
            space="other",
        )


class _Server(threading.Thread):
    def __init__(self, dsn: str, port: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.port = port
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
        await _build_realm(self.dsn)
        pool = make_pool(self.dsn, min_size=1, max_size=4)
        await pool.open(wait=True)
        try:
            app = create_app(
                QuerySettings(api_keys=None), Deps(pool=pool, embedders=embedders(), chat=_Chat())
            )
            config = uvicorn.Config(
                app,
                host="127.0.0.1",
                port=self.port,
                lifespan="off",
                log_level="warning",
                access_log=False,
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


@pytest.fixture(scope="module")
def own_dsn(pg_dsn: str) -> Iterator[str]:
    """A database holding only this module's realm, so that /readyz answers for it alone."""
    with database_of_its_own(pg_dsn, "sx" + uuid.uuid4().hex[:10]) as dsn:
        yield dsn


@pytest.fixture(scope="module")
def base_url(own_dsn: str) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = _Server(own_dsn, port)
    server.start()
    assert server.ready.wait(60), "server did not start"
    if server.error is not None:
        raise server.error
    yield f"http://127.0.0.1:{port}"
    assert server.server is not None
    server.server.should_exit = True
    server.join(30)


@pytest.fixture(scope="module")
def api_schema(base_url: str) -> Any:
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_no_input_makes_a_server_error(case: Any, base_url: str) -> None:
    if "realm" in (case.path_parameters or {}):
        case.path_parameters["realm"] = REALM
    case.call_and_validate(
        base_url=base_url,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
