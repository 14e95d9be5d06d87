"""A live indexer that is behind writes a realm's run of records in one transaction; the
result is the record-by-record result, row for row (DESIGN invariant 5).

The same log goes through two indexers into two databases: one writing every record on
its own, one in catch-up runs. Every row of every table of each realm must be equal —
ids, belief stamps, history and outbox included — and a run must really have been written
in catch-up (the metric counts it), with records for the DLQ and a second realm breaking
the runs up.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg import sql

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

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

TABLES = (
    "documents",
    "chunks",
    "entities",
    "entity_aliases",
    "mentions",
    "relations",
    "relation_sources",
    "relation_history",
    "outbox",
)
NAMES = ["Arthur Pendragon", "Mordred Orkney", "Lancelot Lac", "Merlin Ambrosius", "Gawain"]
VERBS = ["became an ally of", "became an enemy of", "worked with"]


def _log(realms: list[str], seed: int) -> list[DocumentVersion | tuple[bytes, bytes]]:
    """Upserts, re-sends (as they were, or with a higher version), deletes, stale and
    unversioned versions of a few documents, in
    blocks per realm (long blocks catch up, short ones do not), with a record for the DLQ."""
    rng = random.Random(seed)
    out: list[DocumentVersion | tuple[bytes, bytes]] = []
    version = {r: 0 for r in realms}
    for block in range(8):
        realm = realms[block % len(realms)]
        for _ in range(rng.choice([3, 20, 30])):
            doc = f"d{rng.randrange(5)}.md"
            roll = rng.random()
            if roll < 0.15:
                out.append(delete(realm, doc))
                continue
            a, b = rng.sample(NAMES, 2)
            text = f"{a} {rng.choice(VERBS)} {b}."
            if roll < 0.3:
                out.append(upsert(realm, doc, text, source_version="1"))  # stale, mostly
            elif roll < 0.45:
                out.append(upsert(realm, doc, text))  # unversioned
            else:
                version[realm] += 1
                out.append(
                    upsert(
                        realm,
                        doc,
                        text,
                        order_key=str(rng.randrange(4)),
                        source_version=str(version[realm]),
                    )
                )
            last = out[-1]
            if isinstance(last, DocumentVersion) and rng.random() < 0.2:
                out.append(last)  # a re-send
            if isinstance(last, DocumentVersion) and last.source_version and rng.random() < 0.2:
                version[realm] += 1  # the same content, a higher version: only remembered
                out.append(last.model_copy(update={"source_version": str(version[realm])}))
        if block == 3:
            out.append((realm.encode(), b"not json"))
    return out


async def _rows(dsn: str, realm: str) -> dict[str, list[str]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        out: dict[str, list[str]] = {}
        for table in TABLES:
            cur = await conn.execute(
                # applied_at is the wall clock of the write, the one column allowed to differ
                sql.SQL("SELECT (to_jsonb(t) - 'applied_at')::text FROM {} t").format(
                    sql.Identifier(f"realm_{realm}", table)
                )
            )
            out[table] = sorted(str(r[0]) for r in await cur.fetchall())
        return out


async def _index(topics: Topics, dsn: str, group: str, n: int, **kw: Any) -> None:
    async with running_indexer(
        topics, dsn, group, default_realm=preset("narrative", embedder="hashing:64"), **kw
    ):

        async def done() -> bool:
            return await stored_position(dsn, group, topics.documents) >= n

        await wait_for(done, 120, "every record applied")


def _caught_up() -> float:
    return REGISTRY.get_sample_value("tidegraph_indexer_catch_up_records_total") or 0.0


async def test_catch_up_runs_write_what_record_by_record_writes(
    kafka_bootstrap: str, pg_dsn: str, own_database: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realms = [unique_name("r"), unique_name("r")]
    log = _log(realms, seed=7)
    await publish(topics, log)

    before = _caught_up()
    await _index(topics, pg_dsn, unique_name("g"), len(log), catch_up_run=0)
    assert _caught_up() == before  # record by record

    await _index(topics, own_database, unique_name("g"), len(log), catch_up_run=8)
    assert _caught_up() - before >= 40  # the long blocks were caught up

    for realm in realms:
        one_by_one, caught_up = await _rows(pg_dsn, realm), await _rows(own_database, realm)
        assert one_by_one["relation_history"] and one_by_one["outbox"]
        for table in TABLES:
            assert caught_up[table] == one_by_one[table], table
