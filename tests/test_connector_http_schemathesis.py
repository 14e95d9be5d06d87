"""Property-based run of the HTTP ingest service's /openapi.json against a real broker: no
input yields a 5xx, and every answer (status, content type, body) is one the document
declares."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import schemathesis

from tidegraph.connectors.config import load_connector_settings
from tidegraph.connectors.http_ingest import IngestService, create_app
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.schemas.api_keys import ApiKeys

from connector_helpers import fresh_settings  # type: ignore[import-not-found]
from openapi_run import EXAMPLES, call_and_check
from thread_server import served

pytestmark = pytest.mark.kafka

REALM = "ix" + uuid.uuid4().hex[:10]


async def _build_app(bootstrap: str, stack: AsyncExitStack) -> Any:
    topics = await fresh_settings(bootstrap, "ix" + uuid.uuid4().hex[:10], partitions=1)
    connector = load_connector_settings(send_timeout=10.0)
    producer = DocumentProducer(
        topics.kafka_bootstrap,
        topics.documents_topic,
        max_document_bytes=connector.max_document_bytes,
    )
    await producer.start(connect_timeout=30)  # the first request does not wait for it
    service = IngestService(producer, connector)
    stack.push_async_callback(service.aclose)
    return create_app(service, ApiKeys.parse(None))


@pytest.fixture(scope="module")
def base_url(kafka_bootstrap: str) -> Iterator[str]:
    with served(functools.partial(_build_app, kafka_bootstrap)) as url:
        yield url


@pytest.fixture(scope="module")
def api_schema(base_url: str) -> Any:
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@EXAMPLES
def test_every_answer_is_declared_and_none_is_a_server_error(case: Any, base_url: str) -> None:
    call_and_check(case, base_url, REALM)
