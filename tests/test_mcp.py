"""``tidegraph mcp`` driven by the MCP SDK's own client over stdio and streamable HTTP: the
tools answer as the HTTP API does, cite their sources, and a key for one realm reads no
other realm through any tool."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tidegraph.indexer.models.hashing import HashingEmbedder

from surface_helpers import REPO, app_in_thread, free_port, live_pipeline

pytestmark = [pytest.mark.postgres, pytest.mark.kafka]

A, B = "ma" + uuid.uuid4().hex[:10], "mb" + uuid.uuid4().hex[:10]
KEY_A, STAR = "mcp-a-key", "mcp-star-key"
TOOLS = {
    "list_realms",
    "query_data",
    "find_entity",
    "entity_relations",
    "relation_sources",
    "recent_changes",
}


async def _build(dsn: str, bootstrap: str) -> None:
    """The sample corpus through the real topic and indexer into both realms, the 1842
    dispute after the 1830 one (so the alliance is superseded in belief time)."""
    for realm in (A, B):
        async with live_pipeline(bootstrap, dsn, realm, "mp" + uuid.uuid4().hex[:10]) as live:
            names = sorted(p.name for p in live.corpus_dir.glob("*.md"))
            await live.publish(live.corpus(*[n for n in names if n != "rivalry-2.md"]))
            await live.publish(live.corpus("rivalry-2.md"))


@pytest.fixture(scope="module")
def url(pg_dsn: str, kafka_bootstrap: str) -> Iterator[str]:
    asyncio.run(_build(pg_dsn, kafka_bootstrap))
    keys = f"{KEY_A}={A};{STAR}=*"
    with app_in_thread(pg_dsn, embedder=HashingEmbedder(64), api_keys=keys) as base:
        yield base


@pytest.fixture(scope="module")
def mcp_http(url: str) -> Iterator[str]:
    """``tidegraph mcp --transport http`` in front of the query service."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegraph.infra.cli", "mcp", "--transport", "http"]
        + ["--port", str(port), "--url", url],
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "tidegraph mcp exited"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "tidegraph mcp did not listen"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(15)


def stdio_session(url: str, key: str) -> AbstractAsyncContextManager[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tidegraph.infra.cli", "mcp", "--url", url],
        env={"TIDEGRAPH_API_KEY": key},
        cwd=str(REPO),
    )
    return _session(stdio_client(params))


def http_session(endpoint: str, key: str) -> AbstractAsyncContextManager[ClientSession]:
    @asynccontextmanager
    async def opened() -> AsyncIterator[Any]:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with streamable_http_client(endpoint, http_client=http) as streams:
                yield streams

    return _session(opened())


@asynccontextmanager
async def _session(transport: AbstractAsyncContextManager[Any]) -> AsyncIterator[ClientSession]:
    async with transport as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            yield session


async def tool(session: ClientSession, tool_name: str, /, **args: Any) -> Any:
    result = await session.call_tool(tool_name, args)
    assert not result.is_error, result.content
    data = result.structured_content
    assert data is not None
    return data.get("result", data) if set(data) == {"result"} else data


async def refused(session: ClientSession, tool_name: str, /, **args: Any) -> str:
    result = await session.call_tool(tool_name, args)
    assert result.is_error
    return " ".join(getattr(c, "text", "") for c in result.content)


def api(url: str, method: str, path: str, **kw: Any) -> Any:
    r = httpx.request(method, url + path, headers={"Authorization": f"Bearer {STAR}"}, **kw)
    assert r.status_code == 200, r.text
    return r.json()


async def exercise(session: ClientSession, url: str) -> None:
    """What a key for realm A sees through every tool."""
    listed = await session.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    assert all(t.description for t in listed.tools)

    assert [r["realm"] for r in await tool(session, "list_realms")] == [A]

    q = {"query": "Who is Charles Babbage's enemy?", "mode": "local", "hops": 1}
    data = await tool(session, "query_data", realm=A, **q)
    want = api(url, "POST", f"/v1/realms/{A}/query_data", json=q)
    assert [r["id"] for r in data["relations"]] == [r["id"] for r in want["relations"]]
    assert [p["cite"] for p in data["passages"]] == [c["citation"] for c in want["chunks"]]
    enemy = next(r for r in data["relations"] if "enemy_of" in r["fact"])
    assert enemy["doc_keys"] == ["rivalry-2.md"] and enemy["state"] == "current"

    found = await tool(session, "find_entity", realm=A, name="charles babbage")
    assert [e["name"] for e in found] == ["Charles Babbage"]

    history = await tool(session, "entity_relations", realm=A, name="Charles Babbage")
    states = {r["fact"]: r for r in history}
    ally = states["Charles Babbage ally_of George Airy"]
    assert ally["state"] == "superseded" and ally["superseded_by"] == enemy["id"]
    assert ally["believed"][1] is not None  # its belief interval closed when superseded
    assert states["Charles Babbage enemy_of George Airy"]["state"] == "current"
    before = await tool(
        session,
        "entity_relations",
        realm=A,
        name="Charles Babbage",
        as_believed_at=ally["believed"][0],
    )
    then = {r["fact"]: r["state"] for r in before}
    assert then["Charles Babbage ally_of George Airy"] == "current"
    assert "Charles Babbage enemy_of George Airy" not in then

    # with its history: every belief interval, the superseded one naming what superseded it
    assert [i["state"] for i in ally["history"]] == ["current", "superseded"]
    assert ally["history"][1]["superseded_by"] == enemy["id"]
    assert ally["history"][0]["believed"] == [
        ally["believed"][0],
        ally["history"][1]["believed"][0],
    ]
    current_only = await tool(
        session, "entity_relations", realm=A, name="Charles Babbage", include_history=False
    )
    assert {r["state"] for r in current_only} == {"current"}
    assert all("history" not in r for r in current_only)
    assert {r["id"] for r in current_only} == {r["id"] for r in history if r["state"] == "current"}

    # dates as the HTTP API takes them, and the API's answers
    for time_args in (
        {"as_of": "1830"},
        {"as_of": "1830-06-01"},
        {"as_believed_at": ally["believed"][0][:10]},  # a date: the end of that day
        {"as_believed_at": "2020"},
    ):
        asked = {**q, **time_args}
        data = await tool(session, "query_data", realm=A, **asked)
        want = api(url, "POST", f"/v1/realms/{A}/query_data", json=asked)
        assert [r["id"] for r in data["relations"]] == [r["id"] for r in want["relations"]]
    for bad_args, says in (
        ({"bogus": 1}, "query_data takes no argument bogus; it takes as_believed_at, as_of,"),
        ({"as_of": "1830-13"}, "as_of: '1830-13' is not a year, year-month or date"),
        ({"as_believed_at": "1830-06-01T10:00"}, "as_believed_at: '1830-06-01T10:00:00' has no"),
        ({"space": "*bad*"}, "space"),
    ):
        message = await refused(session, "query_data", realm=A, query="Babbage", **bad_args)
        assert message.startswith("Error executing tool query_data: 422 invalid_request: ")
        assert says in message, message
        assert "pydantic" not in message and "http" not in message, message

    sources = await tool(session, "relation_sources", realm=A, relation_id=ally["id"])
    assert [d["doc_key"] for d in sources["documents"]] == ["rivalry-1.md"]
    assert sources["documents"][0]["status"] == "indexed"

    recent = await tool(session, "recent_changes", realm=A, limit=3)
    feed = api(url, "GET", f"/v1/realms/{A}/changes?limit=1000")
    assert [c["id"] for c in recent["changes"]] == [c["id"] for c in feed["changes"][-3:]]
    assert recent["next_seq"] == feed["head_seq"]

    # realm B is out of reach through every tool
    for tool_name, args in (
        ("query_data", {"query": "Babbage"}),
        ("find_entity", {"name": "Charles Babbage"}),
        ("entity_relations", {"name": "Charles Babbage"}),
        ("relation_sources", {"relation_id": ally["id"]}),
        ("recent_changes", {}),
    ):
        message = await refused(session, tool_name, realm=B, **args)
        assert "403 forbidden" in message, (tool_name, message)


async def test_stdio_transport(url: str) -> None:
    async with stdio_session(url, KEY_A) as session:
        await exercise(session, url)


async def test_streamable_http_transport(url: str, mcp_http: str) -> None:
    async with http_session(mcp_http, KEY_A) as session:
        await exercise(session, url)
    # the HTTP caller's own key decides, never one of the server's
    async with http_session(mcp_http, "not-a-key") as session:
        assert "401 unauthenticated" in await refused(session, "list_realms")
    async with http_session(mcp_http, STAR) as session:
        assert {A, B} <= {r["realm"] for r in await tool(session, "list_realms")}
