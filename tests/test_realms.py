"""Realm creation, pinned embedding geometry (DESIGN invariant 10) and the realm command."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tidegraph.indexer.errors import EmbedderMismatch, RealmSchemaError
from tidegraph.indexer.realms import check_embedder, create_realm, ensure_control, open_realm
from tidegraph.infra.cli import main
from tidegraph.schemas.realm_config import RealmConfig

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
        await conn.execute(f"ALTER TABLE realm_{realm}.relations ALTER COLUMN embedding"
                           " TYPE vector(16) USING NULL")
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


def test_realm_create_and_show_commands(
    pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    realm = unique_name("r")
    config = tmp_path / "realm.json"
    config.write_text('{"vocabulary": ["worked_with"], "exclusive_groups": '
                      '[["ally_of", "enemy_of"]], "embedder": "hashing:48"}')
    assert main(["realm", "create", realm, "--config", str(config), "--pg-dsn", pg_dsn]) == 0
    assert main(["realm", "show", realm, "--pg-dsn", pg_dsn]) == 0
    shown = capsys.readouterr().out
    assert '"hashing:48"' in shown and '"worked_with"' in shown
    bad = tmp_path / "bad.json"
    bad.write_text('{"embedder": "hashing:48", "unknown_key": 1}')
    assert main(["realm", "create", unique_name("r"), "--config", str(bad),
                 "--pg-dsn", pg_dsn]) != 0
    assert main(["realm", "show", "Bad-Name", "--pg-dsn", pg_dsn]) != 0
