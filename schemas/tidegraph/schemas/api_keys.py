"""API keys and the realms they reach, and the loopback rule, for every HTTP surface.

``TIDEGRAPH_API_KEYS`` is ``key1=realm_a,realm_b;key2=*``. The query service and the HTTP
ingest service parse it with :meth:`ApiKeys.parse` and ask the same questions of it, so a
key means the same thing to both. With no keys configured a service may only listen on a
loopback address (:func:`require_loopback`); each service turns a refusal into its own
HTTP error.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass

from tidegraph.schemas.errors import ConfigError, InvalidNameError
from tidegraph.schemas.names import validate_realm

ALL_REALMS = "*"
"""A grant of every realm."""


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
    """The configured keys; none means authentication is off (loopback only)."""

    grants: tuple[KeyGrant, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.grants)

    @classmethod
    def parse(cls, text: str | None) -> ApiKeys:
        """Parse the environment form; :class:`ConfigError` names the bad entry (the key
        itself masked). A key listed twice is refused: which of its grants was meant?"""
        grants: list[KeyGrant] = []
        for entry in (text or "").split(";"):
            entry = entry.strip()
            if not entry:
                continue
            key, sep, realms_text = entry.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(
                    f"TIDEGRAPH_API_KEYS entry {_masked(entry)!r} is not `key=realm[,realm]`"
                    " or `key=*`"
                )
            realms = frozenset(r.strip() for r in realms_text.split(",") if r.strip())
            if not realms:
                raise ConfigError(
                    f"TIDEGRAPH_API_KEYS key {_masked(key)!r} names no realm (use * for all)"
                )
            for realm in sorted(realms - {ALL_REALMS}):
                try:
                    validate_realm(realm)
                except InvalidNameError as exc:
                    raise ConfigError(f"TIDEGRAPH_API_KEYS: {exc}") from None
            if any(g.key == key for g in grants):
                raise ConfigError(f"TIDEGRAPH_API_KEYS lists key {_masked(key)!r} twice")
            grants.append(KeyGrant(key, realms))
        return cls(tuple(grants))

    def grant_of(self, token: str) -> KeyGrant | None:
        """The grant of ``token``, compared in constant time against every key."""
        found: KeyGrant | None = None
        for grant in self.grants:  # no early exit: the time taken says nothing
            if hmac.compare_digest(grant.key.encode(), token.encode()):
                found = grant
        return found


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, ``None`` when there is none
    or the header has another form."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address to bind, or a client's address) is this machine only."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_loopback(host: str, keys: ApiKeys) -> None:
    """Refuse to expose a service without keys beyond loopback (CONTRACT, HTTP API)."""
    if not keys.enabled and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r} without API keys: set TIDEGRAPH_API_KEYS "
            "(`key=realm[,realm];key2=*`) or listen on 127.0.0.1"
        )


def _masked(text: str) -> str:
    return text[:2] + "…" if len(text) > 2 else "…"
