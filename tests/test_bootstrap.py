"""scripts/bootstrap without Java or Maven: the Python side installs and pure unit tests run;
only the broker's jars are skipped, with one line saying what to install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _path_without_java(tmp_path: Path) -> str:
    """A PATH holding only what bootstrap calls besides java and mvn."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(os.path.realpath(Path(sys.base_prefix) / "bin" / "python3"))
    for tool in ("dirname", "touch", "bash"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(os.path.realpath(found))
    return str(bin_dir)


def test_bootstrap_and_unit_tests_without_java(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=_path_without_java(tmp_path))
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "bootstrap")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "skipping the Kafka broker's jars" in done.stderr
    assert "openjdk-17-jdk-headless" in done.stderr
    unit = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(REPO / "tests" / "test_predicates.py")],
        env=env, capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert unit.returncode == 0, unit.stdout + unit.stderr
