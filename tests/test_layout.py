"""The packages depend in one direction, and none reaches into another's private modules.

schemas ← store ← connectors, indexer, query_service ← infra (the CLI wires them). A
reader can then tell from the folders where a record is decided (indexer/decide),
prepared (indexer/extraction), written (indexer/write), replayed (indexer/replay) and
served (query_service).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALLOWED = {
    "schemas": {"schemas"},
    "store": {"schemas", "store"},
    "connectors": {"schemas", "store", "connectors"},
    "indexer": {"schemas", "store", "indexer"},
    "query_service": {"schemas", "store", "query_service"},
    "infra": {"schemas", "store", "connectors", "indexer", "query_service", "infra"},
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


def test_the_indexer_shows_its_architecture_in_folders() -> None:
    root = REPO / "indexer" / "tidegraph" / "indexer"
    folders = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert {"consumer", "decide", "extraction", "write", "replay", "graph", "models"} <= folders
    assert [p.name for p in root.glob("*.py")] == ["__init__.py"]
