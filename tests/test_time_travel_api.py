"""Past answers through the whole pipeline: records with facts through Kafka and the indexer,
reads over HTTP, asked again ``as_believed_at`` each phase's instant (DESIGN invariant 6).

The phases: a fact and new provenance for it (its weight, documents and period change), a
replacement that drops a fact, a deletion, and a re-assertion by a later document. Each
read made after a phase — ``/relations`` with superseded ones, ``/entities``,
``/documents/{key}`` and ``query_data`` — is made again at the end at that phase's instant
and must be the same, including the stamps set later (absent then).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.realm_config import preset

from indexer_helpers import (
    delete,
    make_topics,
    publish,
    running_indexer,
    stored_position,
    wait_for,
)
from query_helpers import api_client, open_pool, query_data

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

NARRATIVE = preset("narrative", embedder="hashing:8")


def _facts(realm: str, key: str, order: str, *relations: dict[str, Any]) -> DocumentVersion:
    return DocumentVersion.for_facts(realm, key, {"relations": list(relations)}, order_key=order)


def _rel(subject: str, predicate: str, obj: str, since: str | None = None) -> dict[str, Any]:
    return {"subject": subject, "predicate": predicate, "object": obj, "valid_from": since}


WORKS = ("Orla Quist", "works_for", "Brindle Works")


async def _reads(client: Any, realm: str, at: datetime | None) -> dict[str, Any]:
    believed = {"as_believed_at": at.isoformat()} if at is not None else {}
    out: dict[str, Any] = {}
    r = await client.get(
        f"/v1/realms/{realm}/relations",
        params={"include_superseded": "true", "limit": 1000, **believed},
    )
    assert r.status_code == 200, r.text
    out["relations"] = r.json()["relations"]
    r = await client.get(
        f"/v1/realms/{realm}/entities",
        params={"include_dormant": "true", "limit": 1000, **believed},
    )
    out["entities"] = r.json()["entities"]
    for key in ("a", "b", "c", "e"):
        r = await client.get(f"/v1/realms/{realm}/documents/{key}", params=believed)
        out[f"document {key}"] = (r.status_code, r.json())
    answer = await query_data(
        client,
        realm,
        query="Who does Orla Quist work for, and who are her allies?",
        mode="local",
        include_superseded=True,
        top_k=50,
        **believed,
    )
    out["query_data"] = sorted(
        (
            {k: v for k, v in r.items() if k not in ("score", "channels")}
            for r in answer["relations"]
        ),
        key=lambda r: r["id"],
    )
    return out


async def _head(client: Any, realm: str) -> datetime:
    page = (await client.get(f"/v1/realms/{realm}/changes", params={"after_seq": 0})).json()
    return datetime.fromisoformat(page["changes"][-1]["belief_time"])


async def test_each_phase_read_again_at_its_instant_answers_the_same(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    phases: list[list[DocumentVersion]] = [
        [
            _facts(realm, "a", "2", _rel(*WORKS, "2020")),
            _facts(realm, "b", "2", _rel("Orla Quist", "ally_of", "Ben Arlo")),
        ],
        [
            _facts(realm, "c", "3", _rel(*WORKS, "2019")),  # new provenance, another period
            _facts(realm, "b", "3", _rel("Orla Quist", "enemy_of", "Ben Arlo")),  # replaced
        ],
        [delete(realm, "a"), delete(realm, "c")],  # the fact loses every document
        [_facts(realm, "e", "5", _rel("Orla Quist", "ally_of", "Ben Arlo"))],  # re-asserted
    ]
    saved: list[tuple[datetime, dict[str, Any]]] = []
    published = 0
    async with (
        running_indexer(topics, pg_dsn, group, default_realm=NARRATIVE),
        open_pool(pg_dsn) as pool,
        api_client(pool) as client,
    ):
        for phase in phases:
            await publish(topics, phase)
            published += len(phase)

            async def applied(n: int = published) -> bool:
                return await stored_position(pg_dsn, group, topics.documents) >= n

            await wait_for(applied, 60, "the phase applied")
            saved.append((await _head(client, realm), await _reads(client, realm, None)))
        first = saved[0][1]
        [works] = [r for r in first["relations"] if r["predicate"] == "works_for"]
        assert (works["weight"], works["doc_keys"], works["valid_from"]) == (1, ["a"], "2020")
        [works] = [r for r in saved[1][1]["relations"] if r["predicate"] == "works_for"]
        assert (works["weight"], works["doc_keys"]) == (2, ["a", "c"])
        assert saved[1][1]["document b"][1]["order_key"] == "3"
        for at, then in saved:
            assert await _reads(client, realm, at) == then, at
        # Before the realm's first commit, nothing was believed.
        empty = await _reads(client, realm, saved[0][0].replace(year=2000))
        assert empty["relations"] == [] and empty["entities"] == []
        assert empty["document a"][0] == 404
