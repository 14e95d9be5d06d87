"""The model-backed embedder: texts to unit vectors through an embeddings endpoint.

A realm pins its embedder id and dimension at creation (DESIGN invariant 10), because
vectors from two models live in unrelated geometries and comparing them is meaningless.
So every response is checked against the pinned dimension, a mismatch raises
:class:`EmbeddingDimensionMismatch` (permanent, loud), and any failure raises: there is no
fallback to the hashing embedder here (paper §3.5) — an outage surfaces as
``LLMUnavailable`` and pauses the partition.

Texts are sent in batches of ``batch_size``; batches run concurrently, bounded by the
client's in-flight limit. Vectors come back unit-normalised so that cosine similarity is an
inner product whatever the endpoint returns.

What is embedded for entities and relations (name and description; the rendered triple
with its negation and validity) is rendered by the indexer (``graph_rules.render_entity``
and ``render_relation``); this module only turns texts into vectors.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

from tidegraph.indexer.models.client import LLMClient
from tidegraph.indexer.models.errors import EmbeddingDimensionMismatch, LLMBadOutput
from tidegraph.indexer.models.metrics import ModelMetrics, model_metrics

__all__ = ["LLMEmbedder"]


class LLMEmbedder:
    """The :class:`~tidegraph.indexer.extraction.interfaces.Embedder` of an embeddings model."""

    def __init__(
        self,
        client: LLMClient,
        *,
        dimension: int,
        realm: str,
        model: str | None = None,
        batch_size: int = 64,
        request_dimensions: bool = False,
        metrics: ModelMetrics | None = None,
    ) -> None:
        """``request_dimensions`` sends ``dimensions=`` (models that can shorten vectors,
        e.g. OpenAI's text-embedding-3); off by default because other servers reject it."""
        if dimension < 1 or batch_size < 1:
            raise ValueError("dimension and batch_size must be positive")
        self._client = client
        self._dimension = dimension
        self.realm = realm
        self.model = model or client.settings.embed_model
        self.batch_size = batch_size
        self._request_dimensions = request_dimensions
        self._metrics = metrics if metrics is not None else model_metrics()

    @property
    def id(self) -> str:
        return f"llm:{self.model}:{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        batches = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        results = await asyncio.gather(*(self._embed_batch(batch) for batch in batches))
        return [vector for batch in results for vector in batch]

    async def _embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        result = await self._client.embed(
            texts,
            realm=self.realm,
            model=self.model,
            dimensions=self._dimension if self._request_dimensions else None,
        )
        return [self._checked(vector) for vector in result.vectors]

    def _checked(self, vector: list[float]) -> list[float]:
        if len(vector) != self._dimension:
            self._metrics.failure(self.realm, "embed", "dimension_mismatch")
            raise EmbeddingDimensionMismatch(
                self._client.embed_endpoint, self.model, expected=self._dimension, got=len(vector)
            )
        norm = math.sqrt(math.fsum(x * x for x in vector))
        if not math.isfinite(norm) or norm == 0.0:
            self._metrics.failure(self.realm, "embed", "bad_output")
            raise LLMBadOutput(
                self._client.embed_endpoint,
                "embed",
                self.model,
                reason="zero or non-finite vector (cannot be normalised)",
            )
        return [x / norm for x in vector]
