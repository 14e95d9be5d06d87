"""End to end: documents published to Kafka, applied by a real `tidegraph indexer` process
(offline extractor, hashing embedder), read back through the query API."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tidegraph.connectors.producer import DocumentProducer
from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.indexer.communities.detect import ClusterParams
from tidegraph.indexer.communities.store import build_communities
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.realm_config import preset
from tidegraph.schemas.topics import topic_specs
from tidegraph.store.realms import create_realm, ensure_control, open_realm

from query_helpers import api_client, open_pool, query_data, triples

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.postgres]

DOCS = [
    ("saga/1.md", "default", "0001", "Arthur was an ally of Mordred."),
    ("saga/2.md", "default", "0002", "Arthur became an enemy of Mordred."),
    (
        "bio/ada.md",
        "default",
        "0003",
        "Ada Lovelace worked with Charles Babbage from 1833 to 1852. "
        "Mary Somerville never worked with Charles Babbage.",
    ),
    ("notes/b.md", "other", "0004", "Grace Hopper worked with Howard Aiken."),
]


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


async def _position(conn: psycopg.AsyncConnection[Any], group: str, topic: str) -> int:
    cur = await conn.execute(
        "SELECT coalesce(sum(next_offset), 0) FROM tidegraph.consumer_positions"
        " WHERE group_id = %s AND topic = %s",
        (group, topic),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _applied(conn: psycopg.AsyncConnection[Any], group: str, topic: str, n: int) -> None:
    async with asyncio.timeout(90):
        while True:
            if await _position(conn, group, topic) >= n:
                return
            await asyncio.sleep(0.1)


def _start_indexer(prefix: str, group: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidegraph.infra.cli",
            "indexer",
            "--topic-prefix",
            prefix,
            "--group",
            group,
            "--log-level",
            "WARNING",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _publish(bootstrap: str, topic: str, realm: str, at: datetime) -> None:
    async with DocumentProducer(bootstrap, topic) as producer:
        for i, (key, space, order, text) in enumerate(DOCS):
            doc = DocumentVersion.for_upsert(
                realm,
                key,
                text,
                space=space,
                order_key=order,
                event_time=at + timedelta(seconds=i),
            )
            await producer.publish(doc)


async def test_a_realm_indexed_through_the_pipeline(
    pg_dsn: str,
    kafka_bootstrap: str,
    pool: AsyncConnectionPool[Any],
    unique_name: Callable[[str], str],
) -> None:
    prefix, realm, group = unique_name("qp"), unique_name("qp"), unique_name("g")
    documents = f"{prefix}.documents"
    await ensure_topic_specs(kafka_bootstrap, list(topic_specs(prefix, partitions=1)))
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(conn, realm, preset("narrative", embedder="hashing:384"))
        env = {
            **os.environ,
            "TIDEGRAPH_PG_DSN": pg_dsn,
            "TIDEGRAPH_KAFKA_BOOTSTRAP": kafka_bootstrap,
        }
        indexer = _start_indexer(prefix, group, env)
        try:
            at = datetime.now().astimezone()
            await _publish(kafka_bootstrap, documents, realm, at)
            await _applied(conn, group, documents, len(DOCS))
            embedder = HashingEmbedder(384)
            async with api_client(pool, embedder=embedder) as client:
                await _check_reads(client, realm)
                await _check_communities(conn, client, realm, embedder)
                head = (await client.get(f"/v1/realms/{realm}/changes")).json()["head_seq"]
                # re-sending the same documents changes nothing: no commit, no change
                await _publish(kafka_bootstrap, documents, realm, at)
                await _applied(conn, group, documents, 2 * len(DOCS))
                again = (
                    await client.get(f"/v1/realms/{realm}/changes", params={"after_seq": head})
                ).json()
                assert again["changes"] == [] and again["head_seq"] == head
        finally:
            indexer.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(indexer.wait, 30)
            except subprocess.TimeoutExpired:
                indexer.kill()


async def _check_communities(
    conn: psycopg.AsyncConnection[Any],
    client: httpx.AsyncClient,
    realm: str,
    embedder: HashingEmbedder,
) -> None:
    """Global mode ranks the reports of a real community build, with their findings."""
    info = await open_realm(conn, realm)
    await build_communities(conn, info, embedder, params=ClusterParams(min_size=2))
    out = await query_data(client, realm, query="What are the main themes?", mode="global")
    assert out["communities"], "a built realm's reports reach global mode"
    assert all(c["space"] == "default" and c["title"] for c in out["communities"])
    assert any(c["findings"] for c in out["communities"])
    assert not out["stats"]["warnings"]
    feed = (await client.get(f"/v1/realms/{realm}/changes", params={"limit": 1000})).json()
    assert "communities_built" in {c["kind"] for c in feed["changes"]}


async def _check_reads(client: httpx.AsyncClient, realm: str) -> None:
    for mode in ("mix", "local", "global", "hybrid", "naive", "bypass"):
        out = await query_data(client, realm, query="Who worked with Charles Babbage?", mode=mode)
        if mode not in ("naive", "bypass"):
            assert out["relations"], mode
        if mode in ("mix", "local", "hybrid", "naive"):
            assert out["chunks"], mode
    got = await query_data(client, realm, query="Who worked with Charles Babbage?")
    rels = {(r["subject"], r["predicate"], r["object"]): r for r in got["relations"]}
    worked = rels[("Ada Lovelace", "worked_with", "Charles Babbage")]
    assert (worked["valid_from"], worked["valid_to"]) == ("1833", "1852")
    assert worked["doc_keys"] == ["bio/ada.md"]
    # worked_with is symmetric in the preset: stored once, its ends ordered by name
    denied = rels.get(("Charles Babbage", "worked_with", "Mary Somerville"))
    assert denied is not None and denied["negated"] is True
    for as_of, present in (("1820-01-01", False), ("1840-06-01", True), ("1900-01-01", False)):
        out = await query_data(client, realm, query="Ada Lovelace Charles Babbage", as_of=as_of)
        assert (("Ada Lovelace", "worked_with", "Charles Babbage") in triples(out)) is present

    # supersession: ally_of then enemy_of; belief time from the change feed
    feed = (await client.get(f"/v1/realms/{realm}/changes", params={"limit": 1000})).json()
    superseded = [c for c in feed["changes"] if c["kind"] == "relation_superseded"]
    assert superseded and superseded[0]["relation"]["predicate"] == "ally_of"
    instant = datetime.fromisoformat(superseded[0]["belief_time"].replace("Z", "+00:00"))
    ask = {"query": "Arthur Mordred", "relation_types": ["ally_of", "enemy_of"]}
    before = await query_data(
        client, realm, **ask, as_believed_at=(instant - timedelta(milliseconds=1)).isoformat()
    )
    assert triples(before) == {("Arthur", "ally_of", "Mordred")}
    after = await query_data(client, realm, **ask, as_believed_at=instant.isoformat())
    assert triples(after) == {("Arthur", "enemy_of", "Mordred")}
    both = await query_data(client, realm, **ask, include_superseded=True)
    assert triples(both) == {("Arthur", "ally_of", "Mordred"), ("Arthur", "enemy_of", "Mordred")}

    # spaces: the default space never sees the other space's graph; `*` does
    scoped = await query_data(client, realm, query="Grace Hopper Howard Aiken")
    assert all(r["space"] == "default" for r in scoped["relations"])
    everywhere = await query_data(client, realm, query="Grace Hopper Howard Aiken", space="*")
    assert ("Grace Hopper", "worked_with", "Howard Aiken") in triples(everywhere)
    doc = await client.get(f"/v1/realms/{realm}/documents/notes/b.md", params={"space": "other"})
    assert doc.status_code == 200 and doc.json()["status"] == "indexed"
