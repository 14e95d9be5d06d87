"""How the service fixtures obtain a broker and a database when the environment names none.

Order (fix_kafka.py, fix_pg.py): ``TIDEGRAPH_*`` variable; a container when a Docker engine
answers; else the project's own `up` into ``.tidegraph/test`` on free ports, stopped at the
end of the session only when this session started it.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from tidegraph.infra import _proc, local_kafka, services

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
def local_service(name: str) -> Iterator[str]:
    """Reuse ``name`` when it already runs from the test state dir; else `up` it, then `down`."""
    current = services.status(TEST_STATE_DIR)
    state = current.kafka if name == services.KAFKA else current.postgres
    if state.origin == "local" and state.running:
        yield state.address
        return
    if name == services.KAFKA:
        kafka_port, controller_port = _two_free_ports()
        status = services.up(
            TEST_STATE_DIR,
            services=[name],
            kafka_port=kafka_port,
            kafka_controller_port=controller_port,
        )
        address = status.kafka_bootstrap
    else:
        status = services.up(TEST_STATE_DIR, services=[name], pg_port=_proc.free_port())
        address = status.pg_dsn
    try:
        yield address
    finally:
        services.down(TEST_STATE_DIR, services=[name])


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
