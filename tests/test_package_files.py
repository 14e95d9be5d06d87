"""Files the commands read ship inside the packages and are found through them: no module
looks anything up relative to its own source file (in an installed wheel, what lies
beside the package is site-packages, not the repository), and a missing one is a clear
error naming it, not a silent empty result."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tidegraph.infra.errors import PackageDataError
from tidegraph.infra.local_connect import PLUGINS
from tidegraph.infra.package_files import connect_file, kafka_file, packaged, sample_corpus
from tidegraph.schemas.jsonschema_export import SCHEMA_FILES, load

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("schemas", "store", "connectors", "indexer", "query_service", "infra", "client")


def test_no_package_module_finds_files_through_its_own_path() -> None:
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for package in PACKAGES
        for path in sorted((REPO / package / "tidegraph" / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, ast.Name) and node.id == "__file__"
    ]
    assert found == [], "use importlib.resources (tidegraph.infra.package_files)"


def test_the_files_the_commands_read_are_in_the_package() -> None:
    assert sorted(p.name for p in sample_corpus().glob("*.md")) == [
        "babbage.md", "faraday.md", "herschel.md", "lovelace.md",
        "rivalry-1.md", "rivalry-2.md", "somerville.md",
    ]  # fmt: skip
    assert "<kafka.version>" in kafka_file("pom.xml").read_text()
    assert "class StdinArgs" in kafka_file("StdinArgs.java").read_text()
    for pom in [("worker",), *(("plugins", name) for name in PLUGINS)]:
        assert "<project" in connect_file(*pom, "pom.xml").read_text()
    for name, (schema_id, _) in SCHEMA_FILES.items():
        assert load(name)["$id"].endswith(f"/{schema_id}.json")


def test_a_missing_packaged_file_is_an_error_that_names_it() -> None:
    with pytest.raises(PackageDataError) as caught:
        packaged("kafka", "absent.xml")
    assert "kafka/absent.xml is missing from the installed package" in str(caught.value)
    assert str(caught.value).endswith("reinstall tidegraph")
    with pytest.raises(KeyError, match="no schema file 'absent.json'"):
        load("absent.json")
