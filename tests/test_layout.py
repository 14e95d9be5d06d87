"""The packages depend in one direction, and none reaches into another's private modules.

schemas ← store ← connectors, indexer, query_service ← infra (the CLI wires them); the
client needs only schemas, so it installs without the server's dependencies. A
reader can then tell from the folders where a record is decided (indexer/decide),
prepared (indexer/extraction), written (indexer/write), replayed (indexer/replay) and
served (query_service).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALLOWED = {
    "schemas": {"schemas"},
    "store": {"schemas", "store"},
    "connectors": {"schemas", "store", "connectors"},
    "indexer": {"schemas", "store", "indexer"},
    "query_service": {"schemas", "store", "query_service"},
    "client": {"schemas", "client"},
    "infra": {"schemas", "store", "connectors", "indexer", "query_service", "client", "infra"},
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
    return [m for m in out if m.startswith("tidegraph.")]


def _modules() -> list[tuple[str, Path]]:
    return [
        (package, path)
        for package in ALLOWED
        for path in sorted((REPO / package / "tidegraph" / package).rglob("*.py"))
    ]


def test_packages_depend_in_one_direction() -> None:
    wrong = [
        f"{path.relative_to(REPO)} imports {module}"
        for package, path in _modules()
        for module in _imports(path)
        if module.split(".")[1] not in ALLOWED[package]
    ]
    assert wrong == []


def test_no_module_imports_another_packages_private_module() -> None:
    wrong = [
        f"{path.relative_to(REPO)} imports {module}"
        for package, path in _modules()
        for module in _imports(path)
        if module.split(".")[1] != package
        and any(part.startswith("_") for part in module.split(".")[2:])
    ]
    assert wrong == []


INDEXER_LAYERS = {
    "graph": 0,
    "decide": 1,
    "models": 1,
    "extraction": 2,
    "write": 3,
    "retention": 4,
    "communities": 4,
    "replay": 4,
    "consumer": 4,
}
"""The indexer's subpackages in layers: pure rules; deciding and the model clients;
preparing; writing; and the drivers and jobs over the write. A subpackage imports only
from layers below its own (none of its layer): no cycle, and each driver stands alone."""


def test_the_indexer_subpackages_depend_downwards_only() -> None:
    root = REPO / "indexer" / "tidegraph" / "indexer"
    folders = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert folders == set(INDEXER_LAYERS), "a new subpackage needs its layer"
    wrong = []
    for path in sorted(root.rglob("*.py")):
        own = path.relative_to(root).parts[0]
        for module in _imports(path):
            parts = module.split(".")
            if parts[1] != "indexer" or len(parts) < 3 or parts[2] == own:
                continue
            if INDEXER_LAYERS[parts[2]] >= INDEXER_LAYERS[own]:
                wrong.append(f"{path.relative_to(REPO)} imports {module}")
    assert wrong == []


def test_the_indexer_shows_its_architecture_in_folders() -> None:
    root = REPO / "indexer" / "tidegraph" / "indexer"
    folders = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert {"consumer", "decide", "extraction", "write", "replay", "graph", "models"} <= folders
    assert [p.name for p in root.glob("*.py")] == ["__init__.py"]


# What each package offers to the others, pinned: a name added or removed here is a
# decision about the package's interface, not a side effect of an edit.
PUBLIC = {
    "tidegraph.indexer.communities": {
        "BuildResult",
        "ClusterParams",
        "CommunityConfigError",
        "Hierarchy",
        "Report",
        "auto_build_loop",
        "build_communities",
        "detect",
        "leiden_available",
        "make_reports",
        "model_reporter",
        "offline_reporter",
        "partition",
        "read_snapshot",
        "resolve_method",
    },
    "tidegraph.indexer.consumer": {
        "Indexer",
        "IndexerConfig",
    },
    "tidegraph.indexer.decide": {
        "Action",
        "Decision",
        "DocState",
        "Logged",
        "Planner",
        "decide",
        "next_state",
    },
    "tidegraph.indexer.extraction": {
        "Chunk",
        "DEFAULT_BUDGET",
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
        "chunk_document",
    },
    "tidegraph.indexer.graph": {
        "Assertion",
        "Attributes",
        "Contribution",
        "Corroboration",
        "EntityRecord",
        "Gate",
        "GateConfig",
        "Resolution",
        "Vocabulary",
        "apply_gates",
        "corroborate",
        "derive_attributes",
        "desired_relation_states",
        "edge_key",
        "normalize_date",
        "normalize_period",
        "normalize_predicate",
        "orient",
        "pair_of",
        "render_entity",
        "render_relation",
        "resolve_chunk",
        "resolve_supersession",
        "valid_at",
    },
    "tidegraph.indexer.models": {
        "EmbeddingDimensionMismatch",
        "HashingEmbedder",
        "LLMBadOutput",
        "LLMEndpointMisconfigured",
        "LLMError",
        "LLMRequestRejected",
        "LLMUnavailable",
        "ModelMetrics",
        "model_metrics",
    },
    "tidegraph.indexer.replay": {
        "Difference",
        "ReplayBusy",
        "ReplayOptions",
        "ReplayProgress",
        "ReplayResult",
        "ShadowApplier",
        "ShadowExists",
        "diff_schemas",
        "format_difference",
        "rebuild_differences",
        "replay_realm",
    },
    "tidegraph.indexer.write": {
        "Backoff",
        "BatchSequencer",
        "BatchUnit",
        "LiveSequencer",
        "RecordFailed",
        "RecordUnit",
        "Sequencer",
        "Settlement",
        "Stamp",
        "UNKNOWN",
        "Verdict",
        "Version",
        "WriteResult",
        "apply_version",
        "verdict",
    },
    "tidegraph.store": {
        "AlreadySettled",
        "Claim",
        "EmbedderMismatch",
        "Fenced",
        "Hold",
        "Mark",
        "RealmInfo",
        "RealmSchemaError",
        "RealmSwapped",
        "StandbyFence",
        "classify_db_error",
        "create_realm",
        "ensure_control",
        "find_realm",
        "is_transient",
        "list_realms",
        "lock_realm_schema",
        "open_realm",
        "realm_exists",
    },
}


def test_each_package_re_exports_exactly_its_pinned_public_names() -> None:
    for name, expected in PUBLIC.items():
        package = importlib.import_module(name)
        assert set(package.__all__) == expected, name
        assert len(package.__all__) == len(expected), f"{name}: a name listed twice"
        missing = [n for n in expected if not hasattr(package, n)]
        assert not missing, f"{name} does not define {missing}"


def test_importing_the_packages_does_not_load_the_model_client() -> None:
    code = f"import sys; import {', '.join(PUBLIC)}; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
