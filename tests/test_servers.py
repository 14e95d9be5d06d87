"""Naming the PostgreSQL servers realms live on (pure: no server is contacted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.infra import local_pg_standbys
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.servers import MAIN, Servers, load_servers, parse_servers, parse_standbys

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


def test_standbys_are_named_per_server_and_found_by_it() -> None:
    env = {
        "TIDEGRAPH_PG_SERVERS": "b=postgresql://b/db",
        "TIDEGRAPH_PG_STANDBYS": "main/s1=postgresql://m1/db;\nb/s1=postgresql://b1/db;"
        "main/s2 = host=m2 dbname=db",
    }
    servers = load_servers(MAIN_DSN, env)
    assert [(s.label, s.dsn) for s in servers.standbys(MAIN)] == [
        ("main/s1", "postgresql://m1/db"),
        ("main/s2", "host=m2 dbname=db"),
    ]
    assert [s.label for s in servers.standbys("b")] == ["b/s1"]
    assert load_servers(MAIN_DSN, {}).standbys(MAIN) == ()


@pytest.mark.parametrize(
    ("standbys", "says"),
    [
        ("s1=postgresql://m1/db", "is not server/standby"),
        ("main/S1=postgresql://m1/db", "server name"),
        ("c/s1=postgresql://c1/db", "follows server 'c', which is not configured here"),
        (f"main/s1={MAIN_DSN}", "has the DSN of a server or another standby"),
        ("main/s1=postgresql://x/db;main/s2=postgresql://x/db", "another standby"),
        ("main/s1=postgresql://x/db;main/s1=postgresql://y/db", "named twice"),
    ],
)
def test_standbys_that_cannot_be_meant_are_refused(standbys: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_servers(MAIN_DSN, {"TIDEGRAPH_PG_STANDBYS": standbys})


_names = st.builds(
    str.__add__,
    st.sampled_from("abz"),
    st.text(alphabet="az09_", max_size=6),
)


@given(
    st.dictionaries(
        st.tuples(_names, _names).map("/".join),
        st.builds(
            "postgresql://{}/{}".format,
            st.text(alphabet="ab:@1", min_size=1, max_size=8),
            st.text(alphabet="a= &;", max_size=8),
        ),
    )
)
def test_the_entry_up_writes_is_read_back_as_written(standbys: dict[str, str]) -> None:
    """The writer (infra) and the one parse rule (schemas) agree on any names and DSNs,
    even DSNs holding ``=`` (a ``;`` separates entries: never part of a DSN here)."""
    standbys = {k: v.replace(";", "").strip() for k, v in standbys.items()}
    assert parse_standbys(local_pg_standbys.standbys_entry(standbys)) == standbys
