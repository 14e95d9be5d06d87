"""The indexer end to end on the real broker and server (DESIGN invariants 1–8)."""

from __future__ import annotations

import random
from collections.abc import Callable

import psycopg
import pytest

from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.realm_config import preset

from indexer_helpers import (
    Topics,
    dead_letters,
    delete,
    make_topics,
    outbox,
    publish,
    realm_snapshot,
    running_indexer,
    stored_position,
    upsert,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

ADA = "Ada Lovelace worked with Charles Babbage. Charles Babbage designed the Analytical Engine."
ADA2 = "Ada Lovelace worked with Mary Somerville."


async def _applied(pg_dsn: str, group: str, topics: Topics, n: int) -> None:
    async def done() -> bool:
        return await stored_position(pg_dsn, group, topics.documents) >= n

    await wait_for(done, 60, f"{n} records applied")


def _with_wrong_hash(doc: DocumentVersion) -> DocumentVersion:
    return doc.model_copy(update={"content_hash": content_hash("something else")})


async def test_apply_noop_stale_delete_and_dead_letters(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"))
    realm, group = unique_name("r"), unique_name("g")
    first = [
        upsert(realm, "ada.md", ADA, source_version="2"),
        (realm.encode(), b"{not json"),
        _with_wrong_hash(upsert(realm, "x.md", "Some text.")),
    ]
    async with running_indexer(topics, pg_dsn, group):
        await publish(topics, first)
        await _applied(pg_dsn, group, topics, 3)
        snap = await realm_snapshot(pg_dsn, realm)
        changes = await outbox(pg_dsn, realm)
        assert [d[2] for d in snap["documents"]] == ["indexed"]
        assert any(
            r[1:4] == ("Ada Lovelace", "worked_with", "Charles Babbage") for r in snap["relations"]
        )

        # Redelivery of the same version and a stale one: nothing changes at all.
        await publish(
            topics,
            [
                upsert(realm, "ada.md", ADA, source_version="2"),
                upsert(realm, "ada.md", ADA2, source_version="1"),
            ],
        )
        await _applied(pg_dsn, group, topics, 5)
        assert await realm_snapshot(pg_dsn, realm) == snap
        assert await outbox(pg_dsn, realm) == changes

        # A newer version replaces; a delete withdraws.
        await publish(topics, [upsert(realm, "ada.md", ADA2, source_version="3")])
        await _applied(pg_dsn, group, topics, 6)
        snap2 = await realm_snapshot(pg_dsn, realm)
        current = {r[1:4] for r in snap2["relations"] if r[5] == "current"}
        assert current == {("Ada Lovelace", "worked_with", "Mary Somerville")}
        await publish(topics, [delete(realm, "ada.md", source_version="4")])
        await _applied(pg_dsn, group, topics, 7)
        snap3 = await realm_snapshot(pg_dsn, realm)
        assert [d[2] for d in snap3["documents"]] == ["deleted"]
        assert not [r for r in snap3["relations"] if r[5] != "retracted"]
        kinds = [k for _, _, k in await outbox(pg_dsn, realm)]
        assert kinds[0] == "document_indexed"
        assert {
            "document_replaced",
            "document_deleted",
            "relation_retracted",
            "entity_dormant",
        } <= set(kinds)

    dead = await dead_letters(topics, 2)
    assert len(dead) == 2
    classes = sorted(h["tg-error-class"].decode() for _, h in dead)
    assert classes == ["hash_mismatch", "invalid"]
    assert all(h["tg-origin"].decode().startswith(topics.documents + "/") for _, h in dead)


CONFLICT_DOCS = [
    ("d1.md", "1", "Arthur is an ally of Mordred. Lancelot worked with Arthur."),
    ("d2.md", "2", "Arthur is an enemy of Mordred. Gawain worked with Arthur."),
    ("d3.md", "3", "Arthur is an ally of Mordred."),
    ("d4.md", "2", "Lancelot is a rival of Gawain."),
    ("d5.md", "1", "Lancelot is a friend of Gawain. Lancelot never worked with Mordred."),
]


async def test_shuffled_arrival_orders_give_one_current_graph(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"))
    group = unique_name("g")
    realms = [unique_name("r") for _ in range(4)]
    records = []
    for i, realm in enumerate(realms):
        order = list(CONFLICT_DOCS)
        random.Random(i).shuffle(order)
        records.extend(upsert(realm, k, text, order_key=o) for k, o, text in order)
    narrative = preset("narrative", embedder="hashing:64")
    async with running_indexer(topics, pg_dsn, group, default_realm=narrative):
        await publish(topics, records)
        await _applied(pg_dsn, group, topics, len(records))
    snaps = [await realm_snapshot(pg_dsn, r) for r in realms]
    current = [sorted(x for x in s["relations"] if x[5] == "current") for s in snaps]
    assert all(c == current[0] for c in current)
    assert ("default", "Arthur", "ally_of", "Mordred") in {c[:4] for c in current[0]}
    for s in snaps[1:]:
        assert s["relations"] == snaps[0]["relations"]
        assert s["entities"] == snaps[0]["entities"]


async def test_two_documents_same_triple_concurrently(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    docs = [
        upsert(realm, f"d{i}.md", "Ada Lovelace worked with Charles Babbage.") for i in range(20)
    ]
    async with running_indexer(topics, pg_dsn, group, prepare_concurrency=8):
        await publish(topics, docs)
        await _applied(pg_dsn, group, topics, 20)
    snap = await realm_snapshot(pg_dsn, realm)
    rels = [
        r for r in snap["relations"] if r[1:4] == ("Ada Lovelace", "worked_with", "Charles Babbage")
    ]
    assert len(rels) == 1 and rels[0][6] == 20
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute(
            f"SELECT count(*) FROM realm_{realm}.entities WHERE name_key = 'ada lovelace'"
        )
        assert (await cur.fetchone()) == (1,)


async def test_names_beyond_ascii_resolve_to_one_entity_whatever_the_collation(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    # Letter case outside ASCII is folded by the indexer, not by the database's lower(),
    # which under the C locale leaves "Å" as it is.
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=2)
    realm, group = unique_name("r"), unique_name("g")
    docs = [
        upsert(realm, "a.md", "Olga Åberg worked with Ada Lovelace."),
        upsert(realm, "b.md", "Olga Åberg worked with Émile Zola."),
        upsert(realm, "c.md", "OLGA ÅBERG worked with Émile Zola."),
    ]
    async with running_indexer(topics, pg_dsn, group) as indexer:
        await publish(topics, docs)

        async def done() -> bool:
            return indexer.applied == len(docs)

        await wait_for(done, 60, "every record applied")
    snap = await realm_snapshot(pg_dsn, realm)
    assert {d[1]: d[2] for d in snap["documents"]} == dict.fromkeys(
        ("a.md", "b.md", "c.md"), "indexed"
    )
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute(
            f"SELECT name FROM realm_{realm}.entities WHERE name_key = 'olga åberg'"
        )
        assert await cur.fetchall() == [("Olga Åberg",)]
    zola = [r for r in snap["relations"] if r[3] == "Émile Zola"]
    assert len(zola) == 1 and zola[0][6] == 2
