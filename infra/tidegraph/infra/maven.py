"""Jars from Maven Central into the cache folder, once per pom: the broker's and Connect's.

A pom pins what a service runs; ``mvn dependency:copy-dependencies`` resolves it into a
staging folder that replaces the cached one only when complete, and a digest of the pom
beside it says the folder holds exactly that pom's jars. An advisory lock keeps two
processes from fetching into one folder at once. Nothing here ever writes into the
repository.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tidegraph.infra.errors import FetchError


def _digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def _stamp(libs: Path) -> Path:
    return libs.parent / "pom.sha256"


def fetched(pom: Path, libs: Path) -> bool:
    """True when ``libs`` holds the jars of exactly this pom."""
    stamp = _stamp(libs)
    return stamp.is_file() and stamp.read_text().strip() == _digest(pom)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def fetch(pom: Path, libs: Path, *, mvn: str, expect: str, what: str = "the Kafka broker") -> Path:
    """Resolve ``pom``'s runtime jars into ``libs`` unless already there; return ``libs``.

    The pom is copied beside ``libs`` (Maven runs on the copy), ``expect`` is a glob at
    least one fetched jar must match, else the fetch counts as failed; ``what`` names the
    jars in the error.
    """
    home = libs.parent
    with locked(home.parent / f"{home.name}.lock"):
        if fetched(pom, libs):
            return libs
        staging = home / f"{libs.name}.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pom, home / "pom.xml")
        command = [
            mvn, "-q", "-B", "-f", str(home / "pom.xml"),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            raise FetchError(str(exc), what=what) from exc
        if done.returncode != 0 or not any(staging.glob(expect)):
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise FetchError(f"`mvn` exited with {done.returncode}", output_tail=tail, what=what)
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        _stamp(libs).write_text(_digest(pom) + "\n")
    return libs
