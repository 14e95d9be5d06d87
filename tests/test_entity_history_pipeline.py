"""Entity attributes in belief time through the real pipeline: documents on Kafka, the live
indexer, the query service's ``as_believed_at`` reads and change feed, and a replay that
rebuilds the same attribute history (DESIGN invariant 6)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.indexer.replay.diff import diff_schemas
from tidegraph.indexer.replay.rebuild import ReplayOptions, replay_realm
from tidegraph.infra.composition import ModelRegistry

from indexer_helpers import (
    delete,
    make_topics,
    outbox,
    publish,
    running_indexer,
    stored_position,
    upsert,
    wait_for,
)
from query_helpers import api_client, open_pool

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

V1 = "Merlin Ambrosius was a wizard at the court of Camelot. Arthur Pendragon worked with Merlin."
V2 = "Merlin Ambrosius was a poet. Arthur Pendragon worked with Merlin Ambrosius."


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


async def _merlin(client: Any, realm: str, at: datetime | None = None) -> tuple[str, str]:
    params: dict[str, Any] = {"name": "Merlin Ambrosius", "include_dormant": "true"}
    if at is not None:
        params["as_believed_at"] = at.isoformat()
    r = await client.get(f"/v1/realms/{realm}/entities", params=params)
    assert r.status_code == 200, r.text
    [merlin] = [e for e in r.json()["entities"] if e["name"] == "Merlin Ambrosius"]
    return merlin["type"], merlin["description"]


async def test_versions_withdrawal_and_replay_keep_one_attribute_history(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    pool: AsyncConnectionPool[Any],
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    instants: list[datetime] = []
    async with running_indexer(topics, pg_dsn, group):
        for n, record in enumerate(
            [
                upsert(realm, "merlin.md", V1, source_version="1"),
                upsert(realm, "merlin.md", V2, source_version="2"),
                delete(realm, "merlin.md", source_version="3"),
            ],
            start=1,
        ):
            await publish(topics, [record])

            async def done(n: int = n) -> bool:
                return await stored_position(pg_dsn, group, topics.documents) >= n

            await wait_for(done, 60, f"record {n} applied")
            await asyncio.sleep(0.05)
            instants.append(datetime.now(UTC))
            await asyncio.sleep(0.05)

    async with api_client(pool) as client:
        assert await _merlin(client, realm, instants[0]) == (
            "Person",
            "a wizard at the court of Camelot",
        )
        assert await _merlin(client, realm, instants[1]) == ("Person", "a poet")
        assert await _merlin(client, realm, instants[2]) == ("Concept", "")
        assert await _merlin(client, realm) == ("Concept", "")

    # The delete's commit reports the description gone.
    last_seq = max(seq for seq, _, _ in await outbox(pg_dsn, realm))
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT payload -> 'entity' FROM {}.outbox"
                " WHERE seq = %s AND kind = 'entity_updated'"
            ).format(sql.Identifier(f"realm_{realm}")),
            (last_seq,),
        )
        updated = [row[0] for row in await cur.fetchall()]
    assert [(e["name"], e["type"], e["description"]) for e in updated] == [
        ("Merlin Ambrosius", "Concept", "")
    ]

    registry = ModelRegistry()
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
    rebuilt = await replay_realm(
        ReplayOptions(
            realm=realm,
            bootstrap=topics.bootstrap,
            pg_dsn=pg_dsn,
            topic=topics.documents,
            swap=False,
            label="history",
        ),
        pipeline.prepare,
        registry.embedder_for,
    )
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        live = f"realm_{realm}"
        assert await diff_schemas(conn, live, rebuilt.schema, history=True) == []
        # Not vacuous: the live realm's history holds Merlin's three beliefs.
        cur = await conn.execute(
            sql.SQL(
                "SELECT h.description FROM {s}.entity_history h"
                " JOIN {s}.entities e ON e.id = h.entity_id"
                " WHERE e.name = 'Merlin Ambrosius' ORDER BY h.t_created"
            ).format(s=sql.Identifier(live))
        )
        assert [r[0] for r in await cur.fetchall()] == [
            "a wizard at the court of Camelot",
            "a poet",
            "",
        ]
