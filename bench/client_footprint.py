"""What installing the Python client costs: installed size and distributions.

For each source tree given (the working tree, and ``--rev REV`` for any commit, e.g. one
from before the client had a distribution of its own), the distribution that carries
``tidegraph.client`` is built with ``pip wheel`` and installed, without extras, into a
fresh virtual environment at that tree's requirements.lock versions: ``client/`` when the
tree has that project, else the single ``tidegraph`` distribution. Printed per tree: the
installed size (the environment's site-packages less an empty environment's, compiled
bytecode included on both sides) and every distribution installed besides pip and
setuptools.

Run: ``.venv/bin/python bench/client_footprint.py [--rev main]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def _export(rev: str, into: Path) -> Path:
    """The tree of ``rev``, as files (no checkout, no worktree)."""
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def _site_packages_bytes(env: Path) -> int:
    site = next((env / "lib").glob("python3*/site-packages"))
    return sum(p.stat().st_size for p in site.rglob("*") if p.is_file())


def _venv(folder: Path) -> Path:
    _run(sys.executable, "-m", "venv", str(folder), cwd=folder.parent)
    return folder / "bin" / "python"


class Footprint(NamedTuple):
    wheel: str
    """The distribution built and installed."""
    installed_mib: float
    """site-packages after the install, less an empty environment's."""
    distributions: list[str]
    """``name==version`` of everything installed besides pip and setuptools."""


def footprint(tree: Path, work: Path, empty: int) -> Footprint:
    """Build and install the client's distribution of ``tree``; measure the environment."""
    project = tree / "client" if (tree / "client" / "pyproject.toml").is_file() else tree
    wheels = work / "wheels"
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels),
         str(project), cwd=work)  # fmt: skip
    wheel = next(wheels.glob("*.whl"))
    python = _venv(work / "env")
    _run(str(python), "-m", "pip", "install", "-q", "-c", str(tree / "requirements.lock"),
         str(wheel), cwd=work)  # fmt: skip
    listed = json.loads(_run(str(python), "-m", "pip", "list", "--format=json", cwd=work))
    names = sorted(
        f"{d['name']}=={d['version']}" for d in listed if d["name"] not in ("pip", "setuptools")
    )
    return Footprint(wheel.name, (_site_packages_bytes(work / "env") - empty) / 2**20, names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", help="also measure this commit's client distribution")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidegraph-footprint-") as tmp:
        root = Path(tmp)
        (root / "empty").mkdir()
        _venv(root / "empty" / "env")
        empty = _site_packages_bytes(root / "empty" / "env")
        trees = {"working tree": REPO}
        if args.rev:
            trees[args.rev] = _export(args.rev, root / "rev")
        for i, (label, tree) in enumerate(trees.items()):
            work = root / f"measure-{i}"
            work.mkdir()
            found = footprint(tree, work, empty)
            others = [n for n in found.distributions if not n.startswith("tidegraph")]
            print(
                f"{label}: {found.wheel} installs {found.installed_mib:.1f} MiB, "
                f"{len(others)} dependencies"
            )
            print("  " + " ".join(found.distributions), flush=True)


if __name__ == "__main__":
    main()
