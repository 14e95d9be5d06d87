"""A document that mentions an archived entity again restores it (paper §6.1: archival is
a reversible demotion of what nobody asked about; a new mention is new evidence of its
value). The restoring is part of the write — the same commit as the document, with
``entity_unarchived`` on the feed — so the live indexer and a replay do it alike."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tidegraph.indexer.retention.archive import archive
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel

pytestmark = pytest.mark.postgres

ON = RealmConfig(embedder="hashing:8", coverage_telemetry=True)
ADA, BAB, NEWTON, HALLEY = "Ada Lovelace", "Charles Babbage", "Isaac Newton", "Edmond Halley"


@pytest.fixture
async def g(pg_dsn: str, unique_name: Callable[[str], str]) -> AsyncIterator[GraphHarness]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        yield await GraphHarness.create(conn, unique_name("rm"), ON)


async def _archived(g: GraphHarness) -> set[str]:
    cur = await g.conn.execute(
        sql.SQL("SELECT name FROM {} WHERE archived_since IS NOT NULL").format(
            sql.Identifier(g.info.schema, "entities")
        )
    )
    return {str(r[0]) for r in await cur.fetchall()}


async def _commit(g: GraphHarness, seq: int) -> list[tuple[str, Any]]:
    cur = await g.conn.execute(
        sql.SQL(
            "SELECT kind, payload -> 'entity' ->> 'name' FROM {} WHERE seq = %s ORDER BY idx"
        ).format(sql.Identifier(g.info.schema, "outbox")),
        (seq,),
    )
    return [(str(k), n) for k, n in await cur.fetchall()]


async def _ids(g: GraphHarness, *names: str) -> list[int]:
    cur = await g.conn.execute(
        sql.SQL("SELECT id FROM {} WHERE name = ANY(%s) ORDER BY id").format(
            sql.Identifier(g.info.schema, "entities")
        ),
        (list(names),),
    )
    return [int(r[0]) for r in await cur.fetchall()]


async def test_a_new_mention_unarchives_in_the_documents_commit(g: GraphHarness) -> None:
    await g.upsert("a.md", [([ent(ADA), ent(BAB)], [rel(ADA, "worked_with", BAB)])])
    await g.upsert("b.md", [([ent(NEWTON), ent(HALLEY)], [rel(NEWTON, "worked_with", HALLEY)])])
    done = await archive(g.conn, g.info, await _ids(g, NEWTON, HALLEY, BAB))
    assert len(done.entity_ids) == 3
    assert await _archived(g) == {NEWTON, HALLEY, BAB}

    # a document naming nobody archived restores nobody
    quiet = await g.upsert("c.md", [([ent(ADA)], [])])
    assert await _archived(g) == {NEWTON, HALLEY, BAB}
    assert not any(k == "entity_unarchived" for k, _ in await _commit(g, quiet.seq))

    # a document naming Newton (as a relation's end) restores him, in its own commit
    named = await g.upsert("d.md", [([ent(ADA)], [rel(ADA, "corresponded_with", NEWTON)])])
    assert await _archived(g) == {HALLEY, BAB}
    assert ("entity_unarchived", NEWTON) in await _commit(g, named.seq)
    assert "entity_unarchived" in named.kinds

    # a new version of a document that still names Babbage is a mention too; withdrawing
    # Halley's last mention leaves him archived (and dormant)
    again = await g.upsert("a.md", [([ent(ADA), ent(BAB)], [])], content="sha256:" + "1" * 64)
    assert ("entity_unarchived", BAB) in await _commit(g, again.seq)
    gone = await g.delete("b.md")
    assert await _archived(g) == {HALLEY}
    assert ("entity_dormant", HALLEY) in await _commit(g, gone.seq)
    assert not any(k == "entity_unarchived" for k, _ in await _commit(g, gone.seq))
    # … and mentioned again, he is both revived and restored
    back = await g.upsert("e.md", [([ent(HALLEY)], [])])
    assert await _archived(g) == set()
    kinds = [k for k, n in await _commit(g, back.seq) if n == HALLEY]
    # (his type and description come back with the mention: entity_updated beside them)
    assert [k for k in kinds if k != "entity_updated"] == ["entity_revived", "entity_unarchived"]
