"""Bearer keys on the query API: the shared key rules (:mod:`tidegraph.schemas.api_keys`)
turned into this service's 401 and 403 answers."""

from __future__ import annotations

from tidegraph.query_service.errors import Forbidden, Unauthenticated
from tidegraph.schemas.api_keys import ApiKeys, KeyGrant, bearer_token


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


def reachable(keys: ApiKeys, authorization: str | None, realms: list[str]) -> list[str]:
    """The realms of ``realms`` the request's key reaches (all when no keys are
    configured); 401 without a known key."""
    if not keys.enabled:
        return realms
    grant = identify(keys, authorization)
    return [r for r in realms if grant.allows(r)]
