"""Bearer keys on the query API: the shared key rules (:mod:`tidegraph.schemas.api_keys`)
turned into this service's 401 and 403 answers.

Which routes are open (with keys configured; without keys the service is loopback-only and
every route is open):

- ``/healthz``, ``/openapi.json``, ``/docs``, ``/redoc``: open; they say nothing about data.
- ``/readyz``: open, but only ``{"status": "ready"}`` or a bare 503 "not ready"; the realm
  count and the names of broken realms go only to a key that reaches every realm (``*``).
- ``/metrics``: open unless ``TIDEGRAPH_METRICS_REQUIRE_KEY`` is set, then a key reaching
  every realm is required (the publisher's series are labelled by realm name).
- ``/v1/realms/{realm}/…``: a key reaching the realm.
"""

from __future__ import annotations

from tidegraph.query_service.errors import AllRealmsRequired, Forbidden, Unauthenticated
from tidegraph.schemas import ALL_REALMS, ApiKeys, KeyGrant, bearer_token


def identify(keys: ApiKeys, authorization: str | None) -> KeyGrant:
    """The grant of the request's bearer key; :class:`Unauthenticated` otherwise."""
    if not authorization:
        raise Unauthenticated("missing `Authorization: Bearer <key>` header")
    token = bearer_token(authorization)
    if token is None:
        raise Unauthenticated("the Authorization header must be `Bearer <key>`")
    grant = keys.grant_of(token)
    if grant is None:
        raise Unauthenticated("unknown API key")
    return grant


def authorize(keys: ApiKeys, authorization: str | None, realm: str) -> None:
    """Raise 401 without a known key, 403 when the key does not reach ``realm``; nothing
    when no keys are configured (the service then listens on loopback only)."""
    if keys.enabled and not identify(keys, authorization).allows(realm):
        raise Forbidden(realm)


def readable(keys: ApiKeys, authorization: str | None, realms: list[str]) -> list[str]:
    """The members of ``realms`` the request's key reaches (all of them when no keys are
    configured); 401 without a known key, as on every realm route."""
    if not keys.enabled:
        return realms
    grant = identify(keys, authorization)
    return [r for r in realms if grant.allows(r)]


def reaches_every_realm(keys: ApiKeys, authorization: str | None) -> bool:
    """Whether the caller may see service-wide detail: no keys configured (loopback only),
    or a known key granting every realm. Never raises: open routes use it to decide how much
    to say."""
    if not keys.enabled:
        return True
    token = bearer_token(authorization)
    grant = keys.grant_of(token) if token is not None else None
    return grant is not None and ALL_REALMS in grant.realms


def require_every_realm(keys: ApiKeys, authorization: str | None, route: str) -> None:
    """401 without a known key, 403 when the key does not reach every realm."""
    if keys.enabled and ALL_REALMS not in identify(keys, authorization).realms:
        raise AllRealmsRequired(route)
