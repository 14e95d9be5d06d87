"""requirements.lock pins what is installed: every dependency of pyproject.toml, at the
version this environment runs (scripts/bootstrap installs from it; scripts/lock refreshes it)."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]


def _locked() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, pinned = line.partition("==")
            assert sep, f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = pinned.strip()
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in ("local", "test", "dev"):
        texts += project["optional-dependencies"][extra]
    return [Requirement(t) for t in texts]


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
