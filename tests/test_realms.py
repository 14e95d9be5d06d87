"""Realm creation, pinned embedding geometry (DESIGN invariant 10) and the realm command."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tidegraph.infra.cli import main
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import positions
from tidegraph.store.ddl import (
    ATTRIBUTE_INDEXES,
    FOREIGN_KEYS,
    HNSW_OPTIONS,
    drop_foreign_keys_ddl,
    foreign_keys_ddl,
)
from tidegraph.store.errors import EmbedderMismatch, RealmSchemaError
from tidegraph.store.realms import check_embedder, create_realm, ensure_control, open_realm
from tidegraph.store.upgrades import vector_indexes_outdated

pytestmark = pytest.mark.postgres


async def test_schema_with_a_wrong_embedding_width_refuses_to_open(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    realm = unique_name("r")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        info = await create_realm(conn, realm, RealmConfig(embedder="hashing:32"))
        assert (info.embedder, info.dimension) == ("hashing:32", 32)
        await conn.execute(f"DROP INDEX realm_{realm}.relations_embedding")
        await conn.execute(
            f"ALTER TABLE realm_{realm}.relations ALTER COLUMN embedding TYPE vector(16) USING NULL"
        )
        with pytest.raises(RealmSchemaError, match="relations.embedding is vector\\(16\\)"):
            await open_realm(conn, realm)
        await conn.execute(f"ALTER TABLE realm_{realm}.relations DROP COLUMN embedding")
        try:
            with pytest.raises(RealmSchemaError, match="has no embedding column"):
                await open_realm(conn, realm)
        finally:  # a broken realm would make every later /readyz answer 503
            await conn.execute(f"DROP SCHEMA realm_{realm} CASCADE")
            await conn.execute("DELETE FROM tidegraph.realms WHERE realm = %s", (realm,))


async def test_another_embedder_than_the_pinned_one_fails_loudly(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    realm = unique_name("r")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        info = await create_realm(conn, realm, RealmConfig(embedder="hashing:32"))
        check_embedder(info, "hashing:32")
        with pytest.raises(EmbedderMismatch, match="pinned to embedder 'hashing:32'"):
            check_embedder(info, "llm:text-embedding-3-small:1536")
        # Creating it again with another embedder keeps what was pinned.
        again = await create_realm(conn, realm, RealmConfig(embedder="hashing:64"))
        assert again.embedder == "hashing:32"


async def _foreign_keys(
    conn: psycopg.AsyncConnection[object], schema: str
) -> set[tuple[str, str, str]]:
    cur = await conn.execute(
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)"
        " FROM pg_constraint WHERE contype = 'f' AND connamespace = %s::regnamespace",
        (schema,),
    )
    return {(str(t), str(n), str(d)) for t, n, d in await cur.fetchall()}


async def test_foreign_keys_a_bulk_load_drops_come_back_as_declared_and_are_checked(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """The replay drops the realm's foreign keys for its load and adds them afterwards from
    ``FOREIGN_KEYS``: that list must be exactly what the table definitions declare, and
    adding them must refuse rows the load left dangling."""
    realm = unique_name("r")
    schema = f"realm_{realm}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(conn, realm, RealmConfig(embedder="hashing:32"))
        declared = await _foreign_keys(conn, schema)
        assert {(t.split(".")[-1], n) for t, n, _ in declared} == {
            (table, f"{table}_{column}_fkey") for table, column, _, _ in FOREIGN_KEYS
        }
        await conn.execute(drop_foreign_keys_ddl(schema))
        assert await _foreign_keys(conn, schema) == set()
        await conn.execute(f"INSERT INTO {schema}.mentions VALUES (1, 2, now())")
        with pytest.raises(psycopg.errors.ForeignKeyViolation, match="mentions_chunk_id_fkey"):
            await conn.execute(foreign_keys_ddl(schema))
        await conn.execute(f"DELETE FROM {schema}.mentions")
        await conn.execute(foreign_keys_ddl(schema))
        assert await _foreign_keys(conn, schema) == declared


async def test_realm_from_before_stored_name_keys_gets_them_on_open(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    realm = unique_name("r")
    entities = f"realm_{realm}.entities"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(conn, realm, RealmConfig(embedder="hashing:4"))
        # The earlier layout: no stored key, uniqueness through SQL lower().
        await conn.execute(f"ALTER TABLE {entities} DROP COLUMN name_key")
        await conn.execute(f"CREATE UNIQUE INDEX entities_name ON {entities} (space, lower(name))")
        await conn.execute(
            f"INSERT INTO {entities} (space, name, type, embedding, created_at) VALUES"
            " ('default', 'Olga Åberg', 'Person', '[1,0,0,0]', now()),"
            " ('default', 'Bo Ek', 'Person', '[0,1,0,0]', now())"
        )
        await open_realm(conn, realm)
        cur = await conn.execute(f"SELECT name, name_key FROM {entities} ORDER BY id")
        assert await cur.fetchall() == [("Olga Åberg", "olga åberg"), ("Bo Ek", "bo ek")]
        cur = await conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'entities'"
            " AND indexname LIKE 'entities_name%%'",
            (f"realm_{realm}",),
        )
        assert await cur.fetchall() == [("entities_name_key",)]
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute(
                f"INSERT INTO {entities} (space, name, name_key, type, embedding, created_at)"
                " VALUES ('default', 'OLGA ÅBERG', 'olga åberg', 'Person', '[0,0,1,0]', now())"
            )
        await open_realm(conn, realm)  # once upgraded, opening changes nothing


async def test_concurrent_first_records_create_one_realm(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """Several writers meeting a new realm at once: the layout lock lets one create it and
    the others find it (without it, concurrent CREATE ... IF NOT EXISTS collide)."""
    realm = unique_name("r")
    conns = [await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) for _ in range(4)]
    try:
        await ensure_control(conns[0])
        infos = await asyncio.gather(
            *(create_realm(c, realm, RealmConfig(embedder="hashing:8")) for c in conns)
        )
    finally:
        for c in conns:
            await c.close()
    assert {(i.schema, i.dimension) for i in infos} == {(f"realm_{realm}", 8)}


def test_realm_create_and_show_commands(
    pg_dsn: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    realm = unique_name("r")
    config = tmp_path / "realm.json"
    config.write_text(
        '{"vocabulary": ["worked_with"], "exclusive_groups": '
        '[["ally_of", "enemy_of"]], "embedder": "hashing:48"}'
    )
    assert main(["realm", "create", realm, "--config", str(config), "--pg-dsn", pg_dsn]) == 0
    assert main(["realm", "show", realm, "--pg-dsn", pg_dsn]) == 0
    shown = capsys.readouterr().out
    assert '"hashing:48"' in shown and '"worked_with"' in shown
    bad = tmp_path / "bad.json"
    bad.write_text('{"embedder": "hashing:48", "unknown_key": 1}')
    assert (
        main(["realm", "create", unique_name("r"), "--config", str(bad), "--pg-dsn", pg_dsn]) != 0
    )
    assert main(["realm", "show", "Bad-Name", "--pg-dsn", pg_dsn]) != 0


async def test_realm_from_before_retention_gets_archival_on_open(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """A realm without ``entities.archived_since`` (created before retention) gets the
    column and its partial index when opened; every retrieval filter reads them."""
    realm = unique_name("r")
    schema = f"realm_{realm}"
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(conn, realm, RealmConfig(embedder="hashing:4"))
        await conn.execute(f"DROP INDEX {schema}.entities_archived")
        await conn.execute(f"ALTER TABLE {schema}.entities DROP COLUMN archived_since")
        await open_realm(conn, realm)
        cur = await conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s"
            " AND indexname = 'entities_archived'",
            (schema,),
        )
        [(indexdef,)] = await cur.fetchall()
        assert "WHERE (archived_since IS NOT NULL)" in indexdef
        await open_realm(conn, realm)  # once upgraded, opening changes nothing


async def test_realm_from_before_the_attribute_indexes_gets_them_on_open(
    pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """Every write derives its touched entities' attributes from their contributions
    through these indexes; a realm created before them gets them when opened, once."""
    realm = unique_name("r")
    schema = f"realm_{realm}"

    async def indexes(conn: psycopg.AsyncConnection[Any]) -> dict[str, str]:
        cur = await conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s"
            " AND indexname = ANY(%s)",
            (schema, list(ATTRIBUTE_INDEXES)),
        )
        return {str(n): str(d) for n, d in await cur.fetchall()}

    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(conn, realm, RealmConfig(embedder="hashing:4"))
        assert set(await indexes(conn)) == set(ATTRIBUTE_INDEXES)
        for index in ATTRIBUTE_INDEXES:
            await conn.execute(f"DROP INDEX {schema}.{index}")
        await open_realm(conn, realm)
        built = await indexes(conn)
        assert "(entity_id, type) WHERE (type IS NOT NULL)" in built["entity_sources_typed"]
        assert "WHERE (description <> ''::text)" in built["entity_sources_described"]
        await open_realm(conn, realm)  # once upgraded, opening changes nothing
        assert await indexes(conn) == built


def test_realm_telemetry_command_turns_recording_on_and_off(
    pg_dsn: str, unique_name: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    realm = unique_name("r")
    assert main(["realm", "create", realm, "--pg-dsn", pg_dsn]) == 0

    async def state() -> tuple[bool, bool]:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            info = await open_realm(conn, realm)
            cur = await conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", (f"{info.schema}.retrievals",)
            )
            row = await cur.fetchone()
            return info.config.coverage_telemetry, bool(row and row[0])

    assert asyncio.run(state()) == (False, True)
    assert main(["realm", "telemetry", realm, "on", "--pg-dsn", pg_dsn]) == 0
    assert asyncio.run(state()) == (True, True)
    assert main(["realm", "show", realm, "--pg-dsn", pg_dsn]) == 0
    assert '"coverage_telemetry": true' in capsys.readouterr().out
    assert main(["realm", "telemetry", realm, "off", "--pg-dsn", pg_dsn]) == 0
    assert asyncio.run(state())[0] is False
    assert main(["realm", "telemetry", unique_name("nx"), "on", "--pg-dsn", pg_dsn]) != 0


async def test_control_setup_waits_for_no_open_write_and_upgrades_an_old_layout(
    own_database: str,
) -> None:
    """Every indexer start sets up the control schema; a member's write transaction (which
    updates its position first) may be open meanwhile — the setup must not queue behind it,
    and a control schema from before per-realm positions gets the column it lacks."""
    async with (
        await psycopg.AsyncConnection.connect(own_database, autocommit=True) as writer,
        await psycopg.AsyncConnection.connect(own_database, autocommit=True) as starter,
    ):
        await ensure_control(writer)
        await writer.execute("ALTER TABLE tidegraph.consumer_positions DROP COLUMN ahead")
        await ensure_control(starter)  # the old layout upgraded
        await writer.execute(
            "INSERT INTO tidegraph.consumer_positions (group_id, topic, partition, next_offset)"
            " VALUES ('g', 't', 0, 0)"
        )
        async with writer.transaction():
            await writer.execute(
                "UPDATE tidegraph.consumer_positions SET next_offset = 1, ahead = '{}'"
                " WHERE group_id = 'g'"
            )
            await asyncio.wait_for(ensure_control(starter), 10)


async def test_a_claim_ends_a_previous_owner_frozen_inside_its_write(own_database: str) -> None:
    """The previous owner's write transaction holds its position row and never ends (its
    process is frozen); the claim ends that session, takes the partition, and the old
    owner's uncommitted write is gone."""
    dsn = own_database
    async with (
        await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, application_name="tidegraph-indexer"
        ) as frozen,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as claimer,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as helper,
    ):
        await ensure_control(frozen)
        old, _ = await positions.claim(frozen, "g", "t", 0, 0)
        await frozen.execute("BEGIN")
        await positions.advance(frozen, old, 1)
        claiming = asyncio.ensure_future(positions.claim(claimer, "g", "t", 0, 0))
        await asyncio.sleep(0.5)
        assert not claiming.done()  # waits for the frozen write
        # only sessions named as indexers are ended
        assert await positions.end_owners_in_the_way(helper, claimer.info.backend_pid, "x") == 0
        ended = await positions.end_owners_in_the_way(
            helper, claimer.info.backend_pid, "tidegraph-indexer"
        )
        assert ended == 1
        claim, position = await asyncio.wait_for(claiming, 10)
        assert claim.epoch == old.epoch + 1 and position == 0  # write rolled back
        with pytest.raises(psycopg.OperationalError):
            await frozen.execute("SELECT 1")


async def test_applied_counts_a_groups_records_over_its_partitions(own_database: str) -> None:
    """What benchmarks and tests wait on: 0 before the first indexer made the control
    schema, then the group's cursors summed over its partitions, its topic only."""
    async with await psycopg.AsyncConnection.connect(own_database, autocommit=True) as conn:
        assert await positions.applied(conn, "g", "t") == 0
        await ensure_control(conn)
        for partition, offset in ((0, 5), (1, 7)):
            claim, _ = await positions.claim(conn, "g", "t", partition, 0)
            await positions.advance(conn, claim, offset)
        other, _ = await positions.claim(conn, "g", "u", 0, 0)
        await positions.advance(conn, other, 3)
        assert await positions.applied(conn, "g", "t") == 12
        assert await positions.applied(conn, "h", "t") == 0


def test_reindex_rebuilds_the_vector_indexes_built_with_other_options(
    pg_dsn: str, unique_name: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    realm = unique_name("r")
    assert main(["realm", "create", realm, "--pg-dsn", pg_dsn]) == 0
    schema = f"realm_{realm}"

    async def options() -> dict[str, list[str]]:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT c.relname, coalesce(c.reloptions, '{}') FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname LIKE '%%\\_embedding'",
                (schema,),
            )
            return {str(name): sorted(opts) for name, opts in await cur.fetchall()}

    def wanted(table: str) -> list[str]:
        m, efc = HNSW_OPTIONS[table]
        return sorted([f"m={m}", f"ef_construction={efc}"])

    assert asyncio.run(options()) == {f"{t}_embedding": wanted(t) for t in HNSW_OPTIONS}
    assert main(["realm", "reindex", realm, "--check", "--pg-dsn", pg_dsn]) == 0

    async def as_before(table: str) -> None:  # a realm created before the options
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await conn.execute(f"DROP INDEX {schema}.{table}_embedding")
            await conn.execute(
                f"CREATE INDEX {table}_embedding ON {schema}.{table}"
                " USING hnsw (embedding vector_cosine_ops)"
            )
            assert await vector_indexes_outdated(conn, schema) == (
                [] if HNSW_OPTIONS[table] == (16, 64) else [table]
            )

    tuned = [t for t, o in HNSW_OPTIONS.items() if o != (16, 64)]
    assert tuned, "every table has pgvector's default options"
    asyncio.run(as_before(tuned[0]))
    capsys.readouterr()
    assert main(["realm", "reindex", realm, "--check", "--pg-dsn", pg_dsn]) == 1
    assert tuned[0] in capsys.readouterr().out
    assert asyncio.run(options())[f"{tuned[0]}_embedding"] == []
    assert main(["realm", "reindex", realm, "--pg-dsn", pg_dsn]) == 0
    assert asyncio.run(options()) == {f"{t}_embedding": wanted(t) for t in HNSW_OPTIONS}
    assert main(["realm", "reindex", realm, "--check", "--pg-dsn", pg_dsn]) == 0
