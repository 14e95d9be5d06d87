"""tidegraph.client: the query API and the change feed from Python.

:class:`Client` (blocking) and :class:`AsyncClient` (asyncio) return the contract's models
(:mod:`tidegraph.schemas.api`, :class:`~tidegraph.schemas.GraphChange`); errors are the
classes below, one per HTTP error status. ``subscribe`` iterates over a realm's changes from
a position the caller keeps. Reads are read-your-writes by default: each realm's highest
head sequence seen is required of later reads of it (:class:`SeenSequences`). Depends on
``tidegraph.schemas`` and httpx only; reading the changes topic
(``subscribe(..., bootstrap=...)``) also needs aiokafka, the ``kafka`` extra of the
``tidegraph-client`` distribution.
"""

from tidegraph.client._async import AsyncClient
from tidegraph.client._config import DEFAULT_URL, ClientConfig
from tidegraph.client._errors import (
    ApiError,
    AuthenticationFailed,
    BadRequest,
    ClientError,
    Conflict,
    ConnectError,
    Forbidden,
    InvalidRequest,
    NotFound,
    ProtocolError,
    Unauthenticated,
    Unavailable,
)
from tidegraph.client._position import Position
from tidegraph.client._sequences import SeenSequences
from tidegraph.client._sync import Client

__all__ = [
    "DEFAULT_URL",
    "ApiError",
    "AsyncClient",
    "AuthenticationFailed",
    "BadRequest",
    "Client",
    "ClientConfig",
    "ClientError",
    "Conflict",
    "ConnectError",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "Position",
    "ProtocolError",
    "SeenSequences",
    "Unauthenticated",
    "Unavailable",
]
