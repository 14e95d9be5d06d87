"""What each API operation sends and how its answer is read, shared by the sync and the
async driver (one protocol, two drivers): a :class:`Call` describes the request and the
contract model its answer must fit; :func:`decode` turns a response into that model or
into the :mod:`~tidegraph.client._errors` class of its status."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from tidegraph.client._errors import ProtocolError, api_error
from tidegraph.schemas import (
    ChangesResponse,
    DocumentResponse,
    EntitiesResponse,
    QueryDataRequest,
    QueryDataResponse,
    QueryRequest,
    QueryResponse,
    RealmsResponse,
    RelationHistoryResponse,
    RelationsResponse,
)

M = TypeVar("M", bound=BaseModel)

Param = str | int | bool | date | datetime | None


@dataclass(frozen=True)
class Call(Generic[M]):
    """One request and the model of its answer."""

    method: str
    """``GET`` or ``POST``."""
    path: str
    """Path below the base URL, realm and document key already URL-encoded."""
    model: type[M]
    """The contract model the 200 answer is validated into."""
    params: dict[str, str]
    """Query string; ``None`` values were left out."""
    json: dict[str, Any] | None = None
    """Request body."""
    realm: str | None = None
    """The realm read, whose head sequence the answer carries."""


def _params(**values: Param) -> dict[str, str]:
    out = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, date | datetime):
            out[key] = value.isoformat()
        else:
            out[key] = str(value)
    return out


def _realm(realm: str) -> str:
    return "/v1/realms/" + quote(realm, safe="")


def realms() -> Call[RealmsResponse]:
    return Call("GET", "/v1/realms", RealmsResponse, {})


def query_data(realm: str, request: QueryDataRequest) -> Call[QueryDataResponse]:
    body = request.model_dump(mode="json", exclude_unset=True)
    return Call("POST", _realm(realm) + "/query_data", QueryDataResponse, {}, body, realm)


def query(realm: str, request: QueryRequest) -> Call[QueryResponse]:
    body = request.model_dump(mode="json", exclude_unset=True)
    return Call("POST", _realm(realm) + "/query", QueryResponse, {}, body, realm)


def changes(
    realm: str, after_seq: int | None, since: datetime | None, limit: int
) -> Call[ChangesResponse]:
    params = _params(after_seq=after_seq, since=since, limit=limit)
    return Call("GET", _realm(realm) + "/changes", ChangesResponse, params, realm=realm)


def document(
    realm: str, doc_key: str, space: str, as_believed_at: datetime | date | str | None = None
) -> Call[DocumentResponse]:
    path = _realm(realm) + "/documents/" + quote(doc_key, safe="")
    params = _params(space=space, as_believed_at=as_believed_at)
    return Call("GET", path, DocumentResponse, params, realm=realm)


def relations(realm: str, **filters: Param) -> Call[RelationsResponse]:
    params = _params(**filters)
    return Call("GET", _realm(realm) + "/relations", RelationsResponse, params, realm=realm)


def relation_history(realm: str, relation_id: int | str) -> Call[RelationHistoryResponse]:
    path = f"{_realm(realm)}/relations/{quote(str(relation_id), safe='')}/history"
    return Call("GET", path, RelationHistoryResponse, {}, realm=realm)


def entities(realm: str, **filters: Param) -> Call[EntitiesResponse]:
    params = _params(**filters)
    return Call("GET", _realm(realm) + "/entities", EntitiesResponse, params, realm=realm)


def decode(call: Call[M], response: httpx.Response) -> M:
    """The answer as ``call.model``; an :class:`ApiError` subclass for an error status."""
    url = str(response.request.url)
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = None
        raise api_error(response.status_code, body, call.method, url)
    try:
        return call.model.model_validate_json(response.content)
    except ValidationError as exc:
        raise ProtocolError(
            f"{call.method} {url}: the answer is not a {call.model.__name__}: {exc}"
        ) from exc
