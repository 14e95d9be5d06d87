"""Rows as facts: the mapping file, and a small HR schema through the whole pipeline.

People, companies and employments (with start and end dates) on the real server, captured
by logical decoding (one connector per table, the employments' through the command line),
published to the real broker, indexed by a ``tidegraph indexer`` process: the current graph
must say what the tables say — an employment ending ends the relation's validity, a
deleted row retracts its facts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

from tidegraph.connectors.errors import SourceSetupError
from tidegraph.connectors.postgres_cdc import CaptureSpec, PostgresCdc
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.connectors.row_mapping import RowMapping, load_row_mapping
from tidegraph.infra.commands.connect import capture_spec
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.settings import Settings

from connector_helpers import fresh_settings, read_topic, validated  # type: ignore[import-not-found]
from indexer_helpers import Topics, spawn_indexer, stored_position, wait_for

MAPPING_YAML = """
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


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------ the mapping file


def test_mapping_reads_yaml_and_json_alike(tmp_path: Path) -> None:
    yaml_map = load_row_mapping(_write(tmp_path, "m.yaml", MAPPING_YAML.format(s="hr")))
    as_json = orjson.dumps(yaml_map.model_dump(exclude_defaults=True)).decode()
    assert load_row_mapping(_write(tmp_path, "m.json", as_json)) == yaml_map
    employments = yaml_map.table("hr.employments")
    assert employments.columns == ["id", "person_id", "company_id", "started_on", "ended_on"]
    assert yaml_map.table("hr.people").columns == ["id", "full_name", "bio"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tables: [", "is not valid YAML"),
        ("tables: {}", "tables: Dictionary should have at least 1 item"),
        ("tables: {t: {entity: {name: n}}}", "tables.t.key: Field required"),
        ("tables: {t: {key: id}}", "give exactly one of content (the row's text), entity"),
        ("tables: {t: {key: id, entity: {name: n, tpye: X}}}", "tables.t.entity.tpye: Extra"),
        ("tables: {t: {key: id, entity: {name: n, type: X, type_column: k}}}",
         "give either type or type_column"),
        ("tables: {t: {key: id, subject: {column: p, references: u}}}",
         "tables.t.subject: references 'u', which is not in tables"),
        ("tables: {t: {key: id, entity: {name: n}},"
         " u: {key: id, subject: {column: p, references: t},"
         "     relations: [{predicate: knows, column: q, references: u}]}}",
         "tables.u.relations.0: references 'u', whose rows are not entities"),
        ("tables: {t: {key: id, entity: {name: n},"
         " relations: [{predicate: '', column: q}]}}",
         "tables.t.relations.0.predicate: String should have at least 1 character"),
    ],
)  # fmt: skip
def test_mapping_errors_name_the_file_and_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, "bad.yaml", text)
    with pytest.raises(SourceSetupError) as caught:
        load_row_mapping(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_mapping_must_name_the_captured_table(tmp_path: Path) -> None:
    mapping = load_row_mapping(_write(tmp_path, "m.yaml", MAPPING_YAML.format(s="hr")))
    with pytest.raises(SourceSetupError, match="no entry for table 'hr.teams'"):
        CaptureSpec(table="hr.teams", key_column="id", realm="acme", facts=mapping)
    with pytest.raises(SourceSetupError, match="keys hr.people by 'id', not 'full_name'"):
        CaptureSpec(table="hr.people", key_column="full_name", realm="acme", facts=mapping)
    with pytest.raises(SourceSetupError, match="not both"):
        CaptureSpec(
            table="hr.people", key_column="id", realm="acme", facts=mapping, content_column="bio"
        )
    with pytest.raises(SourceSetupError, match="content column"):
        CaptureSpec(table="hr.people", key_column="id", realm="acme")
    with pytest.raises(SourceSetupError, match="cannot read the mapping"):
        load_row_mapping(tmp_path / "missing.yaml")


# ------------------------------------------------------------- the whole pipeline


@dataclass
class Hr:
    dsn: str
    schema: str
    realm: str
    settings: Settings
    mapping_file: Path
    mapping: RowMapping
    conn: psycopg.AsyncConnection[tuple[Any, ...]]
    slots: list[str]

    async def sql(self, query: str, *params: object) -> None:
        await self.conn.execute(
            sql.SQL(query).format(s=sql.Identifier(self.schema)),  # type: ignore[arg-type]
            params or None,
        )

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"


@pytest.fixture
async def hr(
    pg_dsn: str, kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> AsyncIterator[Hr]:
    conn = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    schema = unique_name("hr")
    text = MAPPING_YAML.format(s=schema)
    src = Hr(
        dsn=pg_dsn,
        schema=schema,
        realm=unique_name("r"),
        settings=await fresh_settings(kafka_bootstrap, unique_name("tp"), partitions=1),
        mapping_file=_write(tmp_path, "hr.yaml", text),
        mapping=load_row_mapping(_write(tmp_path, "hr.yaml", text)),
        conn=conn,
        slots=[],
    )
    await src.sql("CREATE SCHEMA {s}")
    await src.sql("CREATE TABLE {s}.people (id int PRIMARY KEY, full_name text, bio text)")
    await src.sql("CREATE TABLE {s}.companies (id int PRIMARY KEY, name text, kind text)")
    await src.sql(
        "CREATE TABLE {s}.employments (id int PRIMARY KEY,"
        " person_id int REFERENCES {s}.people, company_id int REFERENCES {s}.companies,"
        " started_on date NOT NULL, ended_on date)"
    )
    yield src
    for slot in src.slots:
        await conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s AND NOT active",
            (slot,),
        )
        await conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(slot)))
    await src.sql("DROP SCHEMA {s} CASCADE")
    await conn.close()


async def _what_the_tables_say(src: Hr) -> list[tuple[Any, ...]]:
    cur = await src.conn.execute(
        sql.SQL(
            "SELECT p.full_name, 'Person', 'works_at', c.name, c.kind, e.started_on::text,"
            " e.ended_on::text FROM {s}.employments e JOIN {s}.people p ON p.id = e.person_id"
            " JOIN {s}.companies c ON c.id = e.company_id"
        ).format(s=sql.Identifier(src.schema))
    )
    return sorted(tuple(r) for r in await cur.fetchall())


async def _what_the_graph_says(src: Hr) -> list[tuple[Any, ...]]:
    cur = await src.conn.execute(
        sql.SQL(
            "SELECT es.name, es.type, r.predicate, eo.name, eo.type, r.valid_from, r.valid_to"
            " FROM {s}.relations r JOIN {s}.entities es ON es.id = r.subject_id"
            " JOIN {s}.entities eo ON eo.id = r.object_id WHERE r.status = 'current'"
        ).format(s=sql.Identifier(f"realm_{src.realm}"))
    )
    return sorted(tuple(r) for r in await cur.fetchall())


async def _live_entities(src: Hr) -> list[tuple[Any, ...]]:
    cur = await src.conn.execute(
        sql.SQL(
            "SELECT name, type, description FROM {}.entities WHERE dormant_since IS NULL"
        ).format(sql.Identifier(f"realm_{src.realm}"))
    )
    return sorted(tuple(r) for r in await cur.fetchall())


async def _start_cli(src: Hr, table: str, slot: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "TIDEGRAPH_KAFKA_BOOTSTRAP": src.settings.kafka_bootstrap}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegraph.infra.cli", "connect", "postgres",
        "--dsn", src.dsn, "--table", table, "--facts", str(src.mapping_file),
        "--realm", src.realm, "--slot", slot, "--topic-prefix", src.settings.topic_prefix,
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    for _ in range(1200):
        line = await asyncio.wait_for(proc.stderr.readline(), 60)
        lines.append(line.decode())
        if b"streaming changes" in line:
            return proc
        if not line:
            break
    raise AssertionError("connector did not start:\n" + "".join(lines))


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.slow
async def test_hr_tables_become_the_graph_they_describe(
    hr: Hr, unique_name: Callable[[str], str]
) -> None:
    await hr.sql(
        "INSERT INTO {s}.people VALUES (1, 'Ada Quill', 'Engineer'), (2, 'Bo Vale', NULL),"
        " (3, 'Cy Marr', 'Navigator')"
    )
    await hr.sql(
        "INSERT INTO {s}.companies VALUES (1, 'Wrenfield', 'Company'), (2, 'Rookwater', 'Shipyard')"
    )
    await hr.sql(
        "INSERT INTO {s}.employments VALUES (1, 1, 1, '2019-03-01', NULL),"
        " (2, 2, 2, '2020-01-15', NULL), (3, 3, 1, '2018-05-01', '2021-12-31')"
    )
    topics = Topics(hr.settings.topic_prefix, hr.settings.kafka_bootstrap)
    group = unique_name("g")
    indexer = spawn_indexer(topics, hr.dsn, group)
    stop = asyncio.Event()
    cdcs: list[PostgresCdc] = []
    tasks: list[asyncio.Task[None]] = []
    proc: asyncio.subprocess.Process | None = None
    try:
        async with DocumentProducer.from_settings(hr.settings) as producer:
            for name in ("people", "companies"):
                slot = unique_name("tgslot_")
                hr.slots.append(slot)
                spec = CaptureSpec(
                    table=hr.table(name), key_column="id", realm=hr.realm,
                    facts=hr.mapping, slot=slot,
                )  # fmt: skip
                cdc = PostgresCdc(hr.dsn, spec, producer)
                cdcs.append(cdc)
                tasks.append(asyncio.create_task(cdc.run(stop)))
            slot = unique_name("tgslot_")
            hr.slots.append(slot)
            proc = await _start_cli(hr, hr.table("employments"), slot)
            while not all(c.stats.streaming for c in cdcs):
                assert not any(t.done() for t in tasks), [t.exception() for t in tasks]
                await asyncio.sleep(0.05)

            async def settled() -> bool:
                records = await read_topic(
                    hr.settings.kafka_bootstrap, hr.settings.documents_topic, expected=0,
                    within=0.5,
                )  # fmt: skip
                applied = await stored_position(hr.dsn, group, hr.settings.documents_topic)
                return bool(records) and applied >= len(records)

            async def agrees() -> bool:
                await wait_for(settled, 120, "every record applied", interval=0.5)
                return await _what_the_graph_says(hr) == await _what_the_tables_say(hr)

            await wait_for(agrees, 120, "the graph to say what the tables say", interval=0.5)
            assert await _what_the_graph_says(hr) == [
                ("Ada Quill", "Person", "works_at", "Wrenfield", "Company", "2019-03-01", None),
                ("Bo Vale", "Person", "works_at", "Rookwater", "Shipyard", "2020-01-15", None),
                ("Cy Marr", "Person", "works_at", "Wrenfield", "Company", "2018-05-01",
                 "2021-12-31"),
            ]  # fmt: skip
            assert ("Ada Quill", "Person", "Engineer") in await _live_entities(hr)

            # Ada's employment ends; Bo's row is deleted; Cy joins Rookwater with a new
            # person in the same transaction.
            await hr.sql("UPDATE {s}.employments SET ended_on = '2024-06-30' WHERE id = 1")
            await hr.sql("DELETE FROM {s}.employments WHERE id = 2")
            async with hr.conn.transaction():
                await hr.sql("INSERT INTO {s}.people VALUES (4, 'Di Sorrel', 'Clerk')")
                await hr.sql("INSERT INTO {s}.employments VALUES (4, 4, 2, '2024-07-01', NULL)")
                await hr.sql("INSERT INTO {s}.employments VALUES (5, 3, 2, '2022-02-01', NULL)")
            await hr.sql("UPDATE {s}.people SET bio = 'Chief engineer' WHERE id = 1")

            async def changed() -> bool:
                return await agrees() and (
                    ("Ada Quill", "Person", "Chief engineer") in await _live_entities(hr)
                )

            await wait_for(changed, 120, "the changes to reach the graph", interval=0.5)
            assert await _what_the_graph_says(hr) == [
                ("Ada Quill", "Person", "works_at", "Wrenfield", "Company", "2019-03-01",
                 "2024-06-30"),
                ("Cy Marr", "Person", "works_at", "Rookwater", "Shipyard", "2022-02-01", None),
                ("Cy Marr", "Person", "works_at", "Wrenfield", "Company", "2018-05-01",
                 "2021-12-31"),
                ("Di Sorrel", "Person", "works_at", "Rookwater", "Shipyard", "2024-07-01", None),
            ]  # fmt: skip
            cur = await hr.conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM {s}.relations r JOIN {s}.entities e"
                    " ON e.id = r.subject_id WHERE e.name = 'Bo Vale' AND r.status = 'retracted'"
                ).format(s=sql.Identifier(f"realm_{hr.realm}"))
            )
            assert await cur.fetchone() == (1,)  # the deleted row's fact, retracted
            docs = [
                validated(r)
                for r in await read_topic(
                    hr.settings.kafka_bootstrap, hr.settings.documents_topic, expected=1
                )
            ]
            ada = [d for d in docs if d.doc_key == f"{hr.schema}.employments/1"]
            assert ada[-1].content == (
                "Ada Quill (Person).\nWrenfield (Company).\n"
                "Ada Quill works at Wrenfield (from 2019-03-01 to 2024-06-30)."
            )
            assert ada[-1].title == "Ada Quill" and ada[-1].source == "postgres"
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        stop.set()
        if proc is not None and proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 30)
        indexer.terminate()
        indexer.wait(30)


def test_command_line_takes_a_text_column_or_facts(tmp_path: Path) -> None:
    mapping = _write(tmp_path, "m.yaml", MAPPING_YAML.format(s="hr"))
    base = {"table": "hr.employments", "realm": "acme", "space": "default", "slot": None,
            "title_column": None, "order_column": None}  # fmt: skip
    spec = capture_spec(
        argparse.Namespace(**base, facts=mapping, key_column=None, content_column=None)
    )
    assert spec.key_column == "id" and spec.facts is not None and spec.content_column is None
    with pytest.raises(ConfigError, match="--content-column or --facts, not both"):
        capture_spec(argparse.Namespace(**base, facts=mapping, key_column=None, content_column="b"))
    with pytest.raises(ConfigError, match="needs --key-column and --content-column, or --facts"):
        capture_spec(argparse.Namespace(**base, facts=None, key_column="id", content_column=None))
