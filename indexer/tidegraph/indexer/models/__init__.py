"""Model endpoints: the OpenAI-compatible client, its errors and metrics, and the embedders.

The client (``models.client``) and the embedder over it (``models.embedder``) stay out, so
that importing the package does not load ``openai``.
"""

from tidegraph.indexer.models.errors import (
    EmbeddingDimensionMismatch,
    LLMBadOutput,
    LLMEndpointMisconfigured,
    LLMError,
    LLMRequestRejected,
    LLMUnavailable,
)
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.indexer.models.metrics import ModelMetrics, model_metrics
from tidegraph.indexer.models.slots import call_priority

__all__ = [
    "EmbeddingDimensionMismatch",
    "HashingEmbedder",
    "LLMBadOutput",
    "LLMEndpointMisconfigured",
    "LLMError",
    "LLMRequestRejected",
    "LLMUnavailable",
    "ModelMetrics",
    "call_priority",
    "model_metrics",
]
