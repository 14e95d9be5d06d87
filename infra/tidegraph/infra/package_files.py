"""Files the commands need, shipped inside ``tidegraph.infra`` and found through
:mod:`importlib.resources`.

Why here: an installed wheel has no repository around it, so nothing may be looked up
relative to the source tree. Each caller needs a real path (Maven reads the pom, ``java``
runs the launcher, the bulk connector walks a folder), which a package installed on disk
has; anything else fails closed with :class:`~tidegraph.infra.errors.PackageDataError`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tidegraph.infra.errors import PackageDataError

PACKAGE = "tidegraph.infra"


def packaged(*parts: str) -> Path:
    """``tidegraph/infra/<parts>`` as a path on disk (a file or a folder)."""
    found = resources.files(PACKAGE).joinpath(*parts)
    what = "/".join(parts)
    if not isinstance(found, Path):
        raise PackageDataError(what, f"{found} (not a path on disk)")
    if not found.exists():
        raise PackageDataError(what, str(found))
    return found


def kafka_file(name: str) -> Path:
    """A file of the local broker: ``pom.xml`` (pins the release Maven fetches) or
    ``StdinArgs.java`` (runs a tool with secret arguments read from stdin)."""
    return packaged("kafka", name)


def connect_file(*parts: str) -> Path:
    """A pom of the local Kafka Connect worker: ``worker/pom.xml`` or
    ``plugins/<plugin>/pom.xml`` (which jars Maven fetches for each)."""
    return packaged("connect", *parts)


def sample_corpus() -> Path:
    """The folder of Markdown files ``tidegraph demo`` streams through the pipeline."""
    return packaged("sample_corpus")
