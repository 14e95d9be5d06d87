"""Realm and space names: the only user input that ever reaches SQL as an identifier.

Validated here, then always quoted through ``psycopg.sql.Identifier`` by whoever uses them.
"""

from __future__ import annotations

import re

from tidegraph.schemas.errors import InvalidNameError

REALM_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
SPACE_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
DEFAULT_SPACE = "default"
ANY_SPACE = "*"
"""Read-time wildcard over every space of a realm; never valid on a write."""

COPY_PATTERN = r"^(shadow|audit|retired)_[a-z0-9][a-z0-9_]{0,31}$"
"""A realm's copy as ``<kind>_<label>`` (``audit_1``): its schema is
``realm_<realm>__<kind>_<label>``, made by `tidegraph replay`."""

_REALM_RE = re.compile(REALM_PATTERN)
_COPY_RE = re.compile(COPY_PATTERN)
_SPACE_RE = re.compile(SPACE_PATTERN)


def validate_realm(name: str) -> str:
    """Return ``name`` unchanged when it is a valid realm name, else raise."""
    if not _REALM_RE.fullmatch(name):
        raise InvalidNameError("realm", name, REALM_PATTERN)
    return name


def is_realm(name: str) -> bool:
    """Whether ``name`` is a valid realm name (for a key that may name none)."""
    return _REALM_RE.fullmatch(name) is not None


def validate_space(name: str, *, allow_wildcard: bool = False) -> str:
    """Return ``name`` when it is a valid space name (``*`` only where reads allow it)."""
    if name == ANY_SPACE and allow_wildcard:
        return name
    if not _SPACE_RE.fullmatch(name):
        raise InvalidNameError("space", name, SPACE_PATTERN)
    return name


def realm_schema(realm: str) -> str:
    """The PostgreSQL schema that holds a realm (prefixed so no realm can shadow ``public``)."""
    return "realm_" + validate_realm(realm)


def name_key(name: str) -> str:
    """The case-insensitive key of an entity name or alias, stored beside it.

    Computed here rather than with SQL ``lower()``, whose reach depends on the database's
    collation (under the C locale it folds ASCII only), so resolution in Python and the
    unique index in PostgreSQL always agree.
    """
    return name.lower()


def copy_schema(realm: str, copy: str) -> str:
    """The schema of ``realm``'s copy ``copy`` (``audit_1`` → ``realm_<realm>__audit_1``)."""
    if not _COPY_RE.fullmatch(copy):
        raise InvalidNameError("copy", copy, COPY_PATTERN)
    return f"{realm_schema(realm)}__{copy}"
