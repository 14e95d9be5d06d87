"""`up` / `down` / `status` against real processes, and the one-line errors people see."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from aiokafka import AIOKafkaProducer

from tidegraph.infra import _proc, local_kafka, local_pg, services
from tidegraph.infra.errors import (
    PortInUseError,
    PrerequisiteMissingError,
    ServiceStartError,
    ServiceUnreachableError,
)
from tidegraph.schemas import kafka_security
from tidegraph.schemas.kafka_security import KafkaSecurity

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
def state_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private state folder (inside the repo's ignored .tidegraph/) and no service variables.

    Whatever a test leaves running there is stopped afterwards, so a failing test never
    leaks a broker or a server.
    """
    for var in SERVICE_VARS:
        monkeypatch.delenv(var, raising=False)
    path = REPO / ".tidegraph" / f"test-{uuid.uuid4().hex[:10]}"
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        services.down(path)
        shutil.rmtree(path, ignore_errors=True)


def _ours(path: Path) -> list[int]:
    """Pids of live processes whose command line mentions ``path``."""
    return [
        pid
        for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
        if pid != os.getpid() and _proc.is_ours(pid, str(path))
    ]


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.postgres
def test_up_twice_then_down_leaves_no_process(state_dir: Path) -> None:
    kafka_port, controller_port, pg_port = (_proc.free_port() for _ in range(3))
    ports = {"kafka_port": kafka_port, "kafka_controller_port": controller_port}
    first = services.up(state_dir, pg_port=pg_port, **ports)
    assert first.kafka.started and first.postgres.started
    assert first.ok and first.kafka.origin == first.postgres.origin == "local"
    pids = {first.kafka.pid, first.postgres.pid}
    assert None not in pids and all(_proc.is_alive(pid) for pid in pids if pid)

    second = services.up(state_dir, pg_port=pg_port, **ports)
    third = services.up(state_dir)  # no ports given: whatever runs here is reused
    for again in (second, third):
        assert not again.kafka.started and not again.postgres.started
        assert {again.kafka.pid, again.postgres.pid} == pids

    assert first.env_file is not None
    written = services.read_env_file(state_dir)
    secret = local_pg.PgCredentials.from_env(written)
    assert secret is not None
    kafka_password = written[services.KAFKA_PASSWORD_KEY]
    security = local_kafka.local_security(kafka_password)
    assert written == {
        **security.env(),
        services.KAFKA_PASSWORD_KEY: kafka_password,
        "TIDEGRAPH_KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka_port}",
        "TIDEGRAPH_PG_DSN": f"postgresql://postgres:{secret.superuser}@127.0.0.1:{pg_port}/postgres",
        "TIDEGRAPH_PG_REPLICATION_DSN": (
            f"postgresql://tidegraph_cdc:{secret.replication}@127.0.0.1:{pg_port}/postgres"
        ),
        **secret.env(),
        services.UP_WROTE_KEY: written[services.UP_WROTE_KEY],
    }
    assert len(written[services.UP_WROTE_KEY].split()) == 2  # both addresses are up's own
    assert first.pg_dsn == written["TIDEGRAPH_PG_DSN"]
    assert (state_dir / "env").stat().st_mode & 0o777 == 0o600
    assert (state_dir / "kafka").stat().st_mode & 0o777 == 0o700
    assert (state_dir / "postgres").stat().st_mode & 0o777 == 0o700
    assert state_dir.stat().st_mode & 0o076 == 0, "no group access, others may only traverse"
    assert local_kafka.brokers_answering(first.kafka_bootstrap, security=security)
    # closed: no login, or a wrong password, gets nothing
    assert not local_kafka.brokers_answering(
        first.kafka_bootstrap, security=KafkaSecurity(security_protocol="PLAINTEXT"), timeout=3
    )
    wrong = local_kafka.local_security("wrong")
    assert not local_kafka.brokers_answering(first.kafka_bootstrap, security=wrong, timeout=3)
    config = state_dir / "kafka" / "server.properties"
    assert config.stat().st_mode & 0o777 == 0o600
    assert kafka_password not in (state_dir / "kafka" / "kafka.json").read_text()
    with psycopg.connect(first.pg_dsn) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()

    stopped = services.down(state_dir)
    assert {(s.name, s.pid) for s in stopped} == {
        ("kafka", first.kafka.pid),
        ("postgres", first.postgres.pid),
    }
    assert not any(_proc.is_alive(pid) for pid in pids if pid)
    assert _ours(state_dir) == []
    assert services.down(state_dir) == ()
    after = services.status(state_dir)
    assert not after.kafka.running and not after.postgres.running
    # the addresses go; the passwords stay with the data directory, and nowhere else
    assert services.read_env_file(state_dir) == {
        **secret.env(),
        services.KAFKA_PASSWORD_KEY: kafka_password,
    }
    again = services.up(state_dir, services=["postgres"], pg_port=pg_port)
    assert again.pg_dsn == written["TIDEGRAPH_PG_DSN"]
    with psycopg.connect(again.pg_dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_killed_while_it_holds_a_logical_slot_comes_back_with_up(
    state_dir: Path,
) -> None:
    port = _proc.free_port()
    first = services.up(state_dir, services=["postgres"], pg_port=port)
    assert first.pg_dsn is not None and first.postgres.pid is not None
    with psycopg.connect(first.pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('left_behind', 'pgoutput')")
    # no shutdown checkpoint: recovery next start; the dead postmaster may stay a zombie
    # that nothing reaps, which PostgreSQL's own lock check takes for a running server
    os.kill(first.postgres.pid, signal.SIGKILL)
    while _proc.is_alive(first.postgres.pid):
        time.sleep(0.05)
    again = services.up(state_dir, services=["postgres"], pg_port=port)
    assert again.postgres.started and again.pg_dsn == first.pg_dsn
    with psycopg.connect(again.pg_dsn, autocommit=True) as conn:
        slots = conn.execute("SELECT slot_name FROM pg_replication_slots").fetchall()
        assert slots == [("left_behind",)]
        conn.execute("SELECT pg_drop_replication_slot('left_behind')")
    services.down(state_dir)


@pytest.mark.slow
@pytest.mark.kafka
def test_a_fresh_up_command_creates_the_topics_with_the_login_it_wrote(
    state_dir: Path,
) -> None:
    """The command reads the env file before `up` writes it: on a fresh state folder its
    own topic creation must log in with the credentials just generated."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGRAPH_")}
    ports = ["--kafka-port", str(_proc.free_port())]
    ports += ["--kafka-controller-port", str(_proc.free_port())]
    done = run_cli(["--state-dir", str(state_dir), "up", "--only", "kafka", *ports], env)
    assert done.returncode == 0, done.stderr
    assert "topics:" in done.stdout and "unreachable" not in done.stderr


def test_the_broker_can_advertise_a_proxy_in_front_of_it(tmp_path: Path) -> None:
    """Clients reconnect to the advertised listener after bootstrap: a fault test's proxy
    sees every connection only when the broker advertises the proxy's port."""
    layout = local_kafka.KafkaLayout.under(tmp_path)
    own = local_kafka.server_properties(layout, 9092, 9093, "p", "c").splitlines()
    assert "advertised.listeners=SASL_PLAINTEXT://127.0.0.1:9092" in own
    props = local_kafka.server_properties(layout, 9092, 9093, "p", "c", advertised_port=19092)
    lines = props.splitlines()
    assert "advertised.listeners=SASL_PLAINTEXT://127.0.0.1:19092" in lines
    assert "listeners=SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in lines


def _command_lines() -> set[bytes]:
    lines = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.add((entry / "cmdline").read_bytes())
            except OSError:
                pass  # gone meanwhile
    return lines


@pytest.mark.slow
@pytest.mark.kafka
def test_the_scram_password_is_never_on_a_command_line(state_dir: Path) -> None:
    """While `up` formats a fresh broker's data folder (and starts it), every process's
    command line is read again and again: the SCRAM password is in none of them, and the
    broker accepts that password's login and refuses another."""
    seen: set[bytes] = set()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.update(_command_lines())

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        status = services.up(
            state_dir,
            services=[services.KAFKA],
            kafka_port=_proc.free_port(),
            kafka_controller_port=_proc.free_port(),
        )
    finally:
        done.set()
        poller.join()
    password = services.read_env_file(state_dir)[services.KAFKA_PASSWORD_KEY]
    formats = [c for c in seen if b"StorageTool" in c and str(state_dir).encode() in c]
    assert formats, "the poll never saw the storage format running"
    leaks = [c for c in seen if password.encode() in c]
    assert not leaks, f"{len(leaks)} command lines held the password"
    for path in (local_kafka.KafkaLayout.under(state_dir).log, state_dir / "kafka" / "scram"):
        assert password not in path.read_text()
    bootstrap = status.kafka_bootstrap
    login = local_kafka.local_security(password)
    assert local_kafka.brokers_answering(bootstrap, timeout=10, security=login)
    wrong = local_kafka.local_security(password[::-1])
    assert not local_kafka.brokers_answering(bootstrap, timeout=5, security=wrong)


@pytest.mark.parametrize("service", ["kafka", "postgres"])
def test_port_in_use_names_the_port_and_its_holder(state_dir: Path, service: str) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        ports = (
            {"kafka_port": port, "kafka_controller_port": _proc.free_port()}
            if service == "kafka"
            else {"pg_port": port}
        )
        with pytest.raises(PortInUseError) as caught:
            services.up(state_dir, services=[service], **ports)
    message = str(caught.value)
    assert f"port {port}" in message
    assert f"pid {os.getpid()}" in message
    assert "\n" not in message
    assert not (state_dir / service).exists(), "nothing may start when a port is taken"


@pytest.mark.slow
@pytest.mark.kafka
def test_start_timeout_shows_log_tail_and_stops_the_broker(state_dir: Path) -> None:
    with pytest.raises(ServiceStartError) as caught:
        services.up(
            state_dir,
            services=["kafka"],
            kafka_port=_proc.free_port(),
            kafka_controller_port=_proc.free_port(),
            timeout=0.2,
        )
    message = str(caught.value)
    assert "did not answer" in message.splitlines()[0]
    assert "last lines of the kafka log" in message
    assert "tidegraph up: starting Kafka" in message
    assert _ours(state_dir) == []


@pytest.mark.kafka
@pytest.mark.postgres
def test_external_services_are_checked_not_started(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, kafka_bootstrap: str, pg_dsn: str
) -> None:
    monkeypatch.setenv("TIDEGRAPH_KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("TIDEGRAPH_PG_DSN", pg_dsn)
    status = services.up(state_dir)
    for s in status.services:
        assert s.origin == "external" and s.running and not s.started and s.pid is None
    assert not (state_dir / "kafka").exists() and not (state_dir / "postgres").exists()
    assert services.read_env_file(state_dir) == {
        "TIDEGRAPH_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "TIDEGRAPH_PG_DSN": pg_dsn,
    }
    assert services.down(state_dir) == ()
    assert local_kafka.brokers_answering(kafka_bootstrap)


def test_unreachable_external_broker_is_an_error(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = f"127.0.0.1:{_proc.free_port()}"
    monkeypatch.setenv("TIDEGRAPH_KAFKA_BOOTSTRAP", address)
    with pytest.raises(ServiceUnreachableError, match=address) as caught:
        services.up(state_dir, services=["kafka"], timeout=2)
    assert caught.value.retriable


def test_missing_java_is_one_line(state_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "HOME": str(tmp_path), "TIDEGRAPH_CACHE_DIR": str(tmp_path)}
    done = run_cli(["--state-dir", str(state_dir), "up"], env)
    assert done.returncode == 2
    assert done.stderr.startswith("tidegraph: java not found: install a JDK 17")
    assert len(done.stderr.strip().splitlines()) == 1
    assert _ours(state_dir) == []


def test_missing_maven_is_one_line_when_the_jars_are_not_cached(
    state_dir: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"17.0.9\" 2023-10-17' >&2\n")
    java.chmod(0o755)
    cache = tmp_path / "cache"
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "TIDEGRAPH_CACHE_DIR": str(cache)}
    done = run_cli(["--state-dir", str(state_dir), "up"], env)
    assert done.returncode == 2
    assert done.stderr.startswith("tidegraph: mvn not found: install Apache Maven")
    assert len(done.stderr.strip().splitlines()) == 1


def test_old_java_is_named(tmp_path: Path) -> None:
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    with pytest.raises(PrerequisiteMissingError, match=r"java is too old \(Java 11"):
        local_kafka.find_java({"PATH": str(tmp_path)})


def test_status_json_on_an_empty_state_dir(state_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    done = run_cli(["status", "--json", "--state-dir", str(state_dir)], env)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["services"]["kafka"]["running"] is False
    assert report["services"]["postgres"]["origin"] == "local"


def test_commands_are_discovered() -> None:
    from tidegraph.infra.cli import build_parser

    parser = build_parser()
    for command in ("up", "down", "status"):
        args = parser.parse_args([command])
        assert callable(args.func)


def test_dsn_passwords_are_masked() -> None:
    assert local_pg.redact("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert local_pg.redact("host=h password=secret user=u") == "host=h password=*** user=u"
    assert local_pg.redact("postgresql://u@h/db") == "postgresql://u@h/db"


def test_compose_file_pins_the_same_kafka_release() -> None:
    compose = (REPO / "infra" / "compose.yaml").read_text()
    assert f"image: apache/kafka:{local_kafka.kafka_version()}\n" in compose
    assert "wal_level=logical" in compose


@pytest.mark.kafka
@pytest.mark.postgres
def test_status_right_after_a_fresh_up_says_there_is_nothing_yet(
    state_dir: Path, kafka_bootstrap: str
) -> None:
    """A server nothing has written to has no catalogue: status says so, no SQL error."""
    services.up(state_dir, services=[services.POSTGRES], pg_port=_proc.free_port())
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env["TIDEGRAPH_KAFKA_BOOTSTRAP"] = kafka_bootstrap
    done = run_cli(["status", "--state-dir", str(state_dir)], env)
    assert done.returncode == 0, done.stderr
    assert "no realms yet" in done.stdout
    assert "unavailable" not in done.stdout and "does not exist" not in done.stdout, done.stdout
    as_json = run_cli(["status", "--json", "--state-dir", str(state_dir)], env)
    report = json.loads(as_json.stdout)
    assert report["realms"] == {} and report["problems"] == [], report


@pytest.mark.postgres
def test_up_again_from_a_shell_that_loaded_the_env_file(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up` suggests `. <state>/env`; after a `down` that shell still carries the old
    addresses. They are `up`'s own: the next `up` starts the server again, it does not take
    them for an external server. An address set by hand still is one."""
    port = _proc.free_port()
    services.up(state_dir, services=[services.POSTGRES], pg_port=port)
    loaded = services.read_env_file(state_dir)
    assert "TIDEGRAPH_PG_DSN" in loaded
    services.down(state_dir, services=[services.POSTGRES])
    for key, value in loaded.items():
        monkeypatch.setenv(key, value)
    assert services.status(state_dir).postgres.origin == "local"
    again = services.up(state_dir, services=[services.POSTGRES], pg_port=port)
    assert again.postgres.origin == "local" and again.postgres.started
    assert again.pg_dsn == loaded["TIDEGRAPH_PG_DSN"]
    monkeypatch.setenv("TIDEGRAPH_PG_DSN", f"postgresql://someone@127.0.0.1:{port}/elsewhere")
    assert services.status(state_dir).postgres.origin == "external"


@pytest.mark.slow
@pytest.mark.kafka
async def test_client_properties_let_kafkas_own_client_read_the_local_broker(
    state_dir: Path,
) -> None:
    """`up` writes ``<state>/client.properties`` (0600) with the broker's address and login;
    Kafka's own Java consumer, configured by that file alone, reads what tidegraph wrote."""
    kafka_port, controller_port = _proc.free_port(), _proc.free_port()
    first = services.up(
        state_dir,
        services=[services.KAFKA],
        kafka_port=kafka_port,
        kafka_controller_port=controller_port,
    )
    properties = state_dir / services.CLIENT_PROPERTIES
    assert properties.stat().st_mode & 0o777 == 0o600
    assert f"bootstrap.servers={first.kafka_bootstrap}\n" in properties.read_text()
    written = services.read_env_file(state_dir)
    security = KafkaSecurity.model_validate(
        {k.removeprefix("TIDEGRAPH_KAFKA_").lower(): v for k, v in written.items()
         if k in kafka_security.ENV_KEYS}
    )  # fmt: skip
    topic = "props-check"
    producer = AIOKafkaProducer(
        bootstrap_servers=first.kafka_bootstrap, **security.client_options()
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b'{"hello": "kafka tools"}', key=b"demo")
    finally:
        await producer.stop()
    java = local_kafka.find_java()
    jars = local_kafka.jars_dir(local_kafka.cache_root())
    reader = REPO / "tests" / "kafka" / "ReadWithProperties.java"
    done = await asyncio.to_thread(
        subprocess.run,
        [java, "-cp", f"{jars}/*", str(reader), str(properties), topic],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ['demo\t{"hello": "kafka tools"}'], done.stderr[-3000:]
    services.down(state_dir, services=[services.KAFKA])
    assert not properties.exists()  # no broker, no address to give
