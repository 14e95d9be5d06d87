"""The realms an indexer process writes, opened once and created on first sight.

A realm first seen in a record is created with the service's default configuration
(CONTRACT "Realm configuration") on the server placement picks
(:mod:`tidegraph.store.placement`); one created beforehand (``tidegraph realm create``)
is opened where the catalogue places it. After any failure the cache is dropped, so a
deleted, upgraded, swapped or moved realm is read afresh.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tidegraph.schemas import RealmConfig
from tidegraph.store import Cluster, RealmInfo, find_placed, place_realm

log = logging.getLogger("tidegraph.indexer")


@dataclass
class RealmCache:
    """Realm name → its pinned configuration and server, as this process last read them."""

    cluster: Cluster
    default: RealmConfig
    """Configuration of a realm first seen in a record."""
    _infos: dict[str, RealmInfo] = field(default_factory=dict)

    async def find(self, realm: str) -> RealmInfo | None:
        """The realm, when it exists."""
        info = self._infos.get(realm)
        if info is None:
            info = await find_placed(self.cluster, realm)
            if info is not None:
                self._infos[realm] = info
        return info

    async def open(self, realm: str) -> RealmInfo:
        """The realm, created first when it does not exist."""
        info = self._infos.get(realm)
        if info is None:
            info, created = await place_realm(self.cluster, realm, self.default)
            if created:
                log.info(
                    "created realm %s (%s, %s) on server %s",
                    realm,
                    info.extractor,
                    info.embedder,
                    info.server,
                )
            self._infos[realm] = info
        return info

    def forget(self) -> None:
        self._infos.clear()
