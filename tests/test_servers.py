"""Naming the PostgreSQL servers realms live on (pure: no server is contacted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.servers import MAIN, Servers, load_servers, parse_servers

MAIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def test_one_dsn_is_one_server_named_main() -> None:
    servers = load_servers(MAIN_DSN, {})
    assert servers.names == (MAIN,) and servers.dsn(MAIN) == MAIN_DSN


def test_entries_keep_their_order_and_a_dsn_may_hold_equals_signs() -> None:
    text = "b=host=10.0.0.2 port=5432 dbname=tg;\n# a comment\nc = postgresql://u@h/db ;"
    assert parse_servers(text) == {
        "b": "host=10.0.0.2 port=5432 dbname=tg",
        "c": "postgresql://u@h/db",
    }
    servers = load_servers(MAIN_DSN, {"TIDEGRAPH_PG_SERVERS": text})
    assert servers.names == (MAIN, "b", "c")
    assert servers.dsn("b") == "host=10.0.0.2 port=5432 dbname=tg"


def test_a_file_and_the_variable_add_up(tmp_path: Path) -> None:
    file = tmp_path / "servers"
    file.write_text("b=postgresql://b/db\n")
    env = {"TIDEGRAPH_PG_SERVERS_FILE": str(file), "TIDEGRAPH_PG_SERVERS": "c=postgresql://c/db"}
    assert load_servers(MAIN_DSN, env).names == (MAIN, "b", "c")


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"TIDEGRAPH_PG_SERVERS": "b"}, "is not name=DSN"),
        ({"TIDEGRAPH_PG_SERVERS": "B=postgresql://b/db"}, "server name"),
        ({"TIDEGRAPH_PG_SERVERS": "b=postgresql://x/db;b=postgresql://y/db"}, "named twice"),
        ({"TIDEGRAPH_PG_SERVERS": "main=postgresql://elsewhere/db"}, "main is always"),
        ({"TIDEGRAPH_PG_SERVERS": f"b={MAIN_DSN}"}, "one DSN twice"),
        ({"TIDEGRAPH_PG_SERVERS_FILE": "/nonexistent/servers"}, "TIDEGRAPH_PG_SERVERS_FILE"),
    ],
)
def test_what_cannot_be_meant_is_refused_with_its_reason(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_servers(MAIN_DSN, env)


def test_an_unknown_server_is_named_with_the_known_ones() -> None:
    servers = Servers.of(MAIN_DSN, {"b": "postgresql://b/db"})
    with pytest.raises(ConfigError, match=r"'c' is not configured here \(known: main, b\)"):
        servers.dsn("c")
