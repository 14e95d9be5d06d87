"""HTTP ingest: documents PUT, DELETEd or POSTed in batches become document versions.

    PUT    /v1/ingest/{realm}/documents/{doc_key}      {content, title?, metadata?, facts?, …}
    DELETE /v1/ingest/{realm}/documents/{doc_key}      ?space=S&source_version=V
    POST   /v1/ingest/{realm}/documents:batch          {"documents": [{doc_key, op?, …}]}

A 202 carries the partition and offset and is sent only after Kafka acknowledged the record:
a 2xx never stands for a document that is not durably on the topic. Errors use the
contract's body ``{"error": {"code", "message"}}``: 400 malformed JSON, 401/403 keys,
413 over the size limit, 422 invalid document, 503 when Kafka does not acknowledge within
the send timeout (the producer reconnects on the next request). Slow or oversized request
heads and bodies (408/414/431) are refused by the server in front
(``tidegraph.infra.http_server``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from tidegraph.connectors.config import ConnectorSettings
from tidegraph.connectors.errors import DeliveryError, DocumentTooLargeError
from tidegraph.connectors.producer import Delivery, DocumentProducer, encode
from tidegraph.schemas import (
    DEFAULT_SPACE,
    DOCUMENT_SCHEMA,
    VERSION,
    ApiKeys,
    DocumentVersion,
    ErrorResponse,
    InvalidNameError,
    RecordValidationError,
    bearer_token,
    content_hash,
    is_loopback,
    validate_realm,
    with_facts_passage,
)

SOURCE = "http"
BODY_OVERHEAD = 64 * 1024
"""Allowance for the JSON around a document's content in a request body."""
PATH_FIELDS = ("realm", "doc_key", "op")

DOCUMENT_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "anyOf": [{"required": ["content"]}, {"required": ["facts"]}],
    "properties": {
        "content": {
            "type": "string",
            "description": "Full text; without it, the rendered passage of `facts`.",
        },
        "facts": {
            "type": "object",
            "description": 'Entities and relations the source states (CONTRACT "Extraction'
            ' output" shape): indexed without an extractor, through the validation gates.',
        },
        "title": {"type": "string"},
        "metadata": {"type": "object"},
        "order_key": {"type": "string"},
        "source_version": {"type": "string"},
        "space": {"type": "string", "default": DEFAULT_SPACE},
        "event_time": {"type": "string", "format": "date-time"},
    },
}
BATCH_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["documents"],
    "properties": {
        "documents": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["doc_key"],
                "properties": {
                    "doc_key": {"type": "string"},
                    "op": {"enum": ["upsert", "delete"], "default": "upsert"},
                    **DOCUMENT_BODY_SCHEMA["properties"],
                },
            },
        }
    },
}


class Accepted(BaseModel):
    """A document version Kafka acknowledged, and where it landed."""

    realm: str
    space: str
    doc_key: str
    op: Literal["upsert", "delete"]
    partition: int
    offset: int


class BatchAccepted(BaseModel):
    """Every document of a batch, acknowledged, in request order."""

    results: list[Accepted]


class Health(BaseModel):
    status: Literal["ok"]


_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorResponse, "description": d}
    for s, d in {
        400: "A request body that is not JSON.",
        401: "No key or an unknown key.",
        403: "The key may not write to this realm (or no keys and a remote caller).",
        404: "No such route (a path no route matches, such as a doc_key with a line break).",
        413: "Over the document, request or batch size limit.",
        422: "An invalid realm, document or batch item, naming the field.",
        503: "Kafka did not acknowledge in time; retry after the Retry-After seconds.",
    }.items()
}


class IngestError(Exception):
    """An HTTP answer other than 202, in the contract's error shape."""

    def __init__(self, status: int, code: str, message: str, **headers: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_response(status: int, code: str, message: str, headers: dict[str, str]) -> Response:
    body = orjson.dumps({"error": {"code": code, "message": message}})
    return Response(body, status_code=status, media_type="application/json", headers=headers)


class IngestService:
    """The producer behind the endpoints: started on first use, restarted after a failure."""

    def __init__(self, producer: DocumentProducer, settings: ConnectorSettings) -> None:
        self.producer = producer
        self.settings = settings
        self._lock = asyncio.Lock()

    async def _ready(self) -> None:
        if self.producer.started:
            return
        async with self._lock:
            if not self.producer.started:
                try:
                    await self.producer.start(connect_timeout=self.settings.send_timeout)
                except DeliveryError as exc:
                    raise _unavailable(exc) from exc

    async def publish(self, docs: list[DocumentVersion]) -> list[Delivery]:
        """Send ``docs`` in order; return once every one is acknowledged (or raise 503)."""
        await self._ready()
        try:
            async with asyncio.timeout(self.settings.send_timeout):
                futures = [await self.producer.submit(doc) for doc in docs]
                return list(await asyncio.gather(*futures))
        except TimeoutError:
            raise IngestError(
                503,
                "kafka_unavailable",
                f"Kafka did not acknowledge within {self.settings.send_timeout:g}s; "
                "the document may not be stored, retry later",
                **{"Retry-After": "5"},
            ) from None
        except DeliveryError as exc:
            raise _unavailable(exc) from exc

    async def aclose(self) -> None:
        await self.producer.stop()


def _unavailable(exc: DeliveryError) -> IngestError:
    return IngestError(503, "kafka_unavailable", str(exc), **{"Retry-After": "5"})


def _authorize(request: Request, realm: str, keys: ApiKeys) -> None:
    if not keys.enabled:
        if not is_loopback(request.client.host if request.client else None):
            raise IngestError(403, "forbidden", "no API keys configured: loopback clients only")
        return
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        raise IngestError(
            401, "unauthorized", "missing bearer key", **{"WWW-Authenticate": "Bearer"}
        )
    grant = keys.grant_of(token)
    if grant is None:
        raise IngestError(401, "unauthorized", "unknown API key", **{"WWW-Authenticate": "Bearer"})
    if not grant.allows(realm):
        raise IngestError(403, "forbidden", f"this key may not write to realm {realm!r}")


def _realm(realm: str) -> str:
    try:
        return validate_realm(realm)
    except InvalidNameError as exc:
        raise IngestError(422, "invalid_realm", str(exc)) from None


async def _read_json(request: Request, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise IngestError(413, "too_large", f"request body of {declared} bytes is over {limit}")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise IngestError(413, "too_large", f"request body is over {limit} bytes")
    except ClientDisconnect:  # gone, or cut off by the server's read bound: nobody to answer
        raise IngestError(400, "incomplete_body", "the client left before its body ended") from None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise IngestError(400, "malformed_json", f"request body is not JSON: {exc}") from None


def _document(realm: str, doc_key: str, op: str, fields: dict[str, Any]) -> DocumentVersion:
    """Build and check one document version; 422 naming the field, 413 when too large."""
    for name in PATH_FIELDS:
        if name in fields and fields[name] != {"realm": realm, "doc_key": doc_key, "op": op}[name]:
            raise IngestError(422, "invalid_document", f"{name}: conflicts with the request path")
    obj = {
        **fields,
        "schema": DOCUMENT_SCHEMA,
        "realm": realm,
        "doc_key": doc_key,
        "op": op,
        "source": fields.get("source", SOURCE),
        "event_time": fields.get("event_time", datetime.now(UTC)),
    }
    if op == "upsert":
        obj = with_facts_passage(obj)
    if op == "upsert" and isinstance(obj.get("content"), str):
        computed = content_hash(obj["content"])
        if obj.setdefault("content_hash", computed) != computed:
            raise IngestError(422, "invalid_document", "content_hash: does not match the content")
    try:
        return DocumentVersion.from_dict(obj)
    except RecordValidationError as exc:
        # The service computes content_hash: its absence is never the caller's mistake.
        problems = [
            p for p in exc.problems if p.field != "content_hash" or "content_hash" in fields
        ]
        detail = "; ".join(f"{p.field}: {p.rule}" for p in problems or exc.problems)
        raise IngestError(422, "invalid_document", detail) from None


def _check_size(doc: DocumentVersion, limit: int) -> None:
    try:
        encode(doc, limit)
    except DocumentTooLargeError as exc:
        raise IngestError(413, "too_large", str(exc)) from None


def _accepted(doc: DocumentVersion, delivery: Delivery) -> Accepted:
    return Accepted(
        realm=doc.realm,
        space=doc.space,
        doc_key=doc.doc_key,
        op=doc.op,
        partition=delivery.partition,
        offset=delivery.offset,
    )


def create_app(
    service: IngestService, keys: ApiKeys, *, max_batch_documents: int = 10_000
) -> FastAPI:
    """The ingest application; ``service`` owns the producer, closed on shutdown."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await service.aclose()

    app = FastAPI(
        title="tidegraph ingest",
        version=VERSION,
        summary="Documents in, document versions on Kafka out.",
        lifespan=lifespan,
    )
    _install_error_handlers(app)

    @app.get("/healthz")
    async def healthz() -> Health:
        return Health(status="ok")

    app.include_router(_documents_router(service, keys, max_batch_documents))
    return app


def _install_error_handlers(app: FastAPI) -> None:
    """Every error answers in the contract's ``{"error": {code, message}}`` shape."""

    @app.exception_handler(IngestError)
    async def _ingest_error(_: Request, exc: IngestError) -> Response:
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> Response:
        return error_response(422, "invalid_request", str(exc.errors()), {})


def _documents_router(service: IngestService, keys: ApiKeys, max_batch_documents: int) -> APIRouter:
    limit = service.settings.max_document_bytes
    batch_limit = service.settings.max_batch_bytes
    api = APIRouter()

    @api.put(
        "/v1/ingest/{realm}/documents/{doc_key:path}",
        status_code=202,
        responses=_ERRORS,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": DOCUMENT_BODY_SCHEMA}},
            }
        },
    )
    async def put_document(realm: str, doc_key: str, request: Request) -> Accepted:
        """Upsert one document; 202 once Kafka acknowledged it."""
        _authorize(request, realm, keys)
        realm = _realm(realm)
        body = await _read_json(request, limit + BODY_OVERHEAD)
        if not isinstance(body, dict):
            raise IngestError(422, "invalid_document", "$: request body must be a JSON object")
        doc = _document(realm, doc_key, "upsert", body)
        _check_size(doc, limit)
        [delivery] = await service.publish([doc])
        return _accepted(doc, delivery)

    @api.delete("/v1/ingest/{realm}/documents/{doc_key:path}", status_code=202, responses=_ERRORS)
    async def delete_document(
        realm: str,
        doc_key: str,
        request: Request,
        space: str = DEFAULT_SPACE,
        source_version: str | None = None,
    ) -> Accepted:
        """Delete one document; 202 once Kafka acknowledged the delete."""
        _authorize(request, realm, keys)
        realm = _realm(realm)
        fields: dict[str, Any] = {"space": space}
        if source_version is not None:
            fields["source_version"] = source_version
        doc = _document(realm, doc_key, "delete", fields)
        [delivery] = await service.publish([doc])
        return _accepted(doc, delivery)

    @api.post(
        "/v1/ingest/{realm}/documents:batch",
        status_code=202,
        responses=_ERRORS,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": BATCH_BODY_SCHEMA}},
            }
        },
    )
    async def post_batch(realm: str, request: Request) -> BatchAccepted:
        """Many upserts and deletes, all checked before any is sent; kept in order."""
        _authorize(request, realm, keys)
        realm = _realm(realm)
        body = await _read_json(request, batch_limit)
        docs = _batch(realm, body, limit, max_batch_documents)
        deliveries = await service.publish(docs)
        return BatchAccepted(
            results=[_accepted(d, r) for d, r in zip(docs, deliveries, strict=True)]
        )

    return api


def _batch(realm: str, body: Any, limit: int, max_documents: int) -> list[DocumentVersion]:
    """Every item of a batch body as a document version, or the first item's error."""
    items = body.get("documents") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise IngestError(422, "invalid_document", "documents: must be a list")
    if len(items) > max_documents:
        raise IngestError(413, "too_large", f"{len(items)} documents, at most {max_documents}")
    docs = []
    for index, item in enumerate(items):
        try:
            docs.append(_batch_item(realm, item, limit))
        except IngestError as exc:
            exc.message = f"documents[{index}]: {exc.message}"
            raise
    return docs


def _batch_item(realm: str, item: Any, limit: int) -> DocumentVersion:
    if not isinstance(item, dict):
        raise IngestError(422, "invalid_document", "must be a JSON object")
    fields = dict(item)
    doc_key = fields.pop("doc_key", None)
    op = fields.pop("op", "upsert")
    if not isinstance(doc_key, str):
        raise IngestError(422, "invalid_document", "doc_key: required string")
    if op not in ("upsert", "delete"):
        raise IngestError(422, "invalid_document", "op: must be 'upsert' or 'delete'")
    doc = _document(realm, doc_key, op, fields)
    _check_size(doc, limit)
    return doc
