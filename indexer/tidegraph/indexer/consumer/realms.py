"""The realms an indexer process writes, opened once and created on first sight.

A realm first seen in a record is created with the service's default configuration
(CONTRACT "Realm configuration"); one created beforehand (``tidegraph realm create``) is
opened as it is. After any failure the cache is dropped, so a deleted, upgraded or
swapped realm is read afresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection

from tidegraph.schemas.names import realm_schema
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import RealmInfo, create_realm, open_realm, realm_exists

log = logging.getLogger("tidegraph.indexer")


@dataclass
class RealmCache:
    """Realm name → its pinned configuration, as this process last read it."""

    default: RealmConfig
    """Configuration of a realm first seen in a record."""
    _infos: dict[str, RealmInfo] = field(default_factory=dict)

    async def open(self, conn: AsyncConnection[Any], realm: str) -> RealmInfo:
        info = self._infos.get(realm)
        if info is None:
            if not await realm_exists(conn, realm_schema(realm)):
                info = await create_realm(conn, realm, self.default)
                log.info("created realm %s (%s, %s)", realm, info.extractor, info.embedder)
            else:
                info = await open_realm(conn, realm)
            self._infos[realm] = info
        return info

    def forget(self) -> None:
        self._infos.clear()
