"""JSON Schema files for the two record types, generated from the models.

The files ship inside the package (``tidegraph/schemas/json/``) so producers in other
languages can validate against exactly what the Python models accept; a test fails when a
committed file differs from what the models generate. Regenerate with
``python -m tidegraph.schemas.jsonschema_export``.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from tidegraph.schemas.changes import CHANGE_SCHEMA, GraphChange
from tidegraph.schemas.documents import DOCUMENT_SCHEMA, DocumentVersion

PACKAGE_JSON = resources.files("tidegraph.schemas").joinpath("json")
"""The shipped schema files, wherever the package is installed."""
JSON_DIR = Path(str(PACKAGE_JSON))
"""The same folder as a path, for regeneration (which writes into the source tree)."""
SCHEMA_FILES: dict[str, tuple[str, type[BaseModel]]] = {
    "document.v1.json": (DOCUMENT_SCHEMA, DocumentVersion),
    "change.v1.json": (CHANGE_SCHEMA, GraphChange),
}
"""File name → (schema id, model)."""


def json_schema(schema_id: str, model: type[BaseModel]) -> dict[str, Any]:
    """The Draft 2020-12 schema of what ``model`` accepts on the wire."""
    body = model.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://tidegraph.dev/schemas/{schema_id}.json",
        **body,
    }


def render(schema: dict[str, Any]) -> bytes:
    """Stable file bytes: sorted keys, two-space indent, trailing newline."""
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def generated_files() -> dict[str, bytes]:
    """File name → the bytes the models generate now."""
    return {name: render(json_schema(sid, model)) for name, (sid, model) in SCHEMA_FILES.items()}


def stale_files(directory: Path = JSON_DIR) -> list[str]:
    """Names of files in ``directory`` that are missing or differ from the models."""
    out = []
    for name, data in generated_files().items():
        path = directory / name
        if not path.is_file() or path.read_bytes() != data:
            out.append(name)
    return out


def write_files(directory: Path = JSON_DIR) -> list[Path]:
    """Write every schema file into ``directory``; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in generated_files().items():
        path = directory / name
        path.write_bytes(data)
        written.append(path)
    return written


def load(name: str) -> dict[str, Any]:
    """A shipped schema file, parsed (``document.v1.json`` or ``change.v1.json``); read
    through the package, so it works wherever the package is installed."""
    if name not in SCHEMA_FILES:
        raise KeyError(f"no schema file {name!r}: one of {', '.join(SCHEMA_FILES)}")
    data = PACKAGE_JSON.joinpath(name).read_bytes()
    result: dict[str, Any] = orjson.loads(data)
    return result


if __name__ == "__main__":
    for p in write_files(Path(sys.argv[1]) if len(sys.argv) > 1 else JSON_DIR):
        print(p)
