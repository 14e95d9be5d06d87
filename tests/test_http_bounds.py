"""Both HTTP services bound how long and how much they read (tidegraph.infra.http_server).

The services run as the real commands (`serve`, `connect http`) against the test broker and
server, with short bounds from the environment; the clients are raw sockets, so a request
can stop half-way the way a slow or hostile client does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from tidegraph.infra import _proc

from connector_helpers import fresh_settings

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

HEADER_TIMEOUT = 1.0
BODY_IDLE_TIMEOUT = 1.0
BODY_TIMEOUT = 3.0
SLACK = 1.5
"""Allowance for scheduling on a busy machine on top of a bound."""
BOUNDS = {
    "TIDEGRAPH_HTTP_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
    "TIDEGRAPH_HTTP_BODY_IDLE_TIMEOUT": str(BODY_IDLE_TIMEOUT),
    "TIDEGRAPH_HTTP_BODY_TIMEOUT": str(BODY_TIMEOUT),
}
BODY_ROUTES = {
    "query": "POST /v1/realms/acme/query_data",
    "ingest": "PUT /v1/ingest/acme/documents/slow.md",
}


async def _spawn(args: list[str], env: dict[str, str], port: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegraph.infra.cli", *args,
        env={**env, **BOUNDS}, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        for _ in range(300):
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/healthz")).status_code == 200:
                    return proc
            await asyncio.sleep(0.1)
    proc.kill()
    _, err = await proc.communicate()
    raise AssertionError(f"{args[0]} did not start: {err.decode()[-2000:]}")


@pytest.fixture(scope="module")
async def ports(pg_dsn: str, kafka_bootstrap: str) -> AsyncIterator[dict[str, int]]:
    settings = await fresh_settings(kafka_bootstrap, f"bounds{uuid.uuid4().hex[:12]}")
    env = {**os.environ, "TIDEGRAPH_PG_DSN": pg_dsn, "TIDEGRAPH_KAFKA_BOOTSTRAP": kafka_bootstrap}
    env.pop("TIDEGRAPH_API_KEYS", None)
    query_port, ingest_port = _proc.free_port(), _proc.free_port()
    procs = [
        await _spawn(["serve", "--no-publisher", "--port", str(query_port)], env, query_port),
        await _spawn(
            [
                "connect",
                "http",
                "--port",
                str(ingest_port),
                "--topic-prefix",
                settings.topic_prefix,
            ],
            env,
            ingest_port,
        ),
    ]
    try:
        yield {"query": query_port, "ingest": ingest_port}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            _, err = await asyncio.wait_for(proc.communicate(), 20)
            assert b"Traceback" not in err, err.decode()[-3000:]  # refusals are not crashes


SERVICES = pytest.mark.parametrize("service", ["query", "ingest"])


async def _send(port: int, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def _answer(reader: asyncio.StreamReader, within: float) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of the response read until the server closes."""
    raw = await asyncio.wait_for(reader.read(-1), within)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, body


def _error_code(status: int, headers: dict[str, str], body: bytes, expected: int) -> str:
    assert status == expected, body
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    error = orjson.loads(body)["error"]
    assert error["message"]
    return str(error["code"])


@SERVICES
async def test_incomplete_headers_get_408(ports: dict[str, int], service: str) -> None:
    started = time.monotonic()
    reader, writer = await _send(ports[service], b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    status, headers, body = await _answer(reader, HEADER_TIMEOUT + SLACK)
    writer.close()
    assert _error_code(status, headers, body, 408) == "request_timeout"
    assert time.monotonic() - started >= HEADER_TIMEOUT * 0.9


@SERVICES
async def test_a_silent_connection_is_closed(ports: dict[str, int], service: str) -> None:
    reader, writer = await _send(ports[service], b"")
    assert await asyncio.wait_for(reader.read(-1), HEADER_TIMEOUT + SLACK) == b""
    writer.close()


@SERVICES
async def test_a_body_that_stops_gets_408(ports: dict[str, int], service: str) -> None:
    """Declared 100 bytes, sent 10: answered once the pause passes the idle bound."""
    started = time.monotonic()
    request = f"{BODY_ROUTES[service]} HTTP/1.1\r\nHost: x\r\n"
    request += "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    reader, writer = await _send(ports[service], request.encode() + b'{"content"')
    status, headers, body = await _answer(reader, BODY_IDLE_TIMEOUT + SLACK)
    writer.close()
    assert _error_code(status, headers, body, 408) == "request_timeout"
    assert time.monotonic() - started >= BODY_IDLE_TIMEOUT * 0.9


@SERVICES
async def test_a_dripping_body_is_bounded_in_all(ports: dict[str, int], service: str) -> None:
    """A byte every half second never trips the idle bound; the total bound ends it."""
    request = f"{BODY_ROUTES[service]} HTTP/1.1\r\nHost: x\r\n"
    request += "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    started = time.monotonic()
    reader, writer = await _send(ports[service], request.encode())
    answer = asyncio.create_task(_answer(reader, BODY_TIMEOUT + SLACK))
    with contextlib.suppress(OSError):
        while not answer.done():
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(BODY_IDLE_TIMEOUT / 2)
    status, headers, body = await answer
    writer.close()
    assert _error_code(status, headers, body, 408) == "request_timeout"
    assert time.monotonic() - started >= BODY_TIMEOUT * 0.9


async def _whole(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send all of ``request`` while reading the answer, as an ordinary client does; a reset
    instead of an answer fails the test."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    sending = asyncio.ensure_future(writer.drain())
    try:
        return await _answer(reader, 10.0)
    finally:
        with contextlib.suppress(OSError):
            await sending
        writer.close()


@SERVICES
async def test_a_huge_url_gets_414(ports: dict[str, int], service: str) -> None:
    request = b"GET /healthz?pad=" + b"a" * 1_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    status, headers, body = await _whole(ports[service], request)
    assert _error_code(status, headers, body, 414) == "uri_too_long"


@SERVICES
async def test_a_huge_header_gets_431(ports: dict[str, int], service: str) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1_000_000 + b"\r\n\r\n"
    status, headers, body = await _whole(ports[service], request)
    assert _error_code(status, headers, body, 431) == "headers_too_large"


@SERVICES
async def test_many_headers_get_431(ports: dict[str, int], service: str) -> None:
    pad = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 100) for i in range(2000))
    status, headers, body = await _whole(
        ports[service], b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + pad + b"\r\n"
    )
    assert _error_code(status, headers, body, 431) == "headers_too_large"


@SERVICES
async def test_ordinary_requests_are_unaffected(ports: dict[str, int], service: str) -> None:
    """Keep-alive requests past the head bound, a long URL under the limit, a large body."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports[service]}") as client:
        for _ in range(2):
            assert (await client.get("/healthz")).status_code == 200
            await asyncio.sleep(HEADER_TIMEOUT / 2)
        assert (await client.get("/healthz", params={"pad": "a" * 8000})).status_code == 200
        if service == "ingest":
            big = {"content": "word " * 200_000}
            response = await client.put("/v1/ingest/acme/documents/big.md", json=big)
            assert response.status_code == 202, response.text
