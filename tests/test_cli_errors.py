"""Every CLI failure a user can cause prints one line, `tidegraph: <what> — <what to do>`,
and exits non-zero; services waiting for a dependency say so at a bounded rate. Never a
traceback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tidegraph.infra import _proc
from tidegraph.infra.reach import wait_until_answering

SERVICE_VARS = ("TIDEGRAPH_KAFKA_BOOTSTRAP", "TIDEGRAPH_PG_DSN", "TIDEGRAPH_STATE_DIR")


def _dead_env(tmp_path: Path) -> dict[str, str]:
    """Addresses where nothing listens, and a state folder of its own."""
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env["TIDEGRAPH_PG_DSN"] = f"postgresql://postgres@127.0.0.1:{_proc.free_port()}/postgres"
    env["TIDEGRAPH_KAFKA_BOOTSTRAP"] = f"127.0.0.1:{_proc.free_port()}"
    env["TIDEGRAPH_STATE_DIR"] = str(tmp_path / "state")
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidegraph.infra.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _assert_one_line(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tidegraph: ") and " — " in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["realm", "create", "acme"],
        ["realm", "show", "acme"],
        ["realm", "list"],
        ["realm", "delete", "acme", "--yes"],
        ["diff", "--realm", "acme", "--against", "acme_copy"],
        ["replay", "--realm", "acme"],
        ["replay", "--realm", "acme", "--drop", "realm_acme__audit_x"],
    ],
    ids=lambda a: " ".join(a[:3]),
)
def test_postgres_not_running_is_one_line(args: list[str], tmp_path: Path) -> None:
    _assert_one_line(_run(args, _dead_env(tmp_path)), "PostgreSQL", "run `tidegraph up`")


@pytest.mark.parametrize(
    "args", [["dlq", "list"], ["dlq", "replay", "--all"]], ids=lambda a: " ".join(a)
)
def test_kafka_not_running_is_one_line(args: list[str], tmp_path: Path) -> None:
    _assert_one_line(_run(args, _dead_env(tmp_path)), "Kafka", "run `tidegraph up`")


def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    done = _run(["realm", "create", "acme", "--config", str(missing)], _dead_env(tmp_path))
    _assert_one_line(done, str(missing), "No such file")
    done = _run(["replay", "--realm", "acme", "--config", str(missing)], _dead_env(tmp_path))
    _assert_one_line(done, str(missing))


def test_malformed_config_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"vocabulary": ["Not A Predicate"]}')
    done = _run(["realm", "create", "acme", "--config", str(bad)], _dead_env(tmp_path))
    _assert_one_line(done, str(bad), "correct the file")


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["indexer", "--metrics-port"], "--metrics-port"),
        (["serve", "--port"], "--port"),
        (["connect", "http", "--port"], "--port"),
    ],
    ids=["indexer", "serve", "connect-http"],
)
def test_taken_port_is_one_line(
    args: list[str], option: str, taken_port: int, tmp_path: Path
) -> None:
    done = _run([*args, str(taken_port)], _dead_env(tmp_path))
    _assert_one_line(done, f"port {taken_port}", "already in use", option)


@pytest.mark.parametrize("name", ["indexer", "serve"])
def test_services_say_what_they_wait_for_and_stop_quietly(name: str, tmp_path: Path) -> None:
    env = _dead_env(tmp_path)
    command = [name] if name == "indexer" else [name, "--port", str(_proc.free_port())]
    process = subprocess.Popen(
        [sys.executable, "-m", "tidegraph.infra.cli", *command],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()  # blocks until the first line
        assert "waiting for PostgreSQL" in first and "run `tidegraph up`" in first, first
        time.sleep(3)  # attempts continue every second; the message must not
        process.send_signal(signal.SIGTERM)
        rest = process.communicate(timeout=30)[1]
    finally:
        if process.poll() is None:
            process.kill()
    assert "Traceback" not in rest, rest
    assert "waiting for PostgreSQL" not in rest, rest  # said once, repeated only every 30 s
    assert process.returncode == 0


async def test_waiting_repeats_at_a_bounded_rate() -> None:
    said: list[str] = []
    attempts = 0

    async def probe() -> str | None:
        nonlocal attempts
        attempts += 1
        return None if attempts > 20 else "refused"

    await wait_until_answering(
        "Thing", "here:1", probe, "start it", say=said.append, repeat=0.05, poll=0.01
    )
    waiting = [line for line in said if line.startswith("waiting for Thing")]
    assert 1 <= len(waiting) < attempts / 2, said
    assert waiting[0] == "waiting for Thing at here:1: refused — start it"
    assert said[-1].startswith("Thing at here:1 answers after")


@pytest.mark.postgres
def test_realm_create_is_idempotent_and_names_a_difference(
    pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    env = _dead_env(tmp_path)
    env["TIDEGRAPH_PG_DSN"] = pg_dsn
    realm = unique_name("r")
    first = _run(["realm", "create", realm, "--preset", "narrative"], env)
    assert first.returncode == 0, first.stderr
    again = _run(["realm", "create", realm, "--preset", "narrative"], env)
    assert again.returncode == 0, again.stderr
    assert "already exists with this configuration" in again.stderr
    other = _run(["realm", "create", realm, "--preset", "biography"], env)
    _assert_one_line(other, "exists with another configuration", "vocabulary")
    config = tmp_path / "c.json"
    config.write_text('{"embedder": "hashing:256"}')
    _assert_one_line(
        _run(["realm", "create", realm, "--config", str(config)], env),
        "embedder 'hashing:384' → 'hashing:256'",
    )
