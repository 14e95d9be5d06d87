"""What the routes' parameters share: the realm path, the copy and key parameters, and the
checks that turn a bad value into a 422 naming it."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import Header, Path, Query

from tidegraph.query_service import channels
from tidegraph.query_service.errors import InvalidRequest
from tidegraph.schemas import (
    BELIEVED_AT_DOC,
    BeliefInstant,
    ContractError,
    no_nul,
    valid_as_of,
    validate_space,
)

RealmPath = Annotated[str, Path(description="Realm name.", max_length=64)]
CopyQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Read a copy of the realm instead of the realm itself, read-only:"
        " `audit_<label>` (made by `tidegraph replay --until`: the realm as the log stood"
        " then, or kept by `tidegraph realm move --keep-copy`), `retired_<label>` or"
        " `shadow_<label>`; `tidegraph realm copies R` lists them.",
    ),
]
Auth = Annotated[str | None, Header(alias="Authorization", include_in_schema=False)]
SpaceQuery = Annotated[str, Query(alias="space", max_length=64)]
AfterId = Annotated[int, Query(ge=0, le=2**62)]
Limit = Annotated[int, Query(ge=1, le=100_000)]
BelievedAt = Annotated[BeliefInstant | None, Query(description=BELIEVED_AT_DOC)]


def text(field: str, value: str) -> None:
    """Path and query text reaches SQL as a parameter; PostgreSQL text cannot hold NUL."""
    try:
        no_nul(value)
    except ValueError as exc:
        raise InvalidRequest(f"{field}: {exc}") from None


def page(limit: int, max_page: int) -> None:
    """The service's page limit (a setting) beside the OpenAPI one, which is fixed."""
    if limit > max_page:
        raise InvalidRequest(f"limit {limit} exceeds the page limit {max_page}")


def space(value: str, *, wildcard: bool) -> None:
    try:
        validate_space(value, allow_wildcard=wildcard)
    except ContractError as exc:
        raise InvalidRequest(str(exc)) from None


def valid_days(as_of: str | None) -> tuple[date, date] | None:
    """The days a query-string ``as_of`` covers; 422 naming it when it is no date."""
    try:
        return channels.valid_days(valid_as_of(as_of))
    except ValueError as exc:
        raise InvalidRequest(f"as_of: {exc}") from None
