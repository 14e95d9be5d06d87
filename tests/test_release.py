"""The files a release carries, and the one version every reader takes.

Both distributions declare Apache-2.0 and carry its text; the version is written once
(``schemas/tidegraph/schemas/_version.py``) and both projects build their metadata from
it; the CLI, the installed metadata, the changelog's latest release and the services' pin
on the client's release all say the same. (The OpenAPI ``info.version`` of both HTTP
services is checked where they are served: test_query_api, test_connector_http and, in
the installed form, test_wheels.)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from tidegraph.schemas import VERSION

REPO = Path(__file__).resolve().parents[1]
PROJECTS = {"tidegraph": REPO, "tidegraph-client": REPO / "client"}
APACHE_SECTIONS = [
    "Definitions.",
    "Grant of Copyright License.",
    "Grant of Patent License.",
    "Redistribution.",
    "Submission of Contributions.",
    "Trademarks.",
    "Disclaimer of Warranty.",
    "Limitation of Liability.",
    "Accepting Warranty or Additional Liability.",
]


def _project(folder: Path) -> dict[str, Any]:
    return tomllib.loads((folder / "pyproject.toml").read_text())


def test_each_distribution_declares_apache_2_and_carries_its_full_text() -> None:
    text = (REPO / "LICENSE").read_text()
    words = text.split()
    assert " ".join(words[:6]) == "Apache License Version 2.0, January 2004"
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    found = re.findall(r"^\s+(\d)\. ([A-Z][^.\n]*\.)", text, flags=re.MULTILINE)
    assert found == [(str(n), title) for n, title in enumerate(APACHE_SECTIONS, 1)]
    assert "END OF TERMS AND CONDITIONS" in text
    assert "APPENDIX: How to apply the Apache License to your work." in text
    assert len(words) > 1500  # the whole text, not a notice pointing at it
    for name, folder in PROJECTS.items():
        project = _project(folder)["project"]
        assert project["name"] == name
        assert project["license"] == "Apache-2.0", name
        assert project["license-files"] == ["LICENSE"], name
        # client/ is built on its own (its own project root), so it keeps the same file
        assert (folder / "LICENSE").read_text() == text, f"{folder}/LICENSE differs"


def test_both_projects_take_the_version_from_one_file() -> None:
    source = REPO / "schemas" / "tidegraph" / "schemas" / "_version.py"
    written = re.findall(r'^__version__ = "([^"]+)"$', source.read_text(), flags=re.MULTILINE)
    assert written == [VERSION]
    for folder in PROJECTS.values():
        config = _project(folder)
        assert "version" not in config["project"]
        assert config["project"]["dynamic"] == ["version"]
        assert (folder / config["tool"]["hatch"]["version"]["path"]).resolve() == source


def test_the_services_depend_on_the_client_release_of_the_same_version() -> None:
    pins = [
        Requirement(text)
        for text in _project(REPO)["project"]["dependencies"]
        if Requirement(text).name == "tidegraph-client"
    ]
    assert [str(p.specifier) for p in pins] == [f"=={VERSION}"]


def test_installed_metadata_and_the_command_say_the_version() -> None:
    for name in PROJECTS:
        assert metadata.version(name) == VERSION, f"{name}: run scripts/bootstrap"
    done = subprocess.run(
        [sys.executable, "-m", "tidegraph.infra.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == f"tidegraph {VERSION}"


def test_the_changelog_starts_with_this_release() -> None:
    headings = re.findall(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings and headings[0] == VERSION, headings[:1]
