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


def test_imports_between_packages_go_through_their_public_surface() -> None:
    """``from tidegraph.store import open_realm``, never ``from tidegraph.store.realms …``
    in another package (an indexer subpackage counts as a package): what a package offers is
    then what its pinned ``__all__`` says. The rule and its few written exceptions live in
    the script that rewrites offending imports; here it must find none."""
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "public_imports"), "--check"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, "run scripts/public_imports:\n" + out.stdout + out.stderr


def test_the_indexer_shows_its_architecture_in_folders() -> None:
    root = REPO / "indexer" / "tidegraph" / "indexer"
    folders = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert {"consumer", "decide", "extraction", "write", "replay", "graph", "models"} <= folders
    assert [p.name for p in root.glob("*.py")] == ["__init__.py"]


# What each package offers to the others, pinned: a name added or removed here is a
# decision about the package's interface, not a side effect of an edit.
PUBLIC = {
    "tidegraph.connectors": {
        "CaptureSpec",
        "ConnectorSettings",
        "DeadLetters",
        "DebeziumSource",
        "DeliveryError",
        "DocumentProducer",
        "EventMapper",
        "FsConnector",
        "Input",
        "ORDER_SOURCES",
        "PostgresCdc",
        "Refusal",
        "SqlReferences",
        "SyncReport",
        "TEXT_GLOBS",
        "TopicsReport",
        "default_state_path",
        "ensure_topics",
        "load_connector_settings",
        "load_row_mapping",
        "publish_items",
        "publish_paths",
        "read_inputs",
        "topics_report",
    },
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
    "tidegraph.indexer.consumer": {"Indexer", "IndexerConfig", "make_pool"},
    "tidegraph.indexer.decide": {
        "Action",
        "Admitted",
        "Decision",
        "DocState",
        "Logged",
        "Message",
        "Planner",
        "Refused",
        "admit",
        "decide",
        "log_time",
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
        "PROMPT_VERSION",
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
    },
    "tidegraph.indexer.graph": {
        "Answer",
        "Assertion",
        "Attributes",
        "CONCEPT",
        "Contribution",
        "Corroboration",
        "EntityRecord",
        "GATE_HINTS",
        "Gate",
        "GateConfig",
        "Judge",
        "LiveRelation",
        "Mechanism",
        "Question",
        "Rejection",
        "RelationAttrs",
        "RelationState",
        "Resolution",
        "Vocabulary",
        "apply_gates",
        "corroborate",
        "derive_attributes",
        "desired_relation_states",
        "edge_key",
        "merge_entity",
        "merge_records",
        "merge_relation_attrs",
        "normalize_date",
        "normalize_period",
        "normalize_predicate",
        "orient",
        "pair_of",
        "period_bounds",
        "relation_questions",
        "render_entity",
        "render_relation",
        "resolve_chunk",
        "resolve_supersession",
        "short_forms",
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
        "call_priority",
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
        "drop_copy",
        "format_difference",
        "rebuild_differences",
        "replay_realm",
        "resolve_schema",
    },
    "tidegraph.indexer.retention": {"archive", "plan_retention", "unarchive"},
    "tidegraph.indexer.write": {
        "Backoff",
        "BatchSequencer",
        "BatchUnit",
        "CachedJudge",
        "Item",
        "Judge",
        "JudgeFor",
        "LiveSequencer",
        "Outcome",
        "RecordFailed",
        "RecordUnit",
        "Run",
        "RunWriter",
        "Sequencer",
        "Settlement",
        "Stamp",
        "UNKNOWN",
        "Verdict",
        "Version",
        "WriteResult",
        "apply_version",
        "as_record_failure",
        "ensure_vector_types",
        "fallback",
        "retry_after",
        "runs",
        "vec_param",
        "verdict",
    },
    "tidegraph.store": {
        "AlreadySettled",
        "Claim",
        "Cluster",
        "DOCUMENTS",
        "DatabaseUnavailable",
        "DroppedRealm",
        "ENTITIES",
        "EmbedderMismatch",
        "Fence",
        "Fenced",
        "Hold",
        "Mark",
        "NO_REALM",
        "PlacedElsewhere",
        "Placement",
        "RELATIONS",
        "RealmFigures",
        "RealmInfo",
        "RealmMove",
        "RealmSchemaError",
        "RealmSwapped",
        "ServerUnavailable",
        "StandbyFence",
        "add_telemetry",
        "alive",
        "belief",
        "check_embedder",
        "classify_db_error",
        "contradiction_answers_ddl",
        "control_exists",
        "create_realm",
        "drop_foreign_keys_ddl",
        "drop_realm",
        "ensure_control",
        "entities_view",
        "fence_after_read",
        "figures_everywhere",
        "find_placed",
        "find_realm",
        "foreign_keys_ddl",
        "has_replayed",
        "has_telemetry",
        "is_transient",
        "is_unstorable",
        "key_realm",
        "list_realms",
        "live",
        "lock_realm_schema",
        "open_realm",
        "place_realm",
        "placements",
        "read_fence",
        "realm_copies",
        "realm_exists",
        "realm_figures",
        "realm_head",
        "realm_problems",
        "realm_server",
        "rebuild_vector_index",
        "refusal",
        "relations_view",
        "replay_group",
        "replay_lag",
        "replay_lock_key",
        "schema_figures",
        "search_index_ddl",
        "set_coverage_telemetry",
        "switch_lock_key",
        "unregister",
        "vector_indexes_outdated",
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


FUNCTION_LINES = 80
MODULE_LINES = 500


def _says_why(docstring: str | None, comment: str) -> bool:
    return "on purpose" in (docstring or "") or comment.startswith("# Long on purpose:")


def _comment_above(lines: list[str], lineno: int) -> str:
    """The comment block ending right above line ``lineno`` (1-based), joined."""
    block: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        block.insert(0, lines[i].strip())
        i -= 1
    return " ".join(block)


PENDING: dict[str, str] = {}
"""Modules under way elsewhere: their reason or their split comes with that change."""


def test_long_functions_and_modules_say_why() -> None:
    """A product function over ~80 lines, or a module over ~500, carries its reason: "on
    purpose" in its docstring, or a ``# Long on purpose: …`` comment right above the
    ``def`` (above its decorators) or after the module docstring."""
    unexplained = []
    for _, path in _modules():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        first = tree.body[1].lineno if len(tree.body) > 1 else 1
        top_comments = " ".join(line for line in lines[: first - 1] if line.startswith("#"))
        if (
            len(lines) > MODULE_LINES
            and not _says_why(ast.get_docstring(tree), top_comments)
            and str(path.relative_to(REPO)) not in PENDING
        ):
            unexplained.append(f"{path.relative_to(REPO)}: {len(lines)} lines")
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - start + 1
            above = _comment_above(lines, start)
            if length > FUNCTION_LINES and not _says_why(ast.get_docstring(node), above):
                unexplained.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {length}")
    assert unexplained == []
