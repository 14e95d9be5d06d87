"""The local PostgreSQL is closed by default: passwords only, kept only in the 0600 env file,
and the PostgreSQL connector on a role of its own that can decode but not read the realms."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tidegraph.connectors.errors import SourceSetupError
from tidegraph.connectors.postgres_cdc import CaptureSpec, PostgresCdc
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.infra import _proc, local_pg, services
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import create_realm, ensure_control

from connector_helpers import fresh_settings, read_topic, validated
from local_services import REPO

pytestmark = [pytest.mark.postgres]


@pytest.fixture(scope="module")
def local() -> Iterator[services.ServiceStatus]:
    """A server of its own, started the way `up` starts it."""
    state = REPO / ".tidegraph" / f"test-closed-{uuid.uuid4().hex[:8]}"
    try:
        yield services.up(state, services=[services.POSTGRES], pg_port=_proc.free_port())
    finally:
        services.down(state)
        shutil.rmtree(state, ignore_errors=True)


def test_no_login_without_the_password(local: services.ServiceStatus) -> None:
    layout = local_pg.PgLayout.under(local.state_dir)
    hba = (layout.data / "pg_hba.conf").read_text()
    rules = [line.split() for line in hba.splitlines() if line.strip() and line[0] != "#"]
    assert rules and all(rule[-1] == "scram-sha-256" for rule in rules), hba
    assert "trust" not in hba.replace("No `trust`", "")

    record = local_pg.read_record(layout)
    assert record is not None
    for user in ("postgres", "tidegraph_cdc"):
        for password in (None, "wrong"):
            login = user if password is None else f"{user}:{password}"
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(f"postgresql://{login}@127.0.0.1:{record.port}/postgres").close()
    with psycopg.connect(local.pg_dsn) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()


def test_passwords_live_only_in_the_env_file(local: services.ServiceStatus) -> None:
    env = local.state_dir / "env"
    assert env.stat().st_mode & 0o777 == 0o600
    secret = local_pg.PgCredentials.from_env(services.read_env_file(local.state_dir))
    assert secret is not None and secret.superuser != secret.replication
    assert secret.superuser in local.pg_dsn
    layout = local_pg.PgLayout.under(local.state_dir)
    assert local.postgres.pid is not None
    cmdline = Path(f"/proc/{local.postgres.pid}/cmdline").read_bytes()
    for path in (layout.record, layout.log, layout.data / "postgresql.conf"):
        text = path.read_bytes()
        assert secret.superuser.encode() not in text and secret.replication.encode() not in text
    assert secret.superuser.encode() not in cmdline
    assert (local.state_dir / "postgres").stat().st_mode & 0o777 == 0o700


def test_a_relaunch_without_the_passwords_sets_new_ones(tmp_path: Path) -> None:
    """A data directory whose passwords are lost (or that an earlier, open layout made) is
    closed again with new passwords on its next start."""
    layout = local_pg.PgLayout.under(tmp_path)
    first = local_pg.launch(layout, port=_proc.free_port())
    try:
        local_pg.wait_ready(layout, first, timeout=60)
    finally:
        local_pg.stop(layout)
    second = local_pg.launch(layout, port=first.port)
    try:
        local_pg.wait_ready(layout, second, timeout=60)
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(first.dsn).close()
    finally:
        local_pg.stop(layout)


@pytest.fixture
async def owner(
    local: services.ServiceStatus,
) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    conn = await psycopg.AsyncConnection.connect(local.pg_dsn, autocommit=True)
    try:
        yield conn
    finally:
        await conn.close()


async def test_the_connector_role_cannot_read_realms(
    local: services.ServiceStatus, owner: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    await ensure_control(owner)
    info = await create_realm(owner, "closedrealm", RealmConfig(embedder="hashing:8"))
    dsn = services.read_env_file(local.state_dir)[services.REPLICATION_DSN_KEY]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as cdc:
        row = await (
            await cdc.execute(
                "SELECT rolsuper, rolreplication, rolbypassrls FROM pg_roles"
                " WHERE rolname = current_user"
            )
        ).fetchone()
        assert row == (False, True, False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await cdc.execute(sql.SQL("SELECT * FROM {}.meta").format(sql.Identifier(info.schema)))


@pytest.mark.kafka
async def test_the_connector_captures_a_table_its_role_owns(
    local: services.ServiceStatus,
    owner: psycopg.AsyncConnection[tuple[object, ...]],
    kafka_bootstrap: str,
) -> None:
    dsn = services.read_env_file(local.state_dir)[services.REPLICATION_DSN_KEY]
    settings = await fresh_settings(kafka_bootstrap, f"closed{uuid.uuid4().hex[:10]}")
    spec = CaptureSpec(table="articles", key_column="id", content_column="body", realm="closedcdc")
    await owner.execute("CREATE TABLE articles (id int PRIMARY KEY, body text NOT NULL)")
    await owner.execute("INSERT INTO articles VALUES (1, 'one'), (2, 'two')")
    try:
        async with DocumentProducer.from_settings(settings) as producer:
            with pytest.raises(SourceSetupError, match="own the table"):
                await PostgresCdc(dsn, spec, producer).setup()
            await owner.execute("ALTER TABLE articles OWNER TO tidegraph_cdc")
            cdc = PostgresCdc(dsn, spec, producer)
            assert await cdc.setup() is True
            await cdc.drop()
        records = await read_topic(kafka_bootstrap, settings.documents_topic, expected=2)
        assert sorted(validated(r).content for r in records) == ["one", "two"]
    finally:
        await owner.execute("DROP TABLE articles")
