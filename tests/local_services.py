"""How the service fixtures obtain a broker and a database when the environment names none.

Order (fix_kafka.py, fix_pg.py): ``TIDEGRAPH_*`` variable; a container when a Docker engine
answers; else the project's own `up` into ``.tidegraph/test`` on free ports, shared by the
test sessions running at the same time and stopped by the last of them, when tests started it.
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from tidegraph.infra import _proc, local_kafka, services
from tidegraph.schemas import kafka_security

REPO = Path(__file__).resolve().parents[1]
TEST_STATE_DIR = REPO / ".tidegraph" / "test"


def docker_engine_answers(timeout: float = 0.5) -> bool:
    """True when a Docker engine answers ``GET /_ping`` within ``timeout`` (cheap, no client)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            path = host.removeprefix("unix://")
            if not Path(path).exists():
                return False
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(path)
        elif host.startswith("tcp://"):
            url = urlparse(host)
            sock = socket.create_connection((url.hostname or "", url.port or 2375), timeout)
        else:
            return False
        with sock:
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(256).split(b"\r\n", 1)[0] + b" "
    except OSError:
        return False


def docker_host_address() -> str:
    """The address published container ports are reached on."""
    host = os.environ.get("DOCKER_HOST", "")
    return (urlparse(host).hostname or "127.0.0.1") if host.startswith("tcp://") else "127.0.0.1"


@contextmanager
def _locked() -> Iterator[None]:
    TEST_STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (TEST_STATE_DIR / ".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _live_users(name: str) -> list[Path]:
    """Marker files of test sessions using ``name``; markers of dead sessions are removed."""
    users = []
    for marker in (TEST_STATE_DIR / "users").glob(f"{name}-*"):
        if _proc.is_alive(int(marker.name.rsplit("-", 1)[1])):
            users.append(marker)
        else:
            marker.unlink(missing_ok=True)
    return users


@contextmanager
def local_service(name: str) -> Iterator[str]:
    """The service from ``.tidegraph/test``: reused when it runs, else started with `up`.

    Sessions running at the same time share it: each registers itself, and the last one to
    leave stops it, and only when a test session (not a person) started it.
    """
    me = TEST_STATE_DIR / "users" / f"{name}-{os.getpid()}"
    started_by_tests = TEST_STATE_DIR / f"{name}.started-by-tests"
    with _locked():
        me.parent.mkdir(parents=True, exist_ok=True)
        me.touch()
        current = services.status(TEST_STATE_DIR)
        state = current.kafka if name == services.KAFKA else current.postgres
        if state.origin == "local" and state.running:
            address = state.address
        else:
            address = _up(name)
            started_by_tests.touch()
        if name == services.KAFKA:  # this process's clients (and its children) log in
            written = services.read_env_file(TEST_STATE_DIR)
            os.environ.update({k: v for k, v in written.items() if k in kafka_security.ENV_KEYS})
    try:
        yield address
    finally:
        with _locked():
            me.unlink(missing_ok=True)
            if not _live_users(name) and started_by_tests.exists():
                services.down(TEST_STATE_DIR, services=[name])
                started_by_tests.unlink(missing_ok=True)


def _up(name: str) -> str:
    if name == services.KAFKA:
        layout = local_kafka.KafkaLayout.under(TEST_STATE_DIR)
        if layout.data.exists() and not layout.scram_marker.exists():
            shutil.rmtree(layout.root)  # test data from before the broker was closed
        kafka_port, controller_port = _two_free_ports()
        status = services.up(
            TEST_STATE_DIR,
            services=[name],
            kafka_port=kafka_port,
            kafka_controller_port=controller_port,
        )
        return status.kafka_bootstrap
    return services.up(TEST_STATE_DIR, services=[name], pg_port=_proc.free_port()).pg_dsn


def free_port_run(count: int, low: int = 20000, high: int = 32000) -> int:
    """The first of ``count`` consecutive ports that are free now, below the ephemeral
    range (32768 and up on Linux)."""
    for _ in range(200):
        first = random.randrange(low, high - count)
        if all(_bindable(port) for port in range(first, first + count)):
            return first
    raise AssertionError(f"no run of {count} free ports in {low}-{high}")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_proc.LOOPBACK, port))
        except OSError:
            return False
        return True


def _two_free_ports() -> tuple[int, int]:
    first = _proc.free_port()
    second = _proc.free_port()
    while second == first:
        second = _proc.free_port()
    return first, second


@contextmanager
def kafka_container() -> Iterator[str]:
    """An ``apache/kafka`` container of the pinned release, KRaft, one published port."""
    from testcontainers.core.container import DockerContainer

    port = _proc.free_port()
    host = docker_host_address()
    container = (
        DockerContainer(f"apache/kafka:{local_kafka.kafka_version()}")
        .with_bind_ports(port, port)
        .with_envs(
            KAFKA_NODE_ID="1",
            KAFKA_PROCESS_ROLES="broker,controller",
            KAFKA_LISTENERS=f"PLAINTEXT://0.0.0.0:{port},CONTROLLER://localhost:9093",
            KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://{host}:{port}",
            KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
            KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093",
            KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
            KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
            KAFKA_MESSAGE_MAX_BYTES=str(local_kafka.MAX_MESSAGE_BYTES),
            KAFKA_NUM_PARTITIONS="1",
        )
    )
    with container:
        bootstrap = f"{host}:{port}"
        deadline = time.monotonic() + 120
        while not local_kafka.brokers_answering(bootstrap, timeout=3):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka container did not answer on {bootstrap}")
            time.sleep(0.5)
        yield bootstrap


@contextmanager
def pg_container() -> Iterator[str]:
    """A ``pgvector/pgvector`` container with logical decoding enabled."""
    from testcontainers.community.postgres import PostgresContainer

    container = PostgresContainer("pgvector/pgvector:pg17", driver=None).with_command(
        "postgres -c wal_level=logical -c max_connections=200"
    )
    with container:
        yield container.get_connection_url()


def env_without_settings(**settings: str) -> dict[str, str]:
    """This process's environment for a ``tidegraph`` subprocess: none of tidegraph's
    settings but ``settings`` — except how Kafka clients log in, which the test broker
    needs (its generated credentials)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TIDEGRAPH_") or k in kafka_security.ENV_KEYS
    }
    env.update(settings)
    return env


def run_cli(
    args: list[str], env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``tidegraph ARGS`` as a user runs it: its own process, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "tidegraph.infra.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
