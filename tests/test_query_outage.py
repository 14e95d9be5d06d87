"""Degrade fast, recover fast: the query service through real PostgreSQL outages.

The server here is the test's own (started with `up` into a private state folder), so
stopping it disturbs no other test. Two kinds of outage: the server stopped and started
again, and a TCP proxy between the pool and the server that black-holes or slows traffic.
Targets: every answer within 1 s while the database is unreachable (503 with
``Retry-After``), ``/readyz`` within 1 s in every state, and the first 200 within 2 s of
the database answering again.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx
import psycopg
import pytest

from tidegraph.infra import _proc, services
from tidegraph.query_service.db import make_pool
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import create_realm, ensure_control

from local_services import REPO
from query_helpers import api_client
from tcp_proxy import TcpProxy, tcp_proxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

FAIL_FAST = 1.0
RECOVER = 2.0
REALM = "outage"


@dataclass
class OwnServer:
    """A PostgreSQL server only this module uses."""

    state: Path
    port: int
    dsn: str

    def stop(self) -> None:
        services.down(self.state, services=[services.POSTGRES])

    def start(self) -> None:
        status = services.up(self.state, services=[services.POSTGRES], pg_port=self.port)
        self.dsn = status.pg_dsn


@pytest.fixture(scope="module")
def own_pg() -> Iterator[OwnServer]:
    state = REPO / ".tidegraph" / f"test-outage-{uuid.uuid4().hex[:8]}"
    server = OwnServer(state, _proc.free_port(), "")
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
async def realm(own_pg: OwnServer) -> str:
    async with await psycopg.AsyncConnection.connect(own_pg.dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(conn, REALM, RealmConfig(embedder="hashing:8"))
    return REALM


@pytest.fixture(autouse=True)
def _server_running(own_pg: OwnServer) -> None:
    """Each test starts with the server up, whatever the previous one left."""
    if not services.status(own_pg.state).postgres.running:
        own_pg.start()


def _via(dsn: str, port: int) -> str:
    url = urlparse(dsn)
    return url._replace(netloc=url.netloc.rsplit(":", 1)[0] + f":{port}").geturl()


@pytest.fixture
async def client(own_pg: OwnServer, realm: str) -> AsyncIterator[httpx.AsyncClient]:
    pool = make_pool(own_pg.dsn, min_size=2, max_size=8)
    await pool.open(wait=True)
    try:
        async with api_client(pool) as c:
            yield c
    finally:
        await pool.close()


@pytest.fixture
async def proxied(
    own_pg: OwnServer, realm: str
) -> AsyncIterator[tuple[httpx.AsyncClient, TcpProxy]]:
    url = urlparse(own_pg.dsn)
    async with tcp_proxy(url.hostname or "127.0.0.1", url.port or 5432) as proxy:
        pool = make_pool(_via(own_pg.dsn, proxy.port), min_size=2, max_size=8)
        await pool.open(wait=True)
        try:
            async with api_client(pool) as c:
                yield c, proxy
        finally:
            await pool.close()


async def _timed(client: httpx.AsyncClient, path: str) -> tuple[float, httpx.Response]:
    started = time.monotonic()
    response = await client.get(path)
    return time.monotonic() - started, response


async def _assert_fails_fast(client: httpx.AsyncClient, seconds: float) -> list[float]:
    """For ``seconds``: every answer is a 503 in the contract's shape within FAIL_FAST."""
    took: list[float] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for path in ("/readyz", f"/v1/realms/{REALM}/entities"):
            elapsed, response = await _timed(client, path)
            took.append(elapsed)
            if len(took) == 1:
                print(f"first answer during the outage in {elapsed:.2f}s")
            assert elapsed <= FAIL_FAST, (path, elapsed, response.text)
            assert response.status_code == 503, (path, response.text)
            assert response.headers["retry-after"].isdigit()
            assert response.json()["error"]["code"] in ("database_unavailable", "unavailable")
    return took


async def _time_to_recover(client: httpx.AsyncClient, limit: float = 10.0) -> float:
    """Seconds until both a query route and /readyz answer 200 again."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        _, ready = await _timed(client, "/readyz")
        _, entities = await _timed(client, f"/v1/realms/{REALM}/entities")
        if ready.status_code == 200 and entities.status_code == 200:
            took = time.monotonic() - started
            print(f"recovered in {took:.2f}s")
            return took
        await asyncio.sleep(0.05)
    raise AssertionError(f"no recovery within {limit}s")


async def test_server_stopped_then_started(own_pg: OwnServer, client: httpx.AsyncClient) -> None:
    assert (await client.get("/readyz")).status_code == 200
    assert (await client.get(f"/v1/realms/{REALM}/entities")).status_code == 200

    own_pg.stop()
    took = await _assert_fails_fast(client, 3.0)
    assert len(took) > 10

    own_pg.start()  # returns once the server accepts connections
    assert await _time_to_recover(client) <= RECOVER
    body = (await client.get("/readyz")).json()
    assert body["status"] == "ready"


async def test_black_hole_then_healed(proxied: tuple[httpx.AsyncClient, TcpProxy]) -> None:
    client, proxy = proxied
    assert (await client.get(f"/v1/realms/{REALM}/entities")).status_code == 200

    proxy.drop()
    await _assert_fails_fast(client, 3.0)

    proxy.heal()
    assert await _time_to_recover(client) <= RECOVER


async def test_connections_reset(proxied: tuple[httpx.AsyncClient, TcpProxy]) -> None:
    client, proxy = proxied
    assert (await client.get(f"/v1/realms/{REALM}/entities")).status_code == 200
    proxy.reset()  # every pooled connection is gone; the server itself is fine
    assert await _time_to_recover(client) <= RECOVER


async def test_latency(proxied: tuple[httpx.AsyncClient, TcpProxy]) -> None:
    client, proxy = proxied
    proxy.delay(0.02)  # slow but working: answers, no false alarm
    for _ in range(3):
        elapsed, response = await _timed(client, f"/v1/realms/{REALM}/entities")
        assert response.status_code == 200, response.text
    elapsed, response = await _timed(client, "/readyz")
    assert response.status_code == 200 and elapsed <= FAIL_FAST

    proxy.delay(3.0)  # too slow to be of use: readiness says so within its bound
    elapsed, response = await _timed(client, "/readyz")
    assert response.status_code == 503 and elapsed <= FAIL_FAST
    await _assert_fails_fast(client, 1.0)

    proxy.heal()
    assert await _time_to_recover(client) <= RECOVER


def _checks(metrics: str, result: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f'tidegraph_db_checks_total{{result="{result}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_slow_but_answering_is_not_an_outage(
    proxied: tuple[httpx.AsyncClient, TcpProxy],
) -> None:
    """Every round trip to the server takes 0.2 s: a check on a fresh connection (several
    round trips to log in) cannot answer within the probe's 0.6 s, yet requests go on being
    answered. The gate tells slow from down: no 503, the checks counted as slow."""
    client, proxy = proxied
    assert (await client.get(f"/v1/realms/{REALM}/entities")).status_code == 200
    proxy.delay(0.1)
    statuses: list[int] = []

    async def ask(until: float) -> None:
        while time.monotonic() < until:
            response = await client.get(f"/v1/realms/{REALM}/entities")
            statuses.append(response.status_code)

    until = time.monotonic() + 5.0
    await asyncio.gather(*(ask(until) for _ in range(6)))
    proxy.heal()
    metrics = (await client.get("/metrics")).text
    print(
        f"{len(statuses)} answers while slow; checks: slow {_checks(metrics, 'slow')},"
        f" answered {_checks(metrics, 'answered')}, down {_checks(metrics, 'down')}"
    )
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    assert _checks(metrics, "slow") + _checks(metrics, "answered") >= 1, "the gate checked"
    assert _checks(metrics, "down") == 0
