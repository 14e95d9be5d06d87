"""Query-service test helpers: documents with real chunk text, and the app over ASGI.

Chunks written here carry the text given and the embedding of that text (the same
``HashEmbedder`` the app embeds queries with), so a query equal to a chunk's text is its
exact nearest neighbour.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tidegraph.connectors.bulk import Input, read_inputs
from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.indexer.extraction.prepared import EntityFact, RelationFact
from tidegraph.indexer.extraction.rules import RulesExtractor
from tidegraph.indexer.write.writer import WriteResult
from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.query_service.embedding import QueryEmbedder
from tidegraph.query_service.rerank_endpoint import Reranker
from tidegraph.query_service.synthesis import ChatModel
from tidegraph.store.cluster import Cluster

from graph_helpers import GraphHarness, HashEmbedder

ChunkSpec = tuple[str, list[EntityFact], list[RelationFact]]


async def write_doc(
    graph: GraphHarness,
    doc_key: str,
    chunks: list[ChunkSpec],
    *,
    space: str = "default",
    order_key: str | None = None,
    content_hash: str = "sha256:" + "0" * 64,
) -> WriteResult:
    """Write one document version whose chunks have the given texts."""
    vectors = await graph.embedder.embed([text for text, _, _ in chunks])
    prepared = graph.prepared(
        doc_key,
        chunks,
        vectors,
        space=space,
        order_key=order_key,
        content_hash=content_hash,
        title=doc_key,
    )
    return await graph.write(space, doc_key, prepared)


def embedders(embedder: QueryEmbedder | None = None) -> Any:
    """The factory the app is given: always this embedder (default ``hashing:8``)."""
    chosen = embedder or HashEmbedder()
    return lambda realm, pinned: chosen


@asynccontextmanager
async def open_pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[AsyncConnection[Any]]]:
    pool = make_pool(dsn, min_size=1, max_size=4)
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()


@asynccontextmanager
async def api_client(
    pool: AsyncConnectionPool[AsyncConnection[Any]],
    *,
    api_keys: str | None = None,
    chat: ChatModel | None = None,
    embedder: QueryEmbedder | None = None,
    cluster: Cluster | None = None,
    reranker: Reranker | None = None,
    **settings: Any,
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to a fresh app over ASGI (no sockets)."""
    app = create_app(
        QuerySettings(api_keys=api_keys, **settings),
        Deps(
            pool=pool,
            embedders=embedders(embedder),
            chat=chat,
            cluster=cluster,
            reranker=reranker,
        ),
    )
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://tidegraph.test") as c:
            yield c
    finally:
        await app.state.database_gates.aclose()
        await app.state.database_gate.aclose()


async def query_data(client: httpx.AsyncClient, realm: str, **body: Any) -> dict[str, Any]:
    """POST query_data and return the JSON body, failing on any non-200."""
    response = await client.post(f"/v1/realms/{realm}/query_data", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def triples(result: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(r["subject"], r["predicate"], r["object"]) for r in result["relations"]}


async def index_corpus(graph: GraphHarness, folder: Path, *, space: str = "default") -> int:
    """Index every file of ``folder`` the way the indexer prepares and applies documents —
    the offline rules extractor and ``graph.embedder`` — in doc_key order, each document
    ordered after the previous one. Returns the number of documents written."""
    pipeline = Pipeline(lambda info: RulesExtractor(), lambda info: graph.embedder)
    docs = sorted(
        (
            item.doc
            for item in read_inputs([folder], graph.info.realm, space=space)
            if isinstance(item, Input)
        ),
        key=lambda d: d.doc_key,
    )
    for i, doc in enumerate(docs):
        prepared = await pipeline.prepare(
            doc.model_copy(update={"order_key": f"{i:06d}"}), graph.info
        )
        await graph.write(space, doc.doc_key, prepared)
    return len(docs)
