"""The public surface of tidegraph.query_service is pinned, and so is its dependency rule:
it imports only tidegraph.schemas among tidegraph's packages."""

from __future__ import annotations

import ast
from pathlib import Path

import tidegraph.query_service

EXPECTED = [
    "MODES",
    "ChangePublisher",
    "ChangeSink",
    "ChatModel",
    "Deps",
    "EmbedderFactory",
    "KafkaChangeSink",
    "KeywordModel",
    "Keywords",
    "Prompt",
    "QueryEmbedder",
    "QueryServiceError",
    "QuerySettings",
    "RerankEndpoint",
    "RerankSettings",
    "Reranker",
    "RetrievalLimits",
    "RetrievalParams",
    "build_prompt",
    "create_app",
    "load_query_settings",
    "retrieve",
]


def test_exported_members() -> None:
    assert tidegraph.query_service.__all__ == EXPECTED
    for name in EXPECTED:
        assert getattr(tidegraph.query_service, name) is not None


def test_imports_only_schemas_among_tidegraph_packages() -> None:
    root = Path(tidegraph.query_service.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("tidegraph."):
                    assert name.startswith(
                        ("tidegraph.schemas", "tidegraph.store", "tidegraph.query_service")
                    ), f"{path.name} imports {name}"
