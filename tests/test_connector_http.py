"""HTTP ingest onto a real topic: 202 only after the ack, every error in the contract's shape."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tidegraph.connectors.config import load_connector_settings
from tidegraph.connectors.http_ingest import IngestService, create_app
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.schemas import VERSION
from tidegraph.schemas.api_keys import ApiKeys
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.settings import Settings

from connector_helpers import fresh_settings, read_topic, validated  # type: ignore[import-not-found]

pytestmark = pytest.mark.kafka

ClientFactory = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def settings(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Settings:
    return await fresh_settings(kafka_bootstrap, unique_name("th"))


@pytest.fixture
async def make_client(settings: Settings) -> AsyncIterator[ClientFactory]:
    opened: list[tuple[httpx.AsyncClient, IngestService]] = []

    async def make(
        *,
        keys: str | None = None,
        bootstrap: str | None = None,
        client_host: str = "127.0.0.1",
        **limits: Any,
    ) -> httpx.AsyncClient:
        connector = load_connector_settings(send_timeout=5.0, **limits)
        producer = DocumentProducer(
            bootstrap or settings.kafka_bootstrap,
            settings.documents_topic,
            max_document_bytes=connector.max_document_bytes,
        )
        service = IngestService(producer, connector)
        app = create_app(service, ApiKeys.parse(keys))
        transport = httpx.ASGITransport(app=app, client=(client_host, 50000))
        client = httpx.AsyncClient(transport=transport, base_url="http://ingest")
        opened.append((client, service))
        return client

    yield make
    for client, service in opened:
        await client.aclose()
        await service.aclose()


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    return message


async def _record_at(bootstrap: str, topic: str, partition: int, offset: int) -> Any:
    consumer = AIOKafkaConsumer(
        **kafka_client_options(), bootstrap_servers=bootstrap, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        batch = await consumer.getmany(tp, timeout_ms=10_000, max_records=1)
        [record] = batch[tp]
        return record
    finally:
        await consumer.stop()


async def test_put_answers_with_the_acknowledged_position(
    make_client: ClientFactory, settings: Settings
) -> None:
    client = await make_client()
    response = await client.put(
        "/v1/ingest/acme/documents/docs/handbook/onboarding.md",
        json={"content": "Welcome.", "title": "Onboarding", "metadata": {"category": "hr"},
              "order_key": "2024-06-30", "source_version": "42", "space": "hr"},
    )  # fmt: skip
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["doc_key"] == "docs/handbook/onboarding.md" and body["space"] == "hr"
    record = await _record_at(
        settings.kafka_bootstrap, settings.documents_topic, body["partition"], body["offset"]
    )
    doc = validated(record)
    assert doc.doc_key == "docs/handbook/onboarding.md" and doc.content == "Welcome."
    assert doc.content_hash == content_hash("Welcome.") and doc.source == "http"
    assert doc.order_key == "2024-06-30" and doc.source_version == "42"


async def test_delete_and_batch(make_client: ClientFactory, settings: Settings) -> None:
    client = await make_client()
    deleted = await client.delete("/v1/ingest/acme/documents/a%2Fb.md?source_version=7")
    assert deleted.status_code == 202, deleted.text
    batch = await client.post(
        "/v1/ingest/acme/documents:batch",
        json={"documents": [
            {"doc_key": "b1", "content": "one"},
            {"doc_key": "b2", "content": "two", "title": "Two"},
            {"doc_key": "b1", "op": "delete"},
        ]},
    )  # fmt: skip
    assert batch.status_code == 202, batch.text
    results = batch.json()["results"]
    assert [r["doc_key"] for r in results] == ["b1", "b2", "b1"]
    assert [r["offset"] for r in results] == sorted(r["offset"] for r in results)
    docs = [
        validated(r)
        for r in await read_topic(settings.kafka_bootstrap, settings.documents_topic, expected=4)
    ]
    assert [(d.doc_key, d.op) for d in docs] == [
        ("a/b.md", "delete"), ("b1", "upsert"), ("b2", "upsert"), ("b1", "delete"),
    ]  # fmt: skip
    assert docs[0].source_version == "7"


async def test_invalid_batch_sends_nothing(make_client: ClientFactory, settings: Settings) -> None:
    client = await make_client()
    response = await client.post(
        "/v1/ingest/acme/documents:batch",
        json={"documents": [{"doc_key": "ok", "content": "x"}, {"doc_key": "bad"}]},
    )
    message = _error(response, 422, "invalid_document")
    assert message.startswith("documents[1]: content: required when op is 'upsert'")
    assert (
        await read_topic(settings.kafka_bootstrap, settings.documents_topic, expected=1, within=1.0)
        == []
    )


async def test_malformed_json(make_client: ClientFactory) -> None:
    client = await make_client()
    response = await client.put(
        "/v1/ingest/acme/documents/k",
        content=b'{"content": ',
        headers={"content-type": "application/json"},
    )
    assert "not JSON" in _error(response, 400, "malformed_json")
    response = await client.put("/v1/ingest/acme/documents/k", json=["not", "an", "object"])
    assert "JSON object" in _error(response, 422, "invalid_document")


async def test_missing_content_and_bad_fields(make_client: ClientFactory) -> None:
    client = await make_client()
    response = await client.put("/v1/ingest/acme/documents/k", json={"title": "no content"})
    assert _error(response, 422, "invalid_document") == "content: required when op is 'upsert'"
    # the service computes content_hash: only what the caller sent wrong is named
    response = await client.put("/v1/ingest/acme/documents/k", json={"content": 5})
    assert _error(response, 422, "invalid_document") == "content: Input should be a valid string"
    response = await client.put("/v1/ingest/acme/documents/k", json={"content": "x", "space": "*"})
    assert "space" in _error(response, 422, "invalid_document")
    response = await client.put(
        "/v1/ingest/acme/documents/k", json={"content": "x", "content_hash": "sha256:" + "0" * 64}
    )
    assert "does not match" in _error(response, 422, "invalid_document")
    response = await client.put(
        "/v1/ingest/acme/documents/k", json={"content": "x", "realm": "other"}
    )
    assert "conflicts with the request path" in _error(response, 422, "invalid_document")


async def test_bad_realm(make_client: ClientFactory) -> None:
    client = await make_client()
    response = await client.put("/v1/ingest/Not-A-Realm/documents/k", json={"content": "x"})
    assert "invalid realm name" in _error(response, 422, "invalid_realm")


async def test_oversize_body_and_document(make_client: ClientFactory) -> None:
    client = await make_client(max_document_bytes=2048)
    big = await client.put("/v1/ingest/acme/documents/big", json={"content": "x" * 200_000})
    assert "over" in _error(big, 413, "too_large")
    # Under the body allowance but over the document limit once encoded.
    near = await client.put("/v1/ingest/acme/documents/near", json={"content": "x" * 4000})
    message = _error(near, 413, "too_large")
    assert "'near'" in message and "bytes encoded" in message
    batch = await client.post(
        "/v1/ingest/acme/documents:batch",
        json={
            "documents": [{"doc_key": "a", "content": "x"}, {"doc_key": "b", "content": "y" * 4000}]
        },
    )
    assert _error(batch, 413, "too_large").startswith("documents[1]:")


async def test_keys(make_client: ClientFactory) -> None:
    client = await make_client(keys="k-acme=acme,beta; k-all=*", client_host="10.1.2.3")
    put = "/v1/ingest/acme/documents/k"
    assert "missing" in _error(await client.put(put, json={"content": "x"}), 401, "unauthorized")
    wrong = await client.put(put, json={"content": "x"}, headers={"Authorization": "Bearer nope"})
    assert wrong.headers["www-authenticate"] == "Bearer"
    _error(wrong, 401, "unauthorized")
    other = await client.put(
        "/v1/ingest/gamma/documents/k",
        json={"content": "x"},
        headers={"Authorization": "Bearer k-acme"},
    )
    assert "'gamma'" in _error(other, 403, "forbidden")
    ok = await client.put(put, json={"content": "x"}, headers={"Authorization": "Bearer k-acme"})
    assert ok.status_code == 202, ok.text
    star = await client.put(
        "/v1/ingest/gamma/documents/k",
        json={"content": "x"},
        headers={"Authorization": "Bearer k-all"},
    )
    assert star.status_code == 202, star.text


async def test_no_keys_means_loopback_only(make_client: ClientFactory) -> None:
    remote = await make_client(client_host="192.0.2.10")
    response = await remote.put("/v1/ingest/acme/documents/k", json={"content": "x"})
    assert "loopback" in _error(response, 403, "forbidden")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _forward(target_host: str, target_port: int, port: int) -> asyncio.Server:
    """A TCP forwarder standing in for a broker coming back on ``port``."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(target_host, target_port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(handle, "127.0.0.1", port)


async def test_kafka_unreachable_is_503_then_success_once_back(
    make_client: ClientFactory, settings: Settings
) -> None:
    port = _free_port()
    client = await make_client(bootstrap=f"127.0.0.1:{port}")
    down = await client.put("/v1/ingest/acme/documents/k", json={"content": "while down"})
    assert "unreachable" in _error(down, 503, "kafka_unavailable")
    assert down.headers["retry-after"] == "5"

    host, _, real_port = settings.kafka_bootstrap.rpartition(":")
    server = await _forward(host, int(real_port), port)
    try:
        up = await client.put("/v1/ingest/acme/documents/k", json={"content": "once back"})
        assert up.status_code == 202, up.text
    finally:
        server.close()
    record = await _record_at(
        settings.kafka_bootstrap,
        settings.documents_topic,
        up.json()["partition"],
        up.json()["offset"],
    )
    assert validated(record).content == "once back"


async def test_connect_http_command_serves(settings: Settings) -> None:
    port = _free_port()
    env = {**os.environ, "TIDEGRAPH_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    env.pop("TIDEGRAPH_API_KEYS", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegraph.infra.cli", "connect", "http", "--port", str(port),
        "--topic-prefix", settings.topic_prefix,
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(100):
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            response = await client.put("/v1/ingest/acme/documents/cli.md", json={"content": "x"})
            assert response.status_code == 202, response.text
            spec = (await client.get("/openapi.json")).json()
            assert "/v1/ingest/{realm}/documents:batch" in spec["paths"]
            assert spec["info"]["version"] == VERSION
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status shows it.
    assert proc.returncode in (0, -signal.SIGTERM)
    assert b"Finished server process" in err


async def test_connect_http_refuses_public_address_without_keys(settings: Settings) -> None:
    env = {**os.environ, "TIDEGRAPH_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    env.pop("TIDEGRAPH_API_KEYS", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegraph.infra.cli", "connect", "http", "--host", "0.0.0.0",
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2 and b"without API keys" in err


async def test_facts_are_accepted_with_or_without_content(
    make_client: ClientFactory, settings: Settings
) -> None:
    facts = {
        "entities": [{"name": "Ada Quill", "type": "Person"}],
        "relations": [{"subject": "Ada Quill", "predicate": "works_at", "object": "Wrenfield",
                       "valid_from": "2019"}],
    }  # fmt: skip
    client = await make_client()
    alone = await client.put("/v1/ingest/acme/documents/people/1", json={"facts": facts})
    assert alone.status_code == 202, alone.text
    batch = await client.post(
        "/v1/ingest/acme/documents:batch",
        json={"documents": [{"doc_key": "people/2", "content": "Prose.", "facts": facts}]},
    )
    assert batch.status_code == 202, batch.text
    bad = await client.put(
        "/v1/ingest/acme/documents/people/3", json={"facts": {"entities": [{"type": "X"}]}}
    )
    assert "facts.entities.0.name" in _error(bad, 422, "invalid_document")
    docs = [
        validated(r)
        for r in await read_topic(settings.kafka_bootstrap, settings.documents_topic, expected=2)
    ]
    rendered = "Ada Quill (Person).\nAda Quill works at Wrenfield (from 2019)."
    assert [(d.doc_key, d.content) for d in docs] == [
        ("people/1", rendered),
        ("people/2", "Prose."),
    ]
    assert all(d.hash_matches() and d.facts is not None for d in docs)
    assert docs[0].facts == docs[1].facts and docs[0].facts is not None
    assert docs[0].facts.relations[0].valid_from == "2019"
