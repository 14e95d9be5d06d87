"""What a schemathesis run of an HTTP service checks, shared by the services' runs."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
"""Generated requests per operation."""


def call_and_check(case: Any, base_url: str, realm: str) -> None:
    """Send ``case`` (its realm, if any, replaced by ``realm``, so that requests reach data)
    and check that the answer is no server error and is the one the document declares:
    status code, content type and body."""
    if "realm" in (case.path_parameters or {}):
        case.path_parameters["realm"] = realm
    case.call_and_validate(
        base_url=base_url,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
