"""Turning pydantic's validation errors into one contract error that names field and rule.

Consumers (the indexer's DLQ path, the HTTP ingest's 422 body) want a short, stable message
and the list of ``(field, rule)`` pairs, not pydantic's nested structure.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from tidegraph.schemas.errors import Problem, RecordValidationError

__all__ = ["Problem", "RecordValidationError", "problems_from"]


def problems_from(exc: ValidationError) -> list[Problem]:
    """Flatten a pydantic error into ``(field, rule)`` pairs."""
    out: list[Problem] = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(part) for part in err["loc"]) or "$"
        rule = err["msg"]
        if rule.startswith("Value error, "):
            rule = rule[len("Value error, ") :]
        out.append(Problem(field, rule))
    return out


def load_object(schema: str, data: bytes | bytearray | memoryview | str) -> dict[str, Any]:
    """Parse JSON that must be an object carrying ``"schema": <schema>``.

    The schema id is required on the wire (a record that does not say what it is cannot be
    trusted to be v1), even though Python callers may omit it in the constructor.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RecordValidationError(schema, [Problem("$", f"malformed JSON ({exc})")]) from None
    if not isinstance(obj, dict):
        raise RecordValidationError(schema, [Problem("$", "must be a JSON object")])
    if "schema" not in obj:
        raise RecordValidationError(schema, [Problem("schema", f"required, must be {schema!r}")])
    return obj
