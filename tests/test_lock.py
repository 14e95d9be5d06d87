"""requirements.lock pins what is installed: every dependency of both distributions
(pyproject.toml, client/pyproject.toml), at the version this environment runs
(scripts/bootstrap installs from it; scripts/lock refreshes it)."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PROJECTS = {
    REPO / "pyproject.toml": ("local", "test", "dev"),
    REPO / "client" / "pyproject.toml": ("kafka",),
}
OURS = {"tidegraph", "tidegraph-client"}
"""Our own distributions: installed editable from the repository, never from the lock."""


def _locked() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, pinned = line.partition("==")
            assert sep, f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = pinned.strip()
    return pins


def _declared() -> list[Requirement]:
    texts: list[str] = []
    for path, extras in PROJECTS.items():
        project = tomllib.loads(path.read_text())["project"]
        texts += project["dependencies"]
        for extra in extras:
            texts += project["optional-dependencies"][extra]
    return [r for r in map(Requirement, texts) if canonicalize_name(r.name) not in OURS]


def test_every_declared_dependency_is_locked_within_its_range() -> None:
    locked = _locked()
    for req in _declared():
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is not in requirements.lock: run scripts/lock"
        assert req.specifier.contains(locked[name], prereleases=True), (req, locked[name])


def test_the_environment_runs_the_locked_versions() -> None:
    drift = {}
    for name, pinned in _locked().items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "missing"
        if installed != pinned:
            drift[name] = (pinned, installed)
    assert not drift, f"installed versions differ from requirements.lock: {drift}"


def test_development_tools_are_exact_pins() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for text in project["optional-dependencies"]["dev"]:
        assert str(Requirement(text).specifier).startswith("=="), text
