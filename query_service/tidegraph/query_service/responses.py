"""JSON answers as the contract writes them: orjson, UTC instants with ``Z``, and the one
error body ``{"error": {"code", "message"}}``."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import Response
from pydantic import BaseModel


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def json_response(body: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(body, default=_default, option=orjson.OPT_UTC_Z),
        status_code=status,
        media_type="application/json",
    )


def error_response(status: int, code: str, message: str) -> Response:
    """The contract's error body."""
    return json_response({"error": {"code": code, "message": message}}, status)
