"""Errors of the query service, each carrying the HTTP status and error code it answers with.

    TidegraphError                         (tidegraph.schemas.errors)
    └── QueryServiceError                  status 400, code ``bad_request``
        ├── MalformedJson                  400: the body is not JSON
        ├── UnknownParameter               400: a query-string parameter the route does not take
        ├── InvalidRequest                 422: a request breaks a limit or the contract
        ├── Unauthenticated                401: no key, or a key nobody issued
        ├── Forbidden                      403: the key does not reach this realm
        │   └── AllRealmsRequired          the route needs a key reaching every realm
        ├── NotFound                       404: base of the ones below
        │   ├── RealmNotFound              the realm does not exist (or its name is invalid)
        │   ├── CopyNotFound               the realm has no copy of that name
        │   ├── DocumentNotFound           no such document in the space
        │   └── RelationNotFound           no relation of that id
        ├── EmbedderMismatch               409: the query embedder is not the realm's pinned one
        ├── TelemetryOff                   409: coverage asked of a realm that records none
        └── Unavailable                    503, retriable: database down, no chat model
            ├── ChatModelNotConfigured     no chat model for ``/query``
            ├── RerankerNotConfigured      ``rerank: true`` asked of a service without one
            ├── StandbysBehind             a change feed page some standby has not replayed
            └── DatabaseDown               (query_service.gate) PostgreSQL does not answer

The app turns every one of these into ``{"error": {"code", "message"}}`` with its status;
anything else is a bug and answers 500. Messages say what happened and the likely cause.
"""

from __future__ import annotations

from tidegraph.schemas import TidegraphError


class QueryServiceError(TidegraphError):
    """Root of the query service's errors; ``status`` and ``code`` form the HTTP answer."""

    status: int = 400
    code: str = "bad_request"


class InvalidRequest(QueryServiceError):
    """The request is well-formed HTTP but breaks a limit or the contract."""

    status = 422
    code = "invalid_request"


class MalformedJson(QueryServiceError):
    """The request body is not JSON at all (as the ingest service answers it)."""

    status = 400
    code = "malformed_json"


class UnknownParameter(QueryServiceError):
    """A query-string parameter the route does not take: refused rather than ignored, so a
    misspelt filter never silently returns everything."""

    status = 400
    code = "unknown_parameter"

    def __init__(self, names: list[str], allowed: list[str]) -> None:
        super().__init__(
            f"unknown query parameter{'s' if len(names) > 1 else ''} {', '.join(names)};"
            f" this route takes {', '.join(allowed) or 'none'}"
        )
        self.names = names


class Unauthenticated(QueryServiceError):
    """No bearer key was sent, or the one sent is not configured."""

    status = 401
    code = "unauthenticated"


class Forbidden(QueryServiceError):
    """The key is valid but does not reach the realm asked for."""

    status = 403
    code = "forbidden"

    def __init__(self, realm: str) -> None:
        super().__init__(f"this API key does not grant access to realm {realm!r}")
        self.realm = realm


class AllRealmsRequired(Forbidden):
    """A service-wide route (``/metrics``, whose series name realms) and a key that does not
    reach every realm."""

    def __init__(self, route: str) -> None:
        QueryServiceError.__init__(
            self, f"{route} needs an API key that reaches every realm (`key=*`)"
        )
        self.realm = "*"


class NotFound(QueryServiceError):
    """Something named in the path does not exist."""

    status = 404
    code = "not_found"


class RealmNotFound(NotFound):
    """No realm of that name exists (an invalid name cannot exist either)."""

    code = "realm_not_found"

    def __init__(self, realm: str) -> None:
        super().__init__(
            f"realm {realm!r} does not exist; realms are created by `tidegraph realm create` "
            "or by their first document"
        )
        self.realm = realm


class CopyNotFound(NotFound):
    """The realm has no copy of that name (``replay --until`` makes audit copies)."""

    code = "copy_not_found"

    def __init__(self, realm: str, copy: str) -> None:
        super().__init__(
            f"realm {realm!r} has no copy {copy!r}; `tidegraph realm copies {realm}` lists them"
        )
        self.realm = realm
        self.copy = copy


class DocumentNotFound(NotFound):
    """The realm has no document with that key in that space."""

    code = "document_not_found"

    def __init__(self, realm: str, space: str, doc_key: str) -> None:
        super().__init__(f"realm {realm!r} has no document {doc_key!r} in space {space!r}")
        self.realm = realm
        self.space = space
        self.doc_key = doc_key


class RelationNotFound(NotFound):
    """The realm has no relation with that id."""

    code = "relation_not_found"

    def __init__(self, realm: str, relation_id: int) -> None:
        super().__init__(f"realm {realm!r} has no relation {relation_id}")
        self.realm = realm
        self.relation_id = relation_id


class EmbedderMismatch(QueryServiceError):
    """Query vectors would come from another geometry than the realm's stored vectors."""

    status = 409
    code = "embedder_mismatch"

    def __init__(self, realm: str, pinned: str, given: str) -> None:
        super().__init__(
            f"realm {realm!r} is pinned to embedder {pinned!r} but this service embeds queries "
            f"with {given!r}; vectors of different embedders are not comparable, so no "
            "similarity search is attempted (configure the service with the realm's embedder)"
        )
        self.realm = realm
        self.pinned = pinned
        self.given = given


class TelemetryOff(QueryServiceError):
    """Coverage readings need the realm's coverage telemetry, which is off."""

    status = 409
    code = "telemetry_off"

    def __init__(self, realm: str) -> None:
        super().__init__(
            f"realm {realm!r} records no coverage telemetry (its configuration's "
            "coverage_telemetry is false), so what queries reach is unknown"
        )
        self.realm = realm


class Unavailable(QueryServiceError):
    """A dependency cannot serve the request now; trying later may succeed."""

    status = 503
    code = "unavailable"
    retriable = True
    retry_after: int | None = 1
    """Seconds a client should wait before trying again (the ``Retry-After`` header)."""


class StandbysBehind(Unavailable):
    """A page of the change feed that a standby of the realm's server has not replayed
    within the wait: shown now, it could vanish with a failover to that standby."""

    code = "standbys_behind"

    def __init__(self, realm: str, lagging: list[str]) -> None:
        super().__init__(
            f"the change feed of realm {realm!r} waits for standby {', '.join(lagging)} to"
            " replay what was read (a failover to it would lose those changes); try again"
        )


class ChatModelNotConfigured(Unavailable):
    """``/query`` needs a chat model and none is configured."""

    code = "chat_model_not_configured"
    retry_after = None

    def __init__(self) -> None:
        super().__init__(
            "answer synthesis needs a chat model and none is configured (set "
            "TIDEGRAPH_LLM_BASE_URL / TIDEGRAPH_LLM_MODEL); query_data works without one"
        )


class RerankerNotConfigured(Unavailable):
    """A request asked for ``rerank: true`` and the service has no rerank endpoint."""

    code = "reranker_not_configured"
    retry_after = None

    def __init__(self) -> None:
        super().__init__(
            "the request asks for rerank but no rerank endpoint is configured (set "
            "TIDEGRAPH_RERANK_URL); leave rerank unset or false to answer without one"
        )
