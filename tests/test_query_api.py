"""The HTTP surface: keys and realms, the error shape, limits, synthesis, embedder pinning,
service routes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.schemas import VERSION
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import create_realm, ensure_control

from graph_helpers import GraphHarness, ent, rel
from query_helpers import api_client, open_pool, query_data, write_doc

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture(scope="module")
async def realms(pg_dsn: str) -> tuple[str, str]:
    """Two realms with a little graph each: (a, b)."""
    import uuid

    names = ("ka" + uuid.uuid4().hex[:10], "kb" + uuid.uuid4().hex[:10])
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for realm in names:
            g = await GraphHarness.create(conn, realm, RealmConfig(embedder="hashing:8"))
            await write_doc(
                g,
                "bio.md",
                [
                    (
                        "Charles Babbage designed the Analytical Engine from 1834 to 1871. "
                        "Babbage never worked with Mary Somerville.",
                        [
                            ent("Charles Babbage"),
                            ent("Analytical Engine", "Machine"),
                            ent("Mary Somerville"),
                        ],
                        [
                            rel(
                                "Charles Babbage",
                                "designed",
                                "Analytical Engine",
                                vf="1834",
                                vt="1871",
                            ),
                            rel("Charles Babbage", "worked_with", "Mary Somerville", negated=True),
                            rel("Charles Babbage", "met", "Mary Somerville", vf="1833-06-05"),
                        ],
                    ),
                ],
            )
    return names


KEYS = "alpha-key=REALM_A;star-key=*"


def err(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    code: str = body["error"]["code"]
    return code


async def test_keys_reach_only_their_realms(
    pool: AsyncConnectionPool[Any], realms: tuple[str, str]
) -> None:
    a, b = realms
    async with api_client(pool, api_keys=KEYS.replace("REALM_A", a)) as client:
        q = {"query": "Babbage"}
        assert err(await client.post(f"/v1/realms/{a}/query_data", json=q), 401) == (
            "unauthenticated"
        )
        bad = {"Authorization": "Bearer nope"}
        assert err(await client.post(f"/v1/realms/{a}/query_data", json=q, headers=bad), 401)
        basic = {"Authorization": "Basic alpha-key"}
        assert err(await client.post(f"/v1/realms/{a}/query_data", json=q, headers=basic), 401)
        mine = {"Authorization": "Bearer alpha-key"}
        ok = await client.post(f"/v1/realms/{a}/query_data", json=q, headers=mine)
        assert ok.status_code == 200
        for path in (
            "query_data",
            "changes",
            "relations",
            "entities",
            "communities",
            "documents/bio.md",
        ):
            method = client.post if path == "query_data" else client.get
            kwargs: dict[str, Any] = {"json": q} if path == "query_data" else {}
            r = await method(f"/v1/realms/{b}/{path}", headers=mine, **kwargs)
            assert err(r, 403) == "forbidden", path
        # a key limited to other realms learns nothing about existence: 403, not 404
        assert err(await client.get("/v1/realms/nosuchrealm/changes", headers=mine), 403)
        star = {"Authorization": "Bearer star-key"}
        assert (await client.get(f"/v1/realms/{b}/changes", headers=star)).status_code == 200
        assert err(await client.get("/v1/realms/nosuchrealm/changes", headers=star), 404) == (
            "realm_not_found"
        )
        assert err(await client.get("/v1/realms/Not-A-Realm/changes", headers=star), 404)
        # service routes need no key
        assert (await client.get("/healthz")).status_code == 200


async def test_without_keys_unknown_realms_are_404(pool: AsyncConnectionPool[Any]) -> None:
    async with api_client(pool) as client:
        r = await client.post("/v1/realms/nosuchrealm/query_data", json={"query": "x"})
        assert err(r, 404) == "realm_not_found"


async def test_a_realm_of_the_earlier_layout_is_upgraded_on_first_lookup(
    pool: AsyncConnectionPool[Any], pg_dsn: str
) -> None:
    """Entities without the stored name key (before it existed) answer every route."""
    import uuid

    realm = "ku" + uuid.uuid4().hex[:10]
    entities = f"realm_{realm}.entities"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, realm, RealmConfig(embedder="hashing:8"))
        await write_doc(
            g,
            "a.md",
            [
                (
                    "Olga Åberg advised Bo Ek.",
                    [ent("Olga Åberg"), ent("Bo Ek")],
                    [rel("Olga Åberg", "advised", "Bo Ek")],
                )
            ],
        )
        await conn.execute(f"ALTER TABLE {entities} DROP COLUMN name_key")
        await conn.execute(f"CREATE UNIQUE INDEX entities_name ON {entities} (space, lower(name))")
    async with api_client(pool) as client:
        r = await client.get(f"/v1/realms/{realm}/entities", params={"name": "OLGA ÅBERG"})
        assert r.status_code == 200, r.text
        assert [e["name"] for e in r.json()["entities"]] == ["Olga Åberg"]
        r = await client.get(f"/v1/realms/{realm}/relations", params={"subject": "olga åberg"})
        assert r.status_code == 200, r.text
        assert [x["object"] for x in r.json()["relations"]] == ["Bo Ek"]
        data = await query_data(client, realm, query="Who did Olga Åberg advise?")
        assert "Olga Åberg" in [e["name"] for e in data["entities"]]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": "   "}, "blank"),
        ({"query": "x", "mode": "everything"}, "mode"),
        ({"query": "x", "top_k": 0}, "top_k"),
        ({"query": "x", "top_k": 101}, "top_k"),
        ({"query": "x", "hops": 4}, "hops"),
        ({"query": "x", "hops": -1}, "hops"),
        ({"query": "x", "relation_top_k": 500}, "relation_top_k"),
        ({"query": "x", "space": "a b"}, "space"),
        ({"query": "x", "as_of": "yesterday"}, "as_of"),
        ({"query": "x", "as_of": "1840-13"}, "is not a year, year-month or date"),
        ({"query": "x", "as_of": "1840-02-30"}, "as_of"),
        ({"query": "x", "as_believed_at": "2026-01-01T00:00:00"}, "as_believed_at"),
        ({"query": "x", "surprise": 1}, "surprise"),
        ({"query": "x\u0000y"}, "NUL"),
        ({"query": "x", "relation_types": ["ok", "bad\u0000"]}, "NUL"),
        ({"query": "x", "fusion": "max"}, "fusion"),
        ({"query": "x" * 4001}, "query"),
    ],
)
async def test_malformed_bodies_are_422_in_the_contract_shape(
    pool: AsyncConnectionPool[Any], realms: tuple[str, str], body: dict[str, Any], needle: str
) -> None:
    async with api_client(pool) as client:
        r = await client.post(f"/v1/realms/{realms[0]}/query_data", json=body)
        assert err(r, 422) == "invalid_request"
        assert needle in r.json()["error"]["message"]


async def test_unparseable_and_oversized_bodies(
    pool: AsyncConnectionPool[Any], realms: tuple[str, str]
) -> None:
    async with api_client(pool, max_body_bytes=2048) as client:
        url = f"/v1/realms/{realms[0]}/query_data"
        bad_json = await client.post(
            url, content=b"{not json", headers={"content-type": "application/json"}
        )
        assert err(bad_json, 400) == "malformed_json"  # as the ingest service answers it
        message = bad_json.json()["error"]["message"]
        assert message.startswith("request body is not JSON: ") and "character" in message
        assert "JSON decode error" not in message
        not_object = await client.post(url, json=[1, 2])
        assert err(not_object, 422)
        big = await client.post(url, json={"query": "x" * 5000})
        assert err(big, 422) == "request_too_large"

        async def chunks() -> AsyncIterator[bytes]:  # no content-length: streamed
            for _ in range(10):
                yield b" " * 1000

        streamed = await client.post(
            url, content=chunks(), headers={"content-type": "application/json"}
        )
        assert err(streamed, 422) == "request_too_large"
        assert err(await client.get("/nowhere"), 404) == "not_found"
        assert err(await client.delete(url), 405) == "method_not_allowed"
        bad_page = await client.get(f"/v1/realms/{realms[0]}/changes", params={"limit": 0})
        assert err(bad_page, 422)
        bad_space = await client.get(f"/v1/realms/{realms[0]}/documents/x", params={"space": "*"})
        assert err(bad_space, 422)


@pytest.mark.parametrize(
    ("path", "params", "needle"),
    [
        ("documents/a%00b", {}, "doc_key"),
        ("relations", {"subject": "Ada\u0000"}, "subject"),
        ("relations", {"predicate": "worked\u0000with"}, "predicate"),
        ("relations", {"object": "\u0000"}, "object"),
        ("entities", {"name": "Olga\u0000Åberg"}, "name"),
    ],
)
async def test_nul_in_path_or_query_text_is_422(
    pool: AsyncConnectionPool[Any],
    realms: tuple[str, str],
    path: str,
    params: dict[str, str],
    needle: str,
) -> None:
    async with api_client(pool) as client:
        r = await client.get(f"/v1/realms/{realms[0]}/{path}", params=params)
        assert err(r, 422) == "invalid_request"
        assert needle in r.json()["error"]["message"]


class RecordingChat:
    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def __call__(self, system: str, prompt: str) -> str:
        assert "NOT" in system
        self.prompts.append(prompt)
        return "Babbage designed it [1]."


async def test_query_synthesises_with_validity_denials_and_references(
    pool: AsyncConnectionPool[Any], realms: tuple[str, str]
) -> None:
    chat = RecordingChat()
    async with api_client(pool, chat=chat) as client:
        r = await client.post(
            f"/v1/realms/{realms[0]}/query", json={"query": "What did Charles Babbage design?"}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["answer"] == "Babbage designed it [1]."
        assert body["references"][0] == {
            "n": 1,
            "doc_key": "bio.md",
            "chunk_id": body["data"]["chunks"][0]["id"],
            "citation": "bio.md#0",
        }
        prompt = chat.prompts[0]
        assert (
            "(Charles Babbage) --[designed]--> (Analytical Engine) [valid 1834 to 1871]"
        ) in prompt
        assert "(Charles Babbage) --[NOT worked_with]--> (Mary Somerville)" in prompt
        assert "(Charles Babbage) --[met]--> (Mary Somerville) [from 1833-06-05]" in prompt
        assert "[1] (bio.md#0)" in prompt and "## References" in prompt
        assert body["prompt"]["prompt_chars"] == body["prompt"]["retrieved_chars"]
        assert body["prompt"]["clipped"] == 0 and body["prompt"]["budget"] is None

        tight = await client.post(
            f"/v1/realms/{realms[0]}/query",
            json={"query": "What did Charles Babbage design?", "max_prompt_chars": 300},
        )
        stats = tight.json()["prompt"]
        assert stats["clipped"] >= 1
        assert stats["prompt_chars"] < stats["retrieved_chars"]
        # clipped, not dropped: every passage still has its number in the prompt
        assert len(tight.json()["references"]) == len(tight.json()["data"]["chunks"])
        assert "[1] (bio.md#0)" in chat.prompts[-1] and "…" in chat.prompts[-1]


async def test_query_without_a_chat_model_is_a_clear_503(
    pool: AsyncConnectionPool[Any], realms: tuple[str, str]
) -> None:
    async with api_client(pool) as client:
        r = await client.post(f"/v1/realms/{realms[0]}/query", json={"query": "x"})
        assert err(r, 503) == "chat_model_not_configured"
        assert "query_data works without one" in r.json()["error"]["message"]
        missing = await client.post("/v1/realms/nosuchrealm/query", json={"query": "x"})
        assert err(missing, 404)


class WideEmbedder:
    id = "hashing:16"
    dimension = 16

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] + [0.0] * 15 for _ in texts]


async def test_a_query_embedder_other_than_the_pinned_one_is_409(
    pool: AsyncConnectionPool[Any], realms: tuple[str, str]
) -> None:
    async with api_client(pool, embedder=WideEmbedder()) as client:
        r = await client.post(f"/v1/realms/{realms[0]}/query_data", json={"query": "x"})
        assert err(r, 409) == "embedder_mismatch"
        assert "hashing:8" in r.json()["error"]["message"]
        # bypass embeds nothing, so it still answers
        ok = await client.post(
            f"/v1/realms/{realms[0]}/query_data", json={"query": "x", "mode": "bypass"}
        )
        assert ok.status_code == 200


async def test_service_routes(pool: AsyncConnectionPool[Any], realms: tuple[str, str]) -> None:
    async with api_client(pool) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        await client.post(f"/v1/realms/{realms[0]}/query_data", json={"query": "Babbage"})
        metrics = (await client.get("/metrics")).text
        assert 'route="/v1/realms/{realm}/query_data"' in metrics
        assert "tidegraph_retrieval_seconds_bucket" in metrics
        spec = (await client.get("/openapi.json")).json()
        assert spec["info"]["version"] == VERSION  # the release, from the one version source
        assert "/v1/realms/{realm}/query_data" in spec["paths"]
        modes = spec["components"]["schemas"]["QueryDataRequest"]["properties"]["mode"]
        assert set(modes["enum"]) == {"mix", "local", "global", "hybrid", "naive", "bypass"}


async def test_readiness_names_the_realm_that_is_not_servable(own_database: str) -> None:
    """In a database of its own, readiness is exactly the state of the realms it holds."""
    async with (
        await psycopg.AsyncConnection.connect(own_database, autocommit=True) as conn,
        open_pool(own_database) as pool,
        api_client(pool) as client,
    ):
        assert (await client.get("/readyz")).status_code == 200
        await ensure_control(conn)
        info = await create_realm(conn, "fine", RealmConfig(embedder="hashing:8"))
        await create_realm(conn, "also_fine", RealmConfig(embedder="hashing:8"))
        assert (await client.get("/readyz")).status_code == 200
        # a realm whose tables disagree with its pinned dimension makes the service unready
        await conn.execute(
            sql.SQL("UPDATE {}.meta SET embedder = 'hashing:9', dimension = 9").format(
                sql.Identifier(info.schema)
            )
        )
        unready = await client.get("/readyz")
        assert err(unready, 503) == "unavailable"
        assert "fine" in unready.json()["error"]["message"]
        assert "also_fine" not in unready.json()["error"]["message"]
        await conn.execute(
            sql.SQL("UPDATE {}.meta SET embedder = 'hashing:8', dimension = 8").format(
                sql.Identifier(info.schema)
            )
        )
        assert (await client.get("/readyz")).status_code == 200


def test_serve_refuses_a_public_interface_without_keys(pg_dsn: str) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "TIDEGRAPH_PG_DSN": pg_dsn}
    env.pop("TIDEGRAPH_API_KEYS", None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidegraph.infra.cli",
            "serve",
            "--host",
            "0.0.0.0",
            "--no-publisher",
        ],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert b"refusing to listen on '0.0.0.0' without API keys" in out.stderr


async def test_realms_lists_what_the_key_reads_with_counts(
    pool: AsyncConnectionPool[Any], realms: tuple[str, str], pg_dsn: str
) -> None:
    a, b = realms
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(f"SELECT seq FROM realm_{a}.meta")
        row = await cur.fetchone()
    assert row is not None
    expected = {
        "realm": a,
        "embedder": "hashing:8",
        "documents": 1,
        "entities": 3,
        "relations": 3,
        "head_seq": int(row[0]),
    }
    async with api_client(pool, api_keys=KEYS.replace("REALM_A", a)) as client:
        assert err(await client.get("/v1/realms"), 401) == "unauthenticated"
        bad = {"Authorization": "Bearer nope"}
        assert err(await client.get("/v1/realms", headers=bad), 401) == "unauthenticated"
        mine = await client.get("/v1/realms", headers={"Authorization": "Bearer alpha-key"})
        assert mine.status_code == 200, mine.text
        assert mine.json() == {"realms": [expected]}
        star = await client.get("/v1/realms", headers={"Authorization": "Bearer star-key"})
        listed = [r["realm"] for r in star.json()["realms"]]
        assert a in listed and b in listed and listed == sorted(listed)
    async with api_client(pool) as client:  # no keys configured: every realm
        listed = [r["realm"] for r in (await client.get("/v1/realms")).json()["realms"]]
        assert a in listed and b in listed


async def test_with_keys_service_routes_say_only_what_is_open(
    pool: AsyncConnectionPool[Any],
    realms: tuple[str, str],
    pg_dsn: str,
    unique_name: Callable[[str], str],
) -> None:
    """/readyz tells anyone ready or not, and the details only to a key reaching every
    realm; /metrics needs such a key when configured to; /healthz and /openapi.json are open."""
    a, _ = realms
    star = {"Authorization": "Bearer star-key"}
    mine = {"Authorization": "Bearer alpha-key"}
    keys = KEYS.replace("REALM_A", a)

    def bare(response: httpx.Response) -> None:
        """Ready or not ready, and nothing else."""
        if response.status_code == 200:
            assert response.json() == {"status": "ready"}
        else:
            assert err(response, 503) == "unavailable"
            assert response.json()["error"]["message"] == "not ready"

    async with api_client(pool, api_keys=keys, metrics_require_key=True) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert "/readyz" in (await client.get("/openapi.json")).json()["paths"]
        bare(await client.get("/readyz"))
        bare(await client.get("/readyz", headers=mine))
        detailed = await client.get("/readyz", headers=star)
        assert detailed.status_code == 503 or "realms" in detailed.json()

        assert err(await client.get("/metrics"), 401) == "unauthenticated"
        assert err(await client.get("/metrics", headers=mine), 403) == "forbidden"
        assert "tidegraph_http_requests" in (await client.get("/metrics", headers=star)).text

        broken = unique_name("br")
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            info = await create_realm(conn, broken, RealmConfig(embedder="hashing:8"))
            await conn.execute(
                f"UPDATE \"{info.schema}\".meta SET embedder = 'hashing:9', dimension = 9"
            )
            try:
                for headers in ({}, mine):
                    unready = await client.get("/readyz", headers=headers)
                    bare(unready)
                    assert unready.status_code == 503 and broken not in unready.text
                told = await client.get("/readyz", headers=star)
                assert err(told, 503) == "unavailable" and broken in told.text
            finally:
                await conn.execute(
                    f"UPDATE \"{info.schema}\".meta SET embedder = 'hashing:8', dimension = 8"
                )

    async with api_client(pool, api_keys=keys) as client:  # metrics open by default
        assert (await client.get("/metrics")).status_code == 200


async def test_unknown_query_parameters_are_400_naming_them(
    pool: AsyncConnectionPool[Any], realms: tuple[str, str]
) -> None:
    a = realms[0]
    async with api_client(pool) as client:
        typo = await client.get(f"/v1/realms/{a}/relations", params={"subjct": "Charles Babbage"})
        assert err(typo, 400) == "unknown_parameter"
        message = typo.json()["error"]["message"]
        assert "subjct" in message and "subject" in message  # names it and what is taken
        both = await client.get(f"/v1/realms/{a}/entities", params={"x": "1", "y": "2"})
        assert "unknown query parameters x, y" in both.json()["error"]["message"]
        stray = await client.post(f"/v1/realms/{a}/query_data?top=3", json={"query": "Babbage"})
        assert err(stray, 400) == "unknown_parameter"
        fine = await client.get(f"/v1/realms/{a}/relations", params={"subject": "Charles Babbage"})
        assert fine.status_code == 200 and fine.json()["relations"]
        copy = await client.get(f"/v1/realms/{a}/changes", params={"copy": "audit_404"})
        assert err(copy, 404) == "copy_not_found"  # a declared parameter is no stranger
        assert (await client.get("/healthz", params={"probe": "1"})).status_code == 200


async def test_docs_are_served_from_the_package_not_a_cdn(pool: AsyncConnectionPool[Any]) -> None:
    async with api_client(pool) as client:
        page = await client.get("/docs")
        assert page.status_code == 200, page.text
        assert "/docs/assets/swagger-ui-bundle.js" in page.text
        assert "/docs/assets/swagger-ui.css" in page.text
        assert "https://" not in page.text and "http://" not in page.text  # nothing remote
        script = await client.get("/docs/assets/swagger-ui-bundle.js")
        assert script.status_code == 200 and len(script.content) > 100_000
        assert (await client.get("/docs/assets/swagger-ui.css")).status_code == 200
        schema = await client.get("/openapi.json")
        assert schema.status_code == 200 and schema.json()["openapi"].startswith("3.1")
        assert (await client.get("/redoc")).status_code == 404  # it would load from a CDN


async def test_pages_continue_from_the_string_id_of_their_last_item(
    pool: AsyncConnectionPool[Any], realms: tuple[str, str]
) -> None:
    """Ids are strings everywhere, the page cursor included."""
    a = realms[0]
    async with api_client(pool) as client:
        for route, key in (("relations", "relations"), ("entities", "entities")):
            every = (await client.get(f"/v1/realms/{a}/{route}", params={"limit": 100})).json()
            ids = [item["id"] for item in every[key]]
            assert len(ids) >= 3 and every["next_after_id"] is None
            seen: list[str] = []
            after: str | None = "0"
            while after is not None:
                page = await client.get(
                    f"/v1/realms/{a}/{route}", params={"limit": 2, "after_id": after}
                )
                body = page.json()
                seen += [item["id"] for item in body[key]]
                after = body["next_after_id"]
                assert after is None or after == body[key][-1]["id"]
            assert seen == ids
