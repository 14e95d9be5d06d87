"""Errors of the Python client: each HTTP error answer of the API becomes one class.

    TidegraphError                       (tidegraph.schemas.errors)
    └── ClientError                      a request through the client failed
        ├── ConnectError                 the service could not be reached (not retried)
        │   └── AuthenticationFailed     the Kafka broker refused the login (or wants one)
        ├── ProtocolError                the answer is not what the contract describes
        └── ApiError                     the service answered ``{"error": {code, message}}``
            ├── BadRequest               400
            ├── Unauthenticated          401: no key, or a key the service does not know
            ├── Forbidden                403: the key does not reach this realm
            ├── NotFound                 404: unknown realm or document
            ├── Conflict                 409: e.g. the service embeds with another embedder
            ├── InvalidRequest           422: the request breaks the contract or a limit
            └── Unavailable              503, retriable: retried by the client with backoff

Every :class:`ApiError` carries the HTTP ``status``, the contract's ``code``, the service's
``message`` and the request's ``method`` and ``url``, so a log line says where it happened.
"""

from __future__ import annotations

from typing import Any

from tidegraph.schemas import TidegraphError


class ClientError(TidegraphError):
    """Root of the client's errors."""


class ConnectError(ClientError):
    """No HTTP answer at all (refused, timed out, DNS); the client does not retry these."""


class AuthenticationFailed(ConnectError):
    """The Kafka broker answers but refused the client's login, or wants one it was not
    given; the message says which and where the login is configured."""


class ProtocolError(ClientError):
    """The service answered, but not with the contract's shape."""


class ApiError(ClientError):
    """An error answer of the API."""

    status: int = 0

    def __init__(self, status: int, code: str, message: str, method: str, url: str) -> None:
        super().__init__(f"{method} {url} answered {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.method = method
        self.url = url


class BadRequest(ApiError):
    status = 400


class Unauthenticated(ApiError):
    status = 401


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class InvalidRequest(ApiError):
    status = 422


class Unavailable(ApiError):
    status = 503
    retriable = True


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status: cls
    for cls in (BadRequest, Unauthenticated, Forbidden, NotFound, Conflict, InvalidRequest)
}
_BY_STATUS[503] = Unavailable


def api_error(status: int, body: Any, method: str, url: str) -> ApiError:
    """The exception for an error answer; unknown statuses become a plain :class:`ApiError`."""
    code, message = "http_error", f"HTTP {status}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code", code))
        message = str(body["error"].get("message", message))
    return _BY_STATUS.get(status, ApiError)(status, code, message, method, url)
