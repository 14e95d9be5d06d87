"""Debezium and Kafka Connect, end to end on the real broker and server.

One Kafka Connect worker (distributed mode, SASL to the session's broker) serves the whole
module. A real Debezium PostgreSQL connector captures tables of the session's server; the
real `tidegraph connect debezium` process turns its topics into document versions; a real
indexer applies them. Text mode: 300 rows snapshotted, then inserted, updated, deleted and
truncated while the source runs, the source SIGKILLed twice; after each phase the realm's
documents equal the table's rows. Facts mode: people, companies and employments; after each
phase the current relations equal an SQL join of the tables. And Kafka's FileStreamSink
writes a realm's changes topic to a file equal to its feed.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

from tidegraph.infra import connect_configs, local_connect
from tidegraph.schemas.hashing import content_hash

from connector_helpers import read_topic  # type: ignore[import-not-found]
from debezium_helpers import Worker, connect_worker, document_states, drop_slot
from faults.fault_helpers import check_changes, cli, running_publisher, sigkill, stop
from indexer_helpers import (
    Topics,
    delete,
    make_topics,
    outbox,
    publish,
    running_indexer,
    upsert,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

_MODULE_STARTED = time.monotonic()


@pytest.fixture(scope="module")
def worker(kafka_bootstrap: str, pg_dsn: str) -> Iterator[Worker]:
    group = f"tgconnect-{uuid.uuid4().hex[:8]}"
    with connect_worker(kafka_bootstrap, pg_dsn, group) as running:
        yield running
    print(f"\ntest_debezium: module took {time.monotonic() - _MODULE_STARTED:.1f}s")


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        yield conn


def _body(n: int, v: int) -> str:
    return f"Person{n} Lovelace worked with Person{n} Babbage, version {v}."


def _source(
    worker: Worker, topics: Topics, realm: str, mapping: Path, pattern: str, *extra: str
) -> Any:
    args = (
        "connect", "debezium", "--topics", pattern, "--realm", realm,
        "--mapping", str(mapping), "--topic-prefix", topics.prefix, *extra,
    )  # fmt: skip
    return cli(*args, env={"TIDEGRAPH_KAFKA_BOOTSTRAP": worker.bootstrap}, name=f"dbz-{realm}")


async def _rows(db: psycopg.AsyncConnection[Any], table: sql.Composable) -> dict[int, str]:
    cur = await db.execute(sql.SQL("SELECT id, body FROM {}").format(table))
    return {int(i): str(b) for i, b in await cur.fetchall()}


async def _graph_equals_table(
    pg_dsn: str, db: psycopg.AsyncConnection[Any], realm: str, schema: str, limit: float
) -> None:
    table = sql.Identifier(schema, "articles")

    async def equal() -> bool:
        rows = await _rows(db, table)
        expected = {f"{schema}.articles/{i}": content_hash(b) for i, b in rows.items()}
        stored = await document_states(pg_dsn, realm)
        indexed = {k: h for k, (s, h) in stored.items() if s == "indexed"}
        others = {s for k, (s, _) in stored.items() if k not in expected}
        return indexed == expected and others <= {"deleted"}

    await wait_for(equal, limit, "the realm's documents to equal the table's rows", interval=0.5)


async def test_text_rows_through_debezium_survive_two_sigkills(
    worker: Worker,
    db: psycopg.AsyncConnection[Any],
    pg_dsn: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    schema, realm, group = unique_name("dbz"), unique_name("r"), unique_name("g")
    prefix, slot = unique_name("dbzt"), unique_name("tgdbz_")
    topics = await make_topics(kafka_bootstrap, unique_name("tp"), partitions=2)
    table = sql.Identifier(schema, "articles")
    await db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    await db.execute(
        sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, body text, title text)").format(table)
    )
    await db.execute(
        sql.SQL("INSERT INTO {} SELECT i, %s || i || ' Lovelace worked with Person' || i"
                " || ' Babbage, version 0.', 'Row ' || i FROM generate_series(1, 300) i"
                ).format(table),
        ("Person",),
    )  # fmt: skip
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(
        f"tables:\n  {schema}.articles:\n    key: id\n    content: body\n    title: title\n"
    )
    config = connect_configs.debezium_postgres(
        dsn=pg_dsn, password=worker.secret("pg.password"), tables=[f"{schema}.articles"],
        topic_prefix=prefix, slot=slot, schemas=False, heartbeat_ms=500,
    )  # fmt: skip
    local_connect.put_connector(worker.url, prefix, config)
    # Heartbeats and transaction boundaries match the pattern too: they are passed over.
    pattern = f"{prefix}\\..*|__debezium-heartbeat\\.{prefix}"
    source = _source(worker, topics, realm, mapping, pattern)
    kills, killed_at = 0, list[tuple[float, int]]()
    try:
        local_connect.wait_running(worker.url, prefix)
        async with running_indexer(topics, pg_dsn, group):
            await _graph_equals_table(pg_dsn, db, realm, schema, 180)  # the snapshot
            live = set(range(1, 301))
            upsert = sql.SQL(
                "INSERT INTO {} VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE"
                " SET body = excluded.body"
            ).format(table)
            for n in range(1, 301):
                key = (n * 7) % 400 + 1
                if key in live and n % 5 == 0:
                    await db.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(table), (key,))
                    live.discard(key)
                else:
                    await db.execute(upsert, (key, _body(key, n), f"Row {key}"))
                    live.add(key)
                if n in (100, 200):
                    # cut it while the rows written just now are still on their way
                    sigkill(source)
                    kills += 1
                    killed_at.append((time.time(), n))
                    source = _source(worker, topics, realm, mapping, pattern)
                await asyncio.sleep(0.005)
            await _graph_equals_table(pg_dsn, db, realm, schema, 180)
            await db.execute(sql.SQL("TRUNCATE {}").format(table))
            await _graph_equals_table(pg_dsn, db, realm, schema, 120)
            stored = await document_states(pg_dsn, realm)
            assert stored and all(s == "deleted" for s, _ in stored.values())
            await db.execute(upsert, (7, _body(7, 999), "Row 7"))
            await _graph_equals_table(pg_dsn, db, realm, schema, 120)
    finally:
        stop(source)
        local_connect.delete_connector(worker.url, prefix)
        await drop_slot(db, slot)
        await db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    assert kills == 2
    raw = await read_topic(kafka_bootstrap, topics.documents, expected=1, within=2.0)
    records = [orjson.loads(r.value) for r in raw]
    versions = {(r["doc_key"], r["source_version"]) for r in records}
    # Each kill landed mid-stream: versions written before it were published only after
    # it, by the source that replaced the killed one.
    published = [
        (r.timestamp / 1000, int(m.group(1)))
        for r in raw
        if (m := re.search(r"version (\d+)\.", orjson.loads(r.value).get("content") or ""))
    ]
    for t, n in killed_at:
        assert any(at > t and v <= n for at, v in published), f"nothing was in flight at kill {n}"
    # None was applied twice, whether or not the kills made the source publish some
    # versions again (at-least-once): every row's applied texts (its chunks, in the order
    # they were written) carry strictly increasing version numbers — a version applied
    # again, or an older one after a newer, would repeat or step back.
    applied = await _applied_versions(pg_dsn, realm)
    for doc_key, numbers in applied.items():
        assert numbers == sorted(set(numbers)), f"{doc_key} applied {numbers}"
    changes = await outbox(pg_dsn, realm)
    seqs = sorted({s for s, _, _ in changes})
    assert seqs == list(range(1, len(seqs) + 1)), "outbox sequence has a gap"
    print(
        f"\nDebezium text: {len(records)} records for {len(versions)} versions, "
        f"{sum(map(len, applied.values()))} applied, kills {kills}"
    )


async def _applied_versions(pg_dsn: str, realm: str) -> dict[str, list[int]]:
    """doc_key → the version number of each text applied to it, in the order written."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT doc_key, text FROM {}.chunks WHERE ordinal = 0 ORDER BY id").format(
                sql.Identifier(f"realm_{realm}")
            )
        )
        out: dict[str, list[int]] = {}
        for doc_key, text in await cur.fetchall():
            out.setdefault(str(doc_key), []).append(int(str(text).rsplit(" ", 1)[1].rstrip(".")))
        return out


FACTS = """
tables:
  {s}.people:
    key: id
    entity: {{name: full_name, type: Person, description: bio}}
  {s}.companies:
    key: id
    entity: {{name: name, type_column: kind}}
  {s}.employments:
    key: id
    subject: {{column: person_id, references: {s}.people}}
    relations:
      - predicate: works_at
        column: company_id
        references: {s}.companies
        valid_from: started_on
        valid_to: ended_on
"""


async def _join(db: psycopg.AsyncConnection[Any], schema: str) -> list[tuple[Any, ...]]:
    cur = await db.execute(
        sql.SQL(
            "SELECT p.full_name, 'works_at', c.name, e.started_on::text, e.ended_on::text"
            " FROM {s}.employments e JOIN {s}.people p ON p.id = e.person_id"
            " JOIN {s}.companies c ON c.id = e.company_id"
        ).format(s=sql.Identifier(schema))
    )
    return sorted(tuple(r) for r in await cur.fetchall())


async def _current_relations(pg_dsn: str, realm: str) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        try:
            cur = await conn.execute(
                sql.SQL(
                    "SELECT es.name, r.predicate, eo.name, r.valid_from, r.valid_to"
                    " FROM {s}.relations r JOIN {s}.entities es ON es.id = r.subject_id"
                    " JOIN {s}.entities eo ON eo.id = r.object_id WHERE r.status = 'current'"
                ).format(s=sql.Identifier(f"realm_{realm}"))
            )
        except psycopg.errors.UndefinedTable:
            return []
        return sorted(tuple(r) for r in await cur.fetchall())


async def test_facts_through_debezium_equal_the_join_after_each_phase(
    worker: Worker,
    db: psycopg.AsyncConnection[Any],
    pg_dsn: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    schema, realm, group = unique_name("dbf"), unique_name("r"), unique_name("g")
    prefix, slot = unique_name("dbzf"), unique_name("tgdbf_")
    topics = await make_topics(kafka_bootstrap, unique_name("tp"), partitions=2)
    s = sql.Identifier(schema)

    async def run(query: str, *params: object) -> None:
        await db.execute(sql.SQL(query).format(s=s), params or None)  # type: ignore[arg-type]

    await run("CREATE SCHEMA {s}")
    await run("CREATE TABLE {s}.people (id int PRIMARY KEY, full_name text, bio text)")
    await run("CREATE TABLE {s}.companies (id int PRIMARY KEY, name text, kind text)")
    await run(
        "CREATE TABLE {s}.employments (id int PRIMARY KEY, person_id int REFERENCES {s}.people,"
        " company_id int REFERENCES {s}.companies, started_on date NOT NULL, ended_on date)"
    )
    await run(
        "INSERT INTO {s}.people SELECT i, 'Person' || i || ' Quill', 'Bio ' || i"
        " FROM generate_series(1, 120) i"
    )
    await run(
        "INSERT INTO {s}.companies SELECT i, 'Company' || i || ' Works', 'Company'"
        " FROM generate_series(1, 12) i"
    )
    await run(
        "INSERT INTO {s}.employments SELECT i, i, i % 12 + 1, date '2019-01-01' + i, NULL"
        " FROM generate_series(1, 120) i"
    )
    mapping = tmp_path / "facts.yaml"
    mapping.write_text(FACTS.format(s=schema))
    tables = [f"{schema}.{t}" for t in ("people", "companies", "employments")]
    config = connect_configs.debezium_postgres(
        dsn=pg_dsn, password=worker.secret("pg.password"), tables=tables,
        topic_prefix=prefix, slot=slot, schemas=True,
    )  # fmt: skip
    local_connect.put_connector(worker.url, prefix, config)
    source = _source(worker, topics, realm, mapping, f"{prefix}\\..*", "--lookup-dsn", pg_dsn)

    async def agrees(what: str) -> None:
        async def same() -> bool:
            return await _current_relations(pg_dsn, realm) == await _join(db, schema)

        try:
            await wait_for(same, 180, f"the graph to equal the join ({what})", interval=0.5)
        except AssertionError:
            graph, join = set(await _current_relations(pg_dsn, realm)), set(await _join(db, schema))
            raise AssertionError(
                f"{what}: graph only {sorted(graph - join)[:5]}, join only "
                f"{sorted(join - graph)[:5]}"
            ) from None

    try:
        local_connect.wait_running(worker.url, prefix)
        async with running_indexer(topics, pg_dsn, group):
            await agrees("snapshot")
            assert len(await _join(db, schema)) == 120
            await run("INSERT INTO {s}.people VALUES (121, 'Di Sorrel', 'Clerk')")
            await run("INSERT INTO {s}.employments VALUES (121, 121, 3, '2024-07-01', NULL)")
            await agrees("inserts")
            await run("UPDATE {s}.employments SET company_id = 5 WHERE id <= 20")  # foreign keys
            await run(
                "UPDATE {s}.employments SET ended_on = '2024-06-30' WHERE id BETWEEN 101 AND 120"
            )
            await run("UPDATE {s}.people SET bio = 'Chief engineer' WHERE id = 1")  # text
            await agrees("updates")
            await run("DELETE FROM {s}.employments WHERE id % 3 = 0")
            await agrees("deletes")
            await run("TRUNCATE {s}.employments")
            await agrees("truncate")
            assert await _current_relations(pg_dsn, realm) == []
    finally:
        stop(source)
        local_connect.delete_connector(worker.url, prefix)
        await drop_slot(db, slot)
        await db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(s))


async def test_file_stream_sink_writes_a_realms_feed(
    worker: Worker,
    pg_dsn: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """Kafka's own FileStreamSink (connect-file 4.3.1 in the 4.4.0 worker) reads the changes
    topic with StringConverter: the file holds each change of the realm, in order, once."""
    realm, group, name = unique_name("r"), unique_name("g"), unique_name("sink")
    topics = await make_topics(kafka_bootstrap, unique_name("tp"), partitions=2)
    out = tmp_path / "changes.jsonl"
    docs = [upsert(realm, f"d{i}", _body(i, 1)) for i in range(6)]
    docs += [upsert(realm, "d0", _body(0, 2)), delete(realm, "d1")]
    await publish(topics, docs)
    async with running_indexer(topics, pg_dsn, group), running_publisher(topics, pg_dsn, [realm]):

        async def indexed() -> bool:
            states = await document_states(pg_dsn, realm)
            return (
                len(states) == 6
                and states["d1"][0] == "deleted"
                and states["d0"][1] == (content_hash(_body(0, 2)))
            )

        await wait_for(indexed, 120, "every document applied", interval=0.3)
        count = await check_changes(topics, pg_dsn, realm)
        local_connect.put_connector(
            worker.url, name, connect_configs.file_sink(topic=topics.changes, path=str(out))
        )
        try:
            local_connect.wait_running(worker.url, name)

            async def written() -> bool:
                return out.exists() and len(out.read_text().splitlines()) >= count

            await wait_for(written, 120, "the sink to write every change", interval=0.5)
        finally:
            local_connect.delete_connector(worker.url, name)
    lines = [orjson.loads(line) for line in out.read_text().splitlines()]
    feed = [orjson.loads(r.value) for r in await read_topic(
        kafka_bootstrap, topics.changes, expected=count)]  # fmt: skip
    rows = await outbox(pg_dsn, realm)
    assert lines == feed
    assert [c["id"] for c in lines] == [f"{realm}:{s}:{i}" for s, i, _ in rows]
    assert {c["kind"] for c in lines} >= {"document_indexed", "document_deleted"}
