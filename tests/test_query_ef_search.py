"""The HNSW candidate list each search uses: a hashing realm's relations search wider (their
near-orthogonal vectors lose recall in the sparse relation graph), a model's realm keeps
the configured widths."""

from __future__ import annotations

from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.retrieval import RetrievalLimits


def test_a_hashing_realm_searches_relations_wider() -> None:
    limits = RetrievalLimits(ef_search=(100, 400, 64), ef_search_hashing_relations=1000)
    assert limits.ef_search_for("hashing:384") == (100, 1000, 64)
    assert limits.ef_search_for("llm:text-embedding-3-small:1536") == (100, 400, 64)
    # never narrower than the configured relation list
    wide = RetrievalLimits(ef_search=(100, 800, 64), ef_search_hashing_relations=500)
    assert wide.ef_search_for("hashing:64") == (100, 800, 64)


def test_the_defaults_come_from_the_settings() -> None:
    settings = QuerySettings()
    assert RetrievalLimits().ef_search == (
        settings.ef_search,
        settings.ef_search_relations,
        settings.ef_search_chunks,
    )
    assert RetrievalLimits().ef_search_hashing_relations == settings.ef_search_hashing_relations
