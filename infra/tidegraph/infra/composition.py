"""The composition root: which extractor and embedder a realm gets.

A realm's pinned ids decide (DESIGN invariant 10): ``hashing:<dim>`` is the offline
embedder, ``llm:<model>:<dim>`` an OpenAI-compatible endpoint; ``rules`` the offline
extractor, ``llm`` the model-backed one behind the realm's extraction cache. A realm pinned
to a model with no endpoint configured fails loudly; it never falls back to offline. A
realm with ``contradiction_model`` gets the model as the judge of its residue questions,
behind the caches a replay reads through; with no endpoint it has none, and its first
question stops the realm with a configuration error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.extraction import Embedder, Extractor, PgExtractionCache, RulesExtractor
from tidegraph.indexer.models import HashingEmbedder
from tidegraph.indexer.write import CachedJudge, Judge
from tidegraph.schemas import ConfigError, parse_embedder
from tidegraph.store import RealmInfo


@dataclass
class ModelRegistry:
    """Builds and caches one extractor and one embedder per realm schema."""

    pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
    """Where the extraction cache lives (needed for model-backed extraction)."""
    llm: Any = None
    """An ``LLMClient`` when a model endpoint is configured, else ``None``."""
    gleaning: int = 1
    """Gleaning passes of the model extractor."""
    read_through: tuple[str, ...] = ()
    """Extra cache schemas to read (a replay shadow reads the live realm's cache)."""
    _judges: dict[str, Judge] = field(default_factory=dict)
    _embedders: dict[tuple[str, str], Embedder] = field(default_factory=dict)
    _extractors: dict[tuple[str, str], Extractor] = field(default_factory=dict)
    # Keyed by schema *and* pinned id: a replay may swap in a realm with another embedder
    # or extractor under the same schema name, and the cached instance must not outlive it.

    def embedder_for(self, info: RealmInfo) -> Embedder:
        embedder = self._embedders.get((info.schema, info.embedder))
        if embedder is None:
            spec = parse_embedder(info.embedder)
            if spec.kind == "hashing":
                embedder = HashingEmbedder(spec.dimension)
            else:
                if self.llm is None:
                    raise ConfigError(
                        f"realm {info.realm!r} is pinned to embedder {info.embedder!r} but no "
                        "model endpoint is configured (set TIDEGRAPH_LLM_BASE_URL)"
                    )
                from tidegraph.indexer.models.embedder import LLMEmbedder

                assert spec.model is not None
                embedder = LLMEmbedder(
                    self.llm, dimension=spec.dimension, realm=info.realm, model=spec.model
                )
            self._embedders[(info.schema, info.embedder)] = embedder
        return embedder

    def extractor_for(self, info: RealmInfo) -> Extractor:
        extractor = self._extractors.get((info.schema, info.extractor))
        if extractor is None:
            if info.extractor == "rules" or info.extractor.startswith("rules:"):
                extractor = RulesExtractor()
            else:
                if self.llm is None or self.pool is None:
                    raise ConfigError(
                        f"realm {info.realm!r} uses the model extractor but no model endpoint "
                        "is configured (set TIDEGRAPH_LLM_BASE_URL and TIDEGRAPH_LLM_MODEL)"
                    )
                from tidegraph.indexer.extraction.llm import CachingExtractor, LLMExtractor

                inner = LLMExtractor(self.llm, realm=info.realm, gleaning=self.gleaning)
                cache = PgExtractionCache(self.pool, info.schema, self.read_through)
                extractor = CachingExtractor(inner, cache)
            self._extractors[(info.schema, info.extractor)] = extractor
        return extractor

    def judge_for(self, info: RealmInfo) -> Judge | None:
        """The model, asked about a realm's residue (``None``: no endpoint configured)."""
        if self.llm is None or not info.config.contradiction_model:
            return None
        judge = self._judges.get(info.schema)
        if judge is None:
            from tidegraph.indexer.extraction.judge import LLMJudge

            inner = LLMJudge(self.llm, realm=info.realm)
            if self.pool is not None and self.read_through:
                judge = CachedJudge(inner, self.pool, self.read_through)
            else:
                judge = inner
            self._judges[info.schema] = judge
        return judge
