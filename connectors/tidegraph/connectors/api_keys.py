"""Bearer keys per realm, from ``TIDEGRAPH_API_KEYS`` (``key1=realm_a,realm_b;key2=*``).

With no keys configured a service accepts loopback clients only; a key reaches only the
realms listed for it (``*``: every realm). Keys are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tidegraph.schemas.errors import ConfigError, InvalidNameError
from tidegraph.schemas.names import validate_realm

ALL_REALMS = "*"


@dataclass(frozen=True)
class ApiKeys:
    """Which realms each key may write to."""

    grants: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    """key → realms (``{"*"}`` for all)."""

    @property
    def configured(self) -> bool:
        return bool(self.grants)

    def realms_of(self, key: str) -> frozenset[str] | None:
        """The realms ``key`` may reach, or ``None`` for an unknown key."""
        found: frozenset[str] | None = None
        for known, realms in self.grants.items():
            if hmac.compare_digest(known.encode(), key.encode()):
                found = realms
        return found

    def allows(self, key: str, realm: str) -> bool:
        realms = self.realms_of(key)
        return realms is not None and (ALL_REALMS in realms or realm in realms)


def parse_api_keys(text: str | None) -> ApiKeys:
    """Parse ``key1=realm_a,realm_b;key2=*``; raises :class:`ConfigError` naming the bad part."""
    grants: dict[str, frozenset[str]] = {}
    for entry in (text or "").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        key, sep, realms_text = entry.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                "TIDEGRAPH_API_KEYS: each entry must be key=realm[,realm…] or key=*, "
                f"got an entry of {len(entry)} characters without one"
            )
        realms = frozenset(r.strip() for r in realms_text.split(",") if r.strip())
        if not realms:
            raise ConfigError("TIDEGRAPH_API_KEYS: a key lists no realms (use * for all)")
        for realm in realms - {ALL_REALMS}:
            try:
                validate_realm(realm)
            except InvalidNameError as exc:
                raise ConfigError(f"TIDEGRAPH_API_KEYS: {exc}") from None
        grants[key] = grants.get(key, frozenset()) | realms
    return ApiKeys(MappingProxyType(grants))
