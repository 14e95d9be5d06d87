"""Bearer keys and the realms they reach.

``TIDEGRAPH_API_KEYS`` is ``key1=realm_a,realm_b;key2=*``. With no keys configured the API
is open, which is only acceptable on a loopback interface: :func:`require_loopback` is what
``tidegraph serve`` calls before binding.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass

from tidegraph.query_service.errors import Forbidden, Unauthenticated
from tidegraph.schemas.errors import ConfigError, InvalidNameError
from tidegraph.schemas.names import validate_realm

ALL_REALMS = "*"


@dataclass(frozen=True)
class KeyGrant:
    """One configured key and what it reaches."""

    key: str
    """The bearer token."""
    realms: frozenset[str]
    """Realm names, or ``{"*"}`` for every realm."""

    def allows(self, realm: str) -> bool:
        return ALL_REALMS in self.realms or realm in self.realms


@dataclass(frozen=True)
class ApiKeys:
    """The configured keys; empty means authentication is off."""

    grants: tuple[KeyGrant, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.grants)

    @classmethod
    def parse(cls, text: str | None) -> ApiKeys:
        """Parse the environment form; raises :class:`ConfigError` naming the bad entry."""
        if text is None or not text.strip():
            return cls()
        grants: list[KeyGrant] = []
        for entry in text.split(";"):
            entry = entry.strip()
            if not entry:
                continue
            key, sep, realms_text = entry.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(
                    f"TIDEGRAPH_API_KEYS entry {_masked(entry)!r} is not `key=realm[,realm]`"
                )
            realms = frozenset(r.strip() for r in realms_text.split(",") if r.strip())
            if not realms:
                raise ConfigError(f"TIDEGRAPH_API_KEYS key {_masked(key)!r} names no realm")
            for realm in realms - {ALL_REALMS}:
                try:
                    validate_realm(realm)
                except InvalidNameError as exc:
                    raise ConfigError(f"TIDEGRAPH_API_KEYS: {exc}") from None
            if any(g.key == key for g in grants):
                raise ConfigError(f"TIDEGRAPH_API_KEYS lists key {_masked(key)!r} twice")
            grants.append(KeyGrant(key, realms))
        return cls(tuple(grants))

    def authorize(self, authorization: str | None, realm: str) -> None:
        """Raise 401 without a known key, 403 when the key does not reach ``realm``."""
        if not self.enabled:
            return
        grant = self.identify(authorization)
        if not grant.allows(realm):
            raise Forbidden(realm)

    def identify(self, authorization: str | None) -> KeyGrant:
        """The grant of the request's bearer key; :class:`Unauthenticated` otherwise."""
        if not authorization:
            raise Unauthenticated("missing `Authorization: Bearer <key>` header")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("the Authorization header must be `Bearer <key>`")
        found: KeyGrant | None = None
        for grant in self.grants:  # compare against every key: no early exit to time
            if hmac.compare_digest(grant.key.encode(), token.encode()):
                found = grant
        if found is None:
            raise Unauthenticated("unknown API key")
        return found


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the service reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_loopback(host: str, keys: ApiKeys) -> None:
    """Refuse to expose an API without keys beyond loopback (CONTRACT, HTTP API)."""
    if not keys.enabled and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r} without API keys: set TIDEGRAPH_API_KEYS "
            "(`key=realm[,realm];key2=*`) or listen on 127.0.0.1"
        )


def _masked(text: str) -> str:
    return text[:2] + "…" if len(text) > 2 else "…"
