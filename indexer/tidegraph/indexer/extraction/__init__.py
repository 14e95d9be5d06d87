"""Preparation: a document version turned into chunks, gated structure and embeddings.

The model-backed extractor (``extraction.llm``) and its prompts stay out, so that importing
the package does not load the model client.
"""

from tidegraph.indexer.extraction.ahead import PrepareAhead
from tidegraph.indexer.extraction.cache import PgExtractionCache
from tidegraph.indexer.extraction.chunking import DEFAULT_BUDGET, chunk_document
from tidegraph.indexer.extraction.contradiction_prompt import PROMPT_VERSION, answer_key
from tidegraph.indexer.extraction.interfaces import (
    Chunk,
    DocumentContext,
    Embedder,
    ExtractionFailed,
    Extractor,
)
from tidegraph.indexer.extraction.pipeline import Pipeline, PipelineConfig
from tidegraph.indexer.extraction.prepared import (
    EntityFact,
    PreparedChunk,
    PreparedDocument,
    RelationFact,
)
from tidegraph.indexer.extraction.rules import RulesExtractor

__all__ = [
    "DEFAULT_BUDGET",
    "PROMPT_VERSION",
    "Chunk",
    "DocumentContext",
    "Embedder",
    "EntityFact",
    "ExtractionFailed",
    "Extractor",
    "PgExtractionCache",
    "Pipeline",
    "PipelineConfig",
    "PrepareAhead",
    "PreparedChunk",
    "PreparedDocument",
    "RelationFact",
    "RulesExtractor",
    "answer_key",
    "chunk_document",
]
