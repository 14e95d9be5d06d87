"""DESIGN invariant 2, whatever reads the topic: a record is applied to its realm at most
once — by one consumer group, a second group at the same time or later, the demo and then
`tidegraph indexer` (or the other way round) — and a deleted realm stays deleted for every
record published before its deletion.

Each version is counted on the realm's feed: a record applied twice shows up as a second
``document_indexed`` / ``document_replaced`` for the same version, or as a held realm (its
row ids derive from the record's offset, so a second application collides).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tidegraph.infra.package_files import sample_corpus
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.names import realm_schema
from tidegraph.store import holds, positions, realm_positions
from tidegraph.store.realms import realm_exists

from indexer_helpers import (
    Topics,
    delete,
    make_topics,
    publish,
    running_indexer,
    spawn_indexer,
    stored_position,
    upsert,
    wait_for,
)
from local_services import env_without_settings, run_cli

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

CORPUS = sample_corpus()
DOCUMENT_KINDS = ("document_indexed", "document_replaced", "document_deleted", "document_failed")


def _history(realm: str, docs: int = 6) -> list[DocumentVersion]:
    """Versions without ``source_version`` (nothing but the realm's position can tell a
    second reading from a new version), replaced, re-sent and deleted."""
    out: list[DocumentVersion] = []
    names = ["Ada Lovelace", "Charles Babbage", "Mary Somerville", "John Herschel", "Faraday"]
    for i in range(docs):
        a, b = names[i % len(names)], names[(i + 1) % len(names)]
        out.append(upsert(realm, f"d{i}.md", f"{a} worked with {b}. Version one of {i}."))
    for i in range(docs):
        a, b = names[i % len(names)], names[(i + 2) % len(names)]
        out.append(upsert(realm, f"d{i}.md", f"{a} corresponded with {b}. Version two of {i}."))
    out.append(upsert(realm, "d0.md", out[docs].content or ""))  # a re-send: no-op
    out.append(delete(realm, "d1.md"))
    out.append(upsert(realm, "d1.md", "Ada Lovelace met Charles Babbage. Version three."))
    return out


def _writes(history: list[DocumentVersion]) -> int:
    """Records of ``history`` that write (each once): everything but the re-send."""
    return len(history) - 1


async def _feed(pg_dsn: str, realm: str) -> Counter[str]:
    """Document changes on the realm's feed, by kind."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT kind FROM {} WHERE kind = ANY(%s)").format(
                sql.Identifier(realm_schema(realm), "outbox")
            ),
            (list(DOCUMENT_KINDS),),
        )
        return Counter(str(k) for (k,) in await cur.fetchall())


async def _held(pg_dsn: str, group: str, topics: Topics) -> list[holds.Hold]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        return [h for h in await holds.listed(conn, group) if h.topic == topics.documents]


async def _drained(pg_dsn: str, group: str, topics: Topics, n: int, limit: float = 90) -> None:
    async def done() -> bool:
        return await stored_position(pg_dsn, group, topics.documents) >= n

    await wait_for(done, limit, f"group {group} to pass {n} records")


async def test_two_groups_at_once_apply_each_record_once(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, first, second = unique_name("r"), unique_name("ga"), unique_name("gb")
    history = _history(realm)
    await publish(topics, history)
    async with (
        running_indexer(topics, pg_dsn, first, catch_up_run=0, backoff_max=2),
        running_indexer(topics, pg_dsn, second, catch_up_run=0, backoff_max=2),
    ):
        await _drained(pg_dsn, first, topics, len(history))
        await _drained(pg_dsn, second, topics, len(history))
    feed = await _feed(pg_dsn, realm)
    assert sum(feed.values()) == _writes(history), feed
    assert feed["document_deleted"] == 1
    assert await _held(pg_dsn, first, topics) == [] and await _held(pg_dsn, second, topics) == []
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        stands = await realm_positions.stand(conn, realm_schema(realm), topics.documents, 0)
    assert stands == len(history)


async def test_a_second_group_later_passes_over_what_is_settled(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=2)
    realms = [unique_name("r"), unique_name("s")]
    first, second = unique_name("ga"), unique_name("gb")
    history = [r for realm in realms for r in _history(realm)]
    await publish(topics, history)
    async with running_indexer(topics, pg_dsn, first):
        await _drained(pg_dsn, first, topics, len(history))
    before = {realm: await _feed(pg_dsn, realm) for realm in realms}
    async with running_indexer(topics, pg_dsn, second):  # a new group: reads from offset 0
        await _drained(pg_dsn, second, topics, len(history))
    assert {realm: await _feed(pg_dsn, realm) for realm in realms} == before
    assert all(sum(feed.values()) == _writes(_history(r)) for r, feed in before.items())
    assert await _held(pg_dsn, second, topics) == []


async def test_a_deleted_realm_stays_deleted_for_a_new_group_and_comes_back_by_a_new_record(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, other = unique_name("r"), unique_name("o")
    first, second = unique_name("ga"), unique_name("gb")
    history = _history(realm) + _history(other, docs=2)
    await publish(topics, history)
    async with running_indexer(topics, pg_dsn, first):
        await _drained(pg_dsn, first, topics, len(history))
    env = env_without_settings(
        TIDEGRAPH_KAFKA_BOOTSTRAP=kafka_bootstrap,
        TIDEGRAPH_PG_DSN=pg_dsn,
        TIDEGRAPH_TOPIC_PREFIX=topics.prefix,
        TIDEGRAPH_STATE_DIR=str(tmp_path / "state"),
    )
    done = run_cli(["realm", "delete", realm, "--yes"], env)
    assert done.returncode == 0, done.stderr
    later = upsert(realm, "new.md", "Grace Hopper worked with Howard Aiken.")
    async with running_indexer(topics, pg_dsn, second):  # from offset 0: the old records
        await _drained(pg_dsn, second, topics, len(history))
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            assert not await realm_exists(conn, realm_schema(realm))
        await publish(topics, [later])
        await _drained(pg_dsn, second, topics, len(history) + 1)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT doc_key FROM {}").format(
                sql.Identifier(realm_schema(realm), "documents")
            )
        )
        assert [k for (k,) in await cur.fetchall()] == ["new.md"]
    assert await _feed(pg_dsn, realm) == Counter({"document_indexed": 1})
    assert await _held(pg_dsn, second, topics) == []
    # The first group, restarted from its cursor, agrees.
    async with running_indexer(topics, pg_dsn, first):
        await _drained(pg_dsn, first, topics, len(history) + 1)
    assert await _feed(pg_dsn, realm) == Counter({"document_indexed": 1})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _demo(env: dict[str, str], realm: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidegraph.infra.cli", "demo", "--once", "--realm", realm,
         "--port", str(_free_port())],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


async def _cli_indexer_drains(topics: Topics, pg_dsn: str, group: str, n: int) -> None:
    """`tidegraph indexer` as a user starts it (its own process), until it passed ``n``."""
    proc = spawn_indexer(topics, pg_dsn, group)
    try:
        await _drained(pg_dsn, group, topics, n, limit=120)
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 60)
    assert proc.returncode == 0


async def _log_end(pg_dsn: str, topics: Topics, group: str) -> int:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        return await positions.applied(conn, group, topics.documents)


@pytest.mark.slow
async def test_the_demo_then_the_indexer_and_the_indexer_then_the_demo(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=3)
    env = env_without_settings(
        TIDEGRAPH_KAFKA_BOOTSTRAP=kafka_bootstrap,
        TIDEGRAPH_PG_DSN=pg_dsn,
        TIDEGRAPH_TOPIC_PREFIX=topics.prefix,
        TIDEGRAPH_STATE_DIR=str(tmp_path / "state"),
    )
    # The demo, then `tidegraph indexer` of another group over the same topic.
    demo = unique_name("demo")
    done = await asyncio.to_thread(_demo, env, demo)
    assert done.returncode == 0, done.stderr
    shown = await _feed(pg_dsn, demo)
    published = await _log_end(pg_dsn, topics, "tidegraph-demo")
    assert published >= 7
    after = unique_name("indexer")
    await _cli_indexer_drains(topics, pg_dsn, after, published)
    assert await _feed(pg_dsn, demo) == shown == Counter({"document_indexed": 7})
    assert await _held(pg_dsn, after, topics) == []

    # `tidegraph indexer` first (a corpus published beforehand), then the demo, which
    # publishes the same corpus again and reads the topic with its own group.
    realm = unique_name("first")
    corpus = CORPUS
    done = run_cli(["publish", str(corpus), "--realm", realm], env)
    assert done.returncode == 0, done.stderr
    group = unique_name("indexer")
    await _cli_indexer_drains(topics, pg_dsn, group, published + 7)
    before = await _feed(pg_dsn, realm)
    assert before == Counter({"document_indexed": 7})
    done = await asyncio.to_thread(_demo, env, realm)
    assert done.returncode == 0, done.stderr
    assert await _feed(pg_dsn, realm) == before
    assert await _held(pg_dsn, "tidegraph-demo", topics) == []
