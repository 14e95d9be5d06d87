"""A consumer that knows only the contract can mirror a realm from its change feed.

The corpus goes through the real pipeline (Kafka, the indexer, a replay swapped in midway)
and exercises replacement, deletion, dormancy, revival, a merge, a type refined, a
description withdrawn with its document, supersession, re-assertion and restoration. The
mirror folds the feed over HTTP — entities with type, description and aliases; relations
with their state, ``superseded_by`` and ``superseded_via`` — and must equal what the HTTP
API returns for the realm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.indexer.replay.rebuild import ReplayOptions, replay_realm
from tidegraph.infra.composition import ModelRegistry
from tidegraph.schemas.changes import ChangeKind, GraphChange
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.realm_config import preset

from indexer_helpers import (
    Topics,
    delete,
    make_topics,
    publish,
    running_indexer,
    stored_position,
    upsert,
    wait_for,
)
from query_helpers import api_client, open_pool

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

CONFIG = preset("narrative", embedder="hashing:64")


@dataclass
class Mirror:
    """The realm as the feed tells it."""

    entities: dict[str, dict[str, Any]] = field(default_factory=dict)
    relations: dict[str, dict[str, Any]] = field(default_factory=dict)
    rebuilds: int = 0

    def fold(self, c: GraphChange) -> None:
        if c.entity is not None:
            held = self.entities.setdefault(c.entity.id, {"dormant": False})
            held.update(name=c.entity.name, type=c.entity.type)
            if c.kind in (ChangeKind.ENTITY_ADDED, ChangeKind.ENTITY_UPDATED):
                held.update(description=c.entity.description, aliases=c.entity.aliases)
            if c.kind is ChangeKind.ENTITY_ADDED or c.kind is ChangeKind.ENTITY_REVIVED:
                held["dormant"] = False
            if c.kind is ChangeKind.ENTITY_DORMANT:
                held["dormant"] = True
            if c.merged_into is not None:  # its relations now belong to the absorbing one
                for r in self.relations.values():
                    for end in ("subject_id", "object_id"):
                        if r[end] == c.entity.id:
                            r[end] = c.merged_into
        if c.relation is not None:
            r = self.relations.setdefault(c.relation.id, {})
            r.update(
                subject_id=c.relation.subject_id,
                object_id=c.relation.object_id,
                predicate=c.relation.predicate,
                negated=c.relation.negated,
            )
            state = {
                ChangeKind.RELATION_ADDED: "current",
                ChangeKind.RELATION_RESTORED: "current",
                ChangeKind.RELATION_SUPERSEDED: "superseded",
                ChangeKind.RELATION_RETRACTED: "retracted",
            }[c.kind]
            r["status"] = state
            r["superseded_by"] = c.superseded_by if state == "superseded" else None
            r["superseded_via"] = c.superseded_via if state == "superseded" else None
        if c.rebuild is not None:
            self.rebuilds += 1

    def live_entities(self) -> dict[str, tuple[Any, ...]]:
        return {
            i: (e["name"], e["type"], e["description"], tuple(e["aliases"] or ()))
            for i, e in self.entities.items()
            if not e["dormant"]
        }

    def believed_relations(self) -> set[tuple[Any, ...]]:
        name = {i: e["name"] for i, e in self.entities.items()}
        return {
            (
                i,
                name[r["subject_id"]],
                r["predicate"],
                name[r["object_id"]],
                r["negated"],
                r["status"],
                r["superseded_by"],
                r["superseded_via"],
            )
            for i, r in self.relations.items()
            if r["status"] != "retracted"
        }


async def _api(client: httpx.AsyncClient, realm: str) -> tuple[dict[str, Any], set[Any]]:
    entities = (await client.get(f"/v1/realms/{realm}/entities", params={"limit": 1000})).json()
    relations = (
        await client.get(
            f"/v1/realms/{realm}/relations", params={"include_superseded": "true", "limit": 1000}
        )
    ).json()
    return (
        {
            e["id"]: (e["name"], e["type"], e["description"], tuple(e["aliases"]))
            for e in entities["entities"]
        },
        {
            (
                r["id"],
                r["subject"],
                r["predicate"],
                r["object"],
                r["negated"],
                r["status"],
                r["superseded_by"],
                r["superseded_via"],
            )
            for r in relations["relations"]
        },
    )


async def _feed(client: httpx.AsyncClient, realm: str) -> list[GraphChange]:
    changes: list[GraphChange] = []
    after = 0
    while True:
        response = await client.get(
            f"/v1/realms/{realm}/changes", params={"after_seq": after, "limit": 100}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        changes.extend(GraphChange.from_dict(c) for c in body["changes"])
        if body["next_seq"] >= body["head_seq"]:
            return changes
        after = body["next_seq"]


async def _applied(topics: Topics, pg_dsn: str, group: str, records: list[DocumentVersion]) -> None:
    before = await stored_position(pg_dsn, group, topics.documents)
    await publish(topics, records)

    async def done() -> bool:
        return await stored_position(pg_dsn, group, topics.documents) >= before + len(records)

    await wait_for(done, 60, "the records applied")


async def test_a_mirror_folded_from_the_feed_equals_the_api(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    before_swap = [
        upsert(
            realm, "ally.md", "Arthur Pendragon became an ally of Mordred Orkney.", order_key="1"
        ),
        upsert(
            realm, "enemy.md", "Arthur Pendragon became an enemy of Mordred Orkney.", order_key="2"
        ),
        upsert(realm, "babbage.md", "Babbage worked with Ada Lovelace."),
        upsert(realm, "charles.md", "Charles Babbage worked with John Herschel."),
        # two stored entities proven to be one: a merge
        upsert(realm, "alias.md", "Charles Babbage, known as Babbage, was a mathematician."),
        # worked_with is symmetric: each pair's edge is stored with the name sorting first
        # as subject, so these two point opposite ways round John Herschel
        upsert(realm, "lady.md", "Lady Lovelace worked with John Herschel."),
        upsert(realm, "byron.md", "John Herschel worked with Augusta Ada Byron."),
        upsert(realm, "lancelot.md", "Lancelot Lac worked with Merlin Ambrosius."),
        delete(realm, "lancelot.md"),
        upsert(realm, "again.md", "Lancelot Lac worked with Guinevere Leodegrance."),
        # enemy.md no longer says it: the ally relation is restored
        upsert(realm, "enemy.md", "Arthur Pendragon worked with Merlin Ambrosius.", order_key="2"),
        upsert(realm, "reassert.md", "Arthur Pendragon became an ally of Mordred Orkney."),
        upsert(realm, "babbage.md", "Babbage designed the Analytical Engine."),
        upsert(realm, "home.md", "Merlin Ambrosius lives in Avalon.", order_key="2"),
    ]
    after_swap = [
        upsert(
            realm, "later.md", "Arthur Pendragon became an enemy of Mordred Orkney.", order_key="3"
        ),
        delete(realm, "again.md"),
        upsert(realm, "ada.md", "Ada Lovelace, known as Ada King, was a mathematician."),
        # the longest description withdrawn with the only document teaching it: the
        # shorter one another document teaches is the description again
        upsert(
            realm,
            "merlin.md",
            "Merlin Ambrosius was a wizard at the court of Camelot."
            " Merlin Ambrosius mentored Arthur Pendragon.",
        ),
        upsert(
            realm,
            "poet.md",
            "Merlin Ambrosius was a poet. Merlin Ambrosius mentored Arthur Pendragon.",
        ),
        delete(realm, "merlin.md"),
        # a merge making the two edges one: the absorbed one's is retracted, no edge turns
        upsert(realm, "countess.md", "Augusta Ada Byron, known as Lady Lovelace, wrote notes."),
        # an older residence arrives late (lives_in is functional in the narrative preset)
        upsert(realm, "camelot.md", "Merlin Ambrosius lives in Camelot.", order_key="1"),
    ]
    async with running_indexer(topics, pg_dsn, group, default_realm=CONFIG):
        await _applied(topics, pg_dsn, group, before_swap)
        registry = ModelRegistry()
        swapped = await replay_realm(
            ReplayOptions(
                realm=realm,
                bootstrap=topics.bootstrap,
                pg_dsn=pg_dsn,
                topic=topics.documents,
            ),
            Pipeline(registry.extractor_for, registry.embedder_for).prepare,
            registry.embedder_for,
        )
        assert swapped.swapped
        await _applied(topics, pg_dsn, group, after_swap)

    async with open_pool(pg_dsn) as pool, api_client(pool) as client:
        feed = await _feed(client, realm)
        mirror = Mirror()
        for change in feed:
            mirror.fold(change)
        entities, relations = await _api(client, realm)
    kinds = {c.kind for c in feed}
    assert {
        ChangeKind.ENTITY_UPDATED,
        ChangeKind.ENTITY_DORMANT,
        ChangeKind.ENTITY_REVIVED,
        ChangeKind.RELATION_SUPERSEDED,
        ChangeKind.RELATION_RESTORED,
        ChangeKind.RELATION_RETRACTED,
    } <= kinds
    assert any(c.merged_into for c in feed) and mirror.rebuilds == 1
    assert {c.superseded_via for c in feed if c.superseded_via} == {
        "exclusive_group",
        "functional",
    }
    assert mirror.live_entities() == entities
    assert mirror.believed_relations() == relations
    herschel = [r for r in relations if {r[1], r[3]} == {"Augusta Ada Byron", "John Herschel"}]
    assert [r[1:4] for r in herschel] == [("Augusta Ada Byron", "worked_with", "John Herschel")]
