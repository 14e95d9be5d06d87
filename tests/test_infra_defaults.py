"""Defaults that cannot point at the wrong server: the addresses every command assumes are the
ones `up` runs, the port variables mean the same to every command, and the state folder is
found the same way from any directory."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidegraph.infra import _proc, services
from tidegraph.infra.cli import _load_env_file
from tidegraph.schemas.settings import Settings, load_settings

from local_services import REPO, run_cli

SERVICE_VARS = (
    "TIDEGRAPH_KAFKA_BOOTSTRAP",
    "TIDEGRAPH_PG_DSN",
    "TIDEGRAPH_KAFKA_PORT",
    "TIDEGRAPH_KAFKA_CONTROLLER_PORT",
    "TIDEGRAPH_PG_PORT",
    "TIDEGRAPH_STATE_DIR",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No service variables, and a private per-user state home."""
    for var in SERVICE_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "state-home"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env.update(extra)
    return env


def test_default_addresses_are_the_ones_up_uses(clean_env: Path) -> None:
    settings = load_settings()
    assert settings.kafka_bootstrap == "127.0.0.1:9092"
    assert settings.pg_dsn.get_secret_value() == "postgresql://postgres@127.0.0.1:54329/postgres"
    assert "kafka_bootstrap" not in settings.model_fields_set  # a default is never "external"


def test_port_variables_move_every_commands_default(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEGRAPH_KAFKA_PORT", "19092")
    monkeypatch.setenv("TIDEGRAPH_PG_PORT", "15432")
    settings = load_settings()
    assert settings.kafka_bootstrap == "127.0.0.1:19092"
    assert settings.pg_dsn.get_secret_value().endswith("@127.0.0.1:15432/postgres")
    explicit = load_settings(kafka_bootstrap="kafka.example:9092")
    assert explicit.kafka_bootstrap == "kafka.example:9092"  # an address beats a port


def test_port_variable_applies_after_down_removed_the_env_line(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What `down --only kafka` leaves: the env file names PostgreSQL only.
    state = tmp_path / "proj" / ".tidegraph"
    state.mkdir(parents=True)
    dsn = "postgresql://postgres@127.0.0.1:15999/postgres"
    (state / "env").write_text(f"export TIDEGRAPH_PG_DSN={dsn}\n")
    monkeypatch.setenv("TIDEGRAPH_KAFKA_PORT", "19093")
    monkeypatch.chdir(state.parent)
    monkeypatch.delenv("TIDEGRAPH_PG_DSN", raising=False)
    try:
        _load_env_file(None)
        settings = load_settings()
        assert settings.kafka_bootstrap == "127.0.0.1:19093"
        assert settings.pg_dsn.get_secret_value() == dsn
    finally:
        os.environ.pop("TIDEGRAPH_PG_DSN", None)


def test_state_folder_is_the_nearest_one_upwards(clean_env: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    # No .tidegraph anywhere: the per-user folder.
    assert services.find_state_dir(deep) == clean_env.resolve() / "tidegraph"
    (project / ".tidegraph").mkdir()
    assert services.find_state_dir(deep) == (project / ".tidegraph").resolve()
    # A nearer one that only holds the test suite's areas is skipped...
    (project / "a" / ".tidegraph" / "test").mkdir(parents=True)
    assert services.find_state_dir(deep) == (project / ".tidegraph").resolve()
    # ...and one `up` wrote into wins.
    (project / "a" / ".tidegraph" / "env").write_text("")
    assert services.find_state_dir(deep) == (project / "a" / ".tidegraph").resolve()


def test_explicit_state_dir_wins(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGRAPH_STATE_DIR", "/srv/tg")
    assert services.state_path(None, Settings()) == Path("/srv/tg")
    assert services.state_path("/other", Settings()) == Path("/other")


def test_status_with_nothing_running_is_one_line_ending_with_what_to_run(
    clean_env: Path, tmp_path: Path
) -> None:
    project = tmp_path / "p"
    (project / ".tidegraph").mkdir(parents=True)
    (project / "sub").mkdir()
    env = _env(XDG_STATE_HOME=str(clean_env), TIDEGRAPH_KAFKA_PORT=str(_proc.free_port()))
    done = run_cli(["status", "--json"], env, cwd=project / "sub")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["state_dir"] == str((project / ".tidegraph").resolve())
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tidegraph: Kafka and PostgreSQL are not running")
    assert lines[0].endswith("— run `tidegraph up`")


@pytest.fixture
def project(clean_env: Path) -> Iterator[Path]:
    """A project folder inside the repo's ignored .tidegraph/ (the embedded server's system
    account must be able to reach it); whatever runs there is stopped afterwards."""
    path = REPO / ".tidegraph" / f"test-{uuid.uuid4().hex[:10]}" / "project"
    (path / ".tidegraph").mkdir(parents=True)
    try:
        yield path
    finally:
        services.down(path / ".tidegraph")
        shutil.rmtree(path.parent, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.postgres
def test_commands_in_a_subfolder_find_what_up_started(clean_env: Path, project: Path) -> None:
    port = _proc.free_port()
    env = _env(XDG_STATE_HOME=str(clean_env), TIDEGRAPH_PG_PORT=str(port))
    started = run_cli(["up", "--only", "postgres"], env, cwd=project)
    assert started.returncode == 0, started.stderr
    deeper = project / "docs" / "notes"
    deeper.mkdir(parents=True)
    # Without the port variable: the env file `up` wrote is found from the subfolder.
    env = _env(XDG_STATE_HOME=str(clean_env))
    status = run_cli(["status", "--json"], env, cwd=deeper)
    report = json.loads(status.stdout)
    assert report["state_dir"] == str((project / ".tidegraph").resolve())
    assert report["services"]["postgres"]["running"] is True
    assert report["services"]["postgres"]["address"].endswith(f":{port}/postgres")
    shown = run_cli(["realm", "show", "nosuchrealm"], env, cwd=deeper)
    assert "does not exist" in shown.stderr, shown.stderr  # it reached the server
