"""tidegraph.client against the real query service on a socket: the same answers as the
HTTP API, one exception class per error status, 503 retried and nothing else, settings
from the environment, and a subscription that resumes inside a commit."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

import tidegraph.client
from tidegraph.client import (
    AsyncClient,
    Client,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    Position,
    Unauthenticated,
    Unavailable,
)
from tidegraph.schemas.api import (
    ChangesResponse,
    DocumentResponse,
    EntitiesResponse,
    QueryDataResponse,
    RealmsResponse,
    RelationsResponse,
)
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from query_helpers import write_doc
from surface_helpers import app_in_thread

pytestmark = pytest.mark.postgres

A, B, WIDE = (
    "ca" + uuid.uuid4().hex[:10],
    "cb" + uuid.uuid4().hex[:10],
    "cw" + uuid.uuid4().hex[:10],
)
KEY_A, STAR = "client-a-key", "client-star-key"


async def _build(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for realm in (A, B):
            g = await GraphHarness.create(conn, realm, RealmConfig(embedder="hashing:8"))
            for i in range(3):
                await write_doc(
                    g,
                    f"dir/doc {i}.md",
                    [
                        (
                            f"Ada Lovelace worked with Person {i}. Person {i} met Charles Babbage.",
                            [ent("Ada Lovelace"), ent(f"Person {i}"), ent("Charles Babbage")],
                            [
                                rel("Ada Lovelace", "worked_with", f"Person {i}", vf="1840"),
                                rel(f"Person {i}", "met", "Charles Babbage"),
                            ],
                        )
                    ],
                )
        # a realm of another geometry than the service embeds queries with: 409
        await GraphHarness.create(conn, WIDE, RealmConfig(embedder="hashing:16"))


@pytest.fixture(scope="module")
def url(pg_dsn: str) -> Iterator[str]:
    import asyncio

    asyncio.run(_build(pg_dsn))
    with app_in_thread(pg_dsn, api_keys=f"{KEY_A}={A};{STAR}=*") as base:
        yield base


def raw(url: str, method: str, path: str, key: str = STAR, **kw: Any) -> Any:
    r = httpx.request(method, url + path, headers={"Authorization": f"Bearer {key}"}, **kw)
    assert r.status_code == 200, r.text
    return r.json()


def test_exported_members() -> None:
    assert tidegraph.client.__all__ == [
        "DEFAULT_URL",
        "ApiError",
        "AsyncClient",
        "AuthenticationFailed",
        "BadRequest",
        "Client",
        "ClientConfig",
        "ClientError",
        "Conflict",
        "ConnectError",
        "Forbidden",
        "InvalidRequest",
        "NotFound",
        "Position",
        "ProtocolError",
        "SeenSequences",
        "Unauthenticated",
        "Unavailable",
    ]


def test_sync_client_answers_as_the_http_api(url: str) -> None:
    q = {"query": "Who worked with Ada Lovelace?", "mode": "local", "hops": 1}
    with Client(url, STAR) as tg:
        assert tg.realms() == RealmsResponse.model_validate(raw(url, "GET", "/v1/realms"))
        assert A in [r.realm for r in tg.realms().realms]
        got = tg.query_data(A, q["query"], mode="local", hops=1)
        want = raw(url, "POST", f"/v1/realms/{A}/query_data", json=q)
        expected = QueryDataResponse.model_validate(want)
        assert got.model_dump(exclude={"stats"}) == expected.model_dump(exclude={"stats"})
        assert got.stats.keys() == expected.stats.keys()
        assert got.relations, "the question finds relations"
        rels = tg.relations(
            A, subject="Ada Lovelace", as_of=__import__("datetime").date(1850, 1, 1)
        )
        want = raw(url, "GET", f"/v1/realms/{A}/relations?subject=Ada+Lovelace&as_of=1850-01-01")
        assert rels == RelationsResponse.model_validate(want) and len(rels.relations) == 3
        ents = tg.entities(A, name="ada lovelace")
        assert ents == EntitiesResponse.model_validate(
            raw(url, "GET", f"/v1/realms/{A}/entities?name=ada+lovelace")
        )
        later = "2100-01-01T00:00:00Z"
        believed = tg.entities(
            A,
            name="ada lovelace",
            as_believed_at=__import__("datetime").datetime.fromisoformat(later),
        )
        assert believed == EntitiesResponse.model_validate(
            raw(url, "GET", f"/v1/realms/{A}/entities?name=ada+lovelace&as_believed_at={later}")
        )
        assert [e.description for e in believed.entities] == [e.description for e in ents.entities]
        doc = tg.document(A, "dir/doc 1.md")
        assert doc == DocumentResponse.model_validate(
            raw(url, "GET", f"/v1/realms/{A}/documents/dir%2Fdoc%201.md")
        )
        assert doc.status == "indexed"
        page = tg.changes(A, after_seq=1, limit=5)
        assert page == ChangesResponse.model_validate(
            raw(url, "GET", f"/v1/realms/{A}/changes?after_seq=1&limit=5")
        )
        assert all(c.seq > 1 for c in page.changes)


async def test_async_client_answers_as_the_sync_one(url: str) -> None:
    async with AsyncClient(url, STAR) as tg:
        with Client(url, STAR) as sync:
            assert await tg.realms() == sync.realms()
            a = await tg.query_data(B, "Ada Lovelace", hops=2)
            b = sync.query_data(B, "Ada Lovelace", hops=2)
            assert a.model_dump(exclude={"stats"}) == b.model_dump(exclude={"stats"})
            assert await tg.relations(B, object="Charles Babbage") == sync.relations(
                B, object="Charles Babbage"
            )
            assert await tg.entities(B) == sync.entities(B)
            assert await tg.changes(B) == sync.changes(B)


def test_each_error_status_has_its_class(url: str) -> None:
    with Client(url, api_key="") as anonymous, pytest.raises(Unauthenticated) as e401:
        anonymous.realms()
    assert e401.value.code == "unauthenticated" and e401.value.status == 401
    with Client(url, KEY_A) as tg:
        assert [r.realm for r in tg.realms().realms] == [A]
        with pytest.raises(Forbidden) as e403:
            tg.entities(B)
        assert e403.value.code == "forbidden" and B in e403.value.message
        with pytest.raises(NotFound) as e404:
            tg.document(A, "no such.md")
        assert e404.value.code == "document_not_found"
        with pytest.raises(InvalidRequest):
            tg.query_data(A, "Ada", top_k=500)  # over the service's limit (100)
    with Client(url, STAR) as tg, pytest.raises(Conflict) as e409:
        tg.query_data(WIDE, "anything")
    assert e409.value.code == "embedder_mismatch"


def _query_503s(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    pattern = (
        r"tidegraph_http_requests_total\{"
        r'method="POST",route="/v1/realms/\{realm\}/query",status="503"\} (\S+)'
    )
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


def test_503_is_retried_with_backoff_and_nothing_else_is(url: str) -> None:
    """No chat model is configured: /query answers 503 every time."""
    before = _query_503s(url)
    with Client(url, STAR, retries=2, backoff=0.01) as tg, pytest.raises(Unavailable) as exc:
        tg.query(A, "Who worked with Ada?")
    assert exc.value.code == "chat_model_not_configured" and exc.value.retriable
    assert _query_503s(url) - before == 3  # the first try and two retries
    with Client(url, KEY_A, retries=2, backoff=0.01) as tg, pytest.raises(Forbidden):
        tg.query(B, "Who?")  # a 403 is never retried
    assert _query_503s(url) - before == 3


def test_url_and_key_from_the_environment(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGRAPH_URL", url)
    monkeypatch.setenv("TIDEGRAPH_API_KEY", KEY_A)
    with Client() as tg:
        assert [r.realm for r in tg.realms().realms] == [A]
    with Client(api_key=STAR) as tg:  # an argument wins over the environment
        assert {A, B} <= {r.realm for r in tg.realms().realms}


async def test_subscribe_resumes_inside_a_commit(url: str) -> None:
    with Client(url, STAR) as tg:
        everything = list(tg.subscribe(A, follow=False, page_size=3))
        ids = [c.id for c in everything]
        assert len(ids) == len(set(ids)) > 8
        assert ids == [c.id for c in tg.changes(A, limit=1000).changes]
        # stop in the middle of a commit, then resume from the last change's id
        cut = next(i for i, c in enumerate(everything) if c.id.endswith(":1"))
        rest = list(tg.subscribe(A, after_id=everything[cut].id, follow=False, page_size=2))
        assert [c.id for c in rest] == ids[cut + 1 :]
        # whole commits: after_seq
        seq = everything[cut].seq
        tail = [c.id for c in tg.subscribe(A, after_seq=seq, follow=False)]
        assert tail == [c.id for c in everything if c.seq > seq]
    async with AsyncClient(url, STAR) as atg:
        got = [c.id async for c in atg.subscribe(A, after_id=ids[cut], follow=False)]
    assert got == ids[cut + 1 :]
    assert str(Position.of(everything[cut])) == f"{everything[cut].seq}:1"
