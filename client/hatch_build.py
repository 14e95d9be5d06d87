"""Build hook: the client's distributions carry ``tidegraph.schemas``.

The contract's models live in the repository's ``schemas/`` folder, beside this project.
The client cannot work without them and the services' distribution depends on this one,
so they ship here, once. Built from the repository they are taken from ``../schemas``; an
sdist already holds them under ``tidegraph/schemas``, so it builds the same wheel. An
editable install copies nothing: its path entries (``dev-mode-dirs``) reach ``../schemas``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

TARGET = "tidegraph/schemas"


class SchemasHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        if version == "editable" or (root / TARGET).is_dir():
            return
        source = root.parent / "schemas" / TARGET
        if not (source / "__init__.py").is_file():
            raise FileNotFoundError(
                f"tidegraph.schemas is not at {source}: build tidegraph-client from the "
                "repository (its client/ folder) or from its sdist"
            )
        build_data["force_include"][str(source)] = TARGET
