"""A single-node Apache Kafka broker in KRaft mode, run from Maven Central's jars.

Why this shape: the jars are resolved once by Maven (the pom pins the version) into a cache
outside the repository, so the repository stays small and a fresh machine needs only a JDK
and Maven. The node plays broker and controller on loopback with replication factor 1 —
a development and test broker, never a production one.

Closed by default: the client listener takes only SASL/SCRAM-SHA-256 logins of the user
``tidegraph``, whose generated password is stored in the cluster's metadata when the log
dirs are formatted (the caller keeps it; `up` keeps it only in the 0600 env file); the
controller listener takes only SASL/PLAIN with a password made anew at every start. A data
directory formatted by an earlier, open layout has no SCRAM user and is refused with what to
do. The folder is the owner's only, and ``server.properties`` (which holds the broker's own
logins) is 0600.

Files under the state folder (``<state>/kafka/``): ``server.properties``,
``log4j2.properties``, ``data/`` (the log dirs), ``scram`` (marks log dirs formatted with
the SCRAM user), ``broker.log`` and ``kafka.json`` (what `up` started: pid and ports).
"""

# Long on purpose: one broker's life cycle (toolchain, configuration, storage, launch, readiness,
# stop) over one layout value.
from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaError
from pydantic import SecretStr

from tidegraph.infra import _proc, maven
from tidegraph.infra.errors import (
    PrerequisiteMissingError,
    ServiceStartError,
    StateDirError,
)
from tidegraph.infra.package_files import kafka_file
from tidegraph.schemas import KafkaSecurity, local_bootstrap, replication

MIN_JAVA = 17
JAVA_INSTALL = "a JDK 17 or newer (e.g. apt-get install openjdk-17-jdk-headless)"
MVN_INSTALL = "Apache Maven 3.6 or newer (e.g. apt-get install maven)"
JVM_FLAGS = (
    "-Xms256m",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
USER = "tidegraph"
"""The SCRAM user every tidegraph client of the local broker logs in as."""
MAX_MESSAGE_BYTES = 10 * 1024 * 1024
"""Broker-wide record batch limit: documents go up to 8 MiB, plus headers and framing."""

_T = TypeVar("_T")


# --- where things are ---------------------------------------------------------------------


def pom_path() -> Path:
    """The broker pom."""
    return kafka_file("pom.xml")


def stdin_args_path() -> Path:
    """``StdinArgs.java``: runs a tool with secret arguments read from stdin, not argv."""
    return kafka_file("StdinArgs.java")


def kafka_version(pom: Path | None = None) -> str:
    """The Kafka release the pom pins (``<kafka.version>``)."""
    text = (pom or pom_path()).read_text()
    found = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", text)
    if not found:
        raise StateDirError(f"no <kafka.version> in {pom or pom_path()}")
    return found.group(1)


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """``TIDEGRAPH_CACHE_DIR``, else ``$XDG_CACHE_HOME/tidegraph``, else ``~/.cache/tidegraph``."""
    env = os.environ if environ is None else environ
    if env.get("TIDEGRAPH_CACHE_DIR"):
        return Path(env["TIDEGRAPH_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "tidegraph"


@dataclass(frozen=True)
class KafkaLayout:
    """The broker's files under one state folder."""

    root: Path
    """``<state>/kafka``, absolute (the server runs in another working directory)."""

    @classmethod
    def under(cls, state_dir: Path) -> KafkaLayout:
        return cls(state_dir.resolve() / "kafka")

    @property
    def config(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "broker.log"

    @property
    def record(self) -> Path:
        return self.root / "kafka.json"

    @property
    def scram_marker(self) -> Path:
        return self.root / "scram"


@dataclass(frozen=True)
class KafkaRuntime:
    """A JDK and the broker's jars, ready to launch."""

    java: str
    """Path of the ``java`` executable."""
    libs: Path
    """Folder holding every runtime jar (used as ``libs/*`` on the class path)."""
    version: str
    """Kafka release, e.g. ``4.4.0``."""


@dataclass(frozen=True)
class KafkaProcess:
    """What `up` recorded about a broker it launched."""

    pid: int
    """The JVM's process id."""
    port: int
    """PLAINTEXT listener port on 127.0.0.1."""
    controller_port: int
    """KRaft controller listener port on 127.0.0.1."""
    version: str
    """Kafka release."""
    password: str = field(default="", repr=False, compare=False)
    """The SCRAM password of :data:`USER`, when known (never recorded)."""

    @property
    def bootstrap(self) -> str:
        return local_bootstrap(self.port)

    @property
    def security(self) -> KafkaSecurity:
        """How clients log in to this broker."""
        return local_security(self.password)


def local_security(password: str) -> KafkaSecurity:
    """Client settings for the local broker: SASL/SCRAM as :data:`USER`."""
    return KafkaSecurity(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username=USER,
        sasl_password=SecretStr(password),
        ssl_cafile=None,
    )


def new_password() -> str:
    return secrets.token_urlsafe(24)


# --- prerequisites and jars -----------------------------------------------------------------


def find_java(environ: Mapping[str, str] | None = None) -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH, checked to be a JDK 17 or newer."""
    env = os.environ if environ is None else environ
    java: str | None = None
    if env.get("JAVA_HOME"):
        candidate = Path(env["JAVA_HOME"]) / "bin" / "java"
        java = str(candidate) if candidate.is_file() else None
    java = java or shutil.which("java", path=env.get("PATH", ""))
    if java is None:
        raise PrerequisiteMissingError("java", JAVA_INSTALL)
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PrerequisiteMissingError("java", JAVA_INSTALL, found=f"{java}: {exc}") from exc
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if not found:
        raise PrerequisiteMissingError("java", JAVA_INSTALL, found=f"{java}: unknown version")
    major = int(found.group(1))
    if major == 1 and found.group(2):  # "1.8.0_x" style
        major = int(found.group(2))
    if major < MIN_JAVA:
        raise PrerequisiteMissingError("java", JAVA_INSTALL, found=f"Java {major} at {java}")
    return java


def find_mvn(environ: Mapping[str, str] | None = None) -> str:
    """``mvn`` on PATH (only needed while the jars are not cached)."""
    env = os.environ if environ is None else environ
    mvn = shutil.which("mvn", path=env.get("PATH", ""))
    if mvn is None:
        raise PrerequisiteMissingError("mvn", MVN_INSTALL)
    return mvn


def jars_dir(cache: Path, pom: Path | None = None) -> Path:
    """Where the jars for the pinned version live (whether fetched yet or not)."""
    return cache / f"kafka-{kafka_version(pom)}" / "libs"


def jars_cached(cache: Path, pom: Path | None = None) -> bool:
    """True when the jars for exactly this pom are already in the cache."""
    pom = pom or pom_path()
    return maven.fetched(pom, jars_dir(cache, pom))


def ensure_jars(cache: Path, *, mvn: str | None = None, pom: Path | None = None) -> Path:
    """Fetch the broker's runtime jars into the cache once; return the folder holding them."""
    pom = pom or pom_path()
    libs = jars_dir(cache, pom)
    if maven.fetched(pom, libs):
        return libs
    return maven.fetch(pom, libs, mvn=mvn or find_mvn(), expect="kafka_*.jar")


def prepare(cache: Path | None = None) -> KafkaRuntime:
    """Check java (and mvn when needed), fetch the jars; what every launch needs first."""
    java = find_java()
    cache = cache or cache_root()
    pom = pom_path()
    if not jars_cached(cache, pom):
        find_mvn()
    return KafkaRuntime(java=java, libs=ensure_jars(cache, pom=pom), version=kafka_version(pom))


def check_prerequisites(cache: Path | None = None) -> None:
    """Fail fast, before anything starts, when java or (for an empty cache) mvn is missing."""
    find_java()
    if not jars_cached(cache or cache_root()):
        find_mvn()


# --- configuration ----------------------------------------------------------------------------


def server_properties(
    layout: KafkaLayout,
    port: int,
    controller_port: int,
    password: str,
    controller_password: str,
    *,
    advertised_port: int | None = None,
) -> str:
    """The single broker's configuration: one KRaft node, loopback only, replication
    factor 1 (:func:`node_settings` for node 1, the only voter).

    ``advertised_port`` is where clients are told to connect after bootstrap (default
    ``port``): a fault test puts a TCP proxy there, so every connection, not only the
    bootstrap one, crosses it."""
    settings = node_settings(
        layout,
        1,
        port,
        {1: controller_port},
        password,
        controller_password,
        advertised_port=advertised_port,
    )
    return render_properties(settings)


def node_settings(
    layout: KafkaLayout,
    node_id: int,
    port: int,
    voters: Mapping[int, int],
    password: str,
    controller_password: str,
    *,
    advertised_port: int | None = None,
) -> dict[str, str]:
    """One node of a local KRaft cluster whose every node is broker and controller:
    loopback only, SASL on both listeners (SCRAM for clients and between brokers, PLAIN for
    the controllers: KRaft controllers cannot use SCRAM, whose users live in the metadata
    they serve). ``voters`` maps each node id to its controller port; its size sets the
    replication of the internal topics and the topics' defaults
    (:func:`~tidegraph.schemas.topics.replication`), and no replica out of sync may lead."""
    host = _proc.LOOPBACK
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    copies = replication(len(voters))
    factor, insync = str(copies.factor), str(copies.min_insync)
    quorum = ",".join(f"{node}@{host}:{voters[node]}" for node in sorted(voters))
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": quorum,
        "listeners": f"SASL_PLAINTEXT://{host}:{port},CONTROLLER://{host}:{voters[node_id]}",
        "advertised.listeners": f"SASL_PLAINTEXT://{host}:{advertised_port or port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            f'{plain} required username="controller" password="{controller_password}" '
            f'user_controller="{controller_password}";'
        ),
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
            f'{scram} required username="{USER}" password="{password}";'
        ),
        "log.dirs": str(layout.data),
        "num.partitions": "1",
        "default.replication.factor": factor,
        "min.insync.replicas": insync,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": factor,
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": factor,
        "transaction.state.log.min.isr": insync,
        "share.coordinator.state.topic.replication.factor": factor,
        "share.coordinator.state.topic.min.isr": insync,
        "group.initial.rebalance.delay.ms": "0",
        "message.max.bytes": str(MAX_MESSAGE_BYTES),
        "replica.fetch.max.bytes": str(MAX_MESSAGE_BYTES),
    }


def render_properties(settings: Mapping[str, str]) -> str:
    """``server.properties`` text of ``settings``."""
    lines = ["# Written by `tidegraph up` on every start; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


LOG4J2 = """\
# Broker log to stdout, which `tidegraph up` appends to broker.log.
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
"""


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, no leading '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _java_base(runtime: KafkaRuntime, layout: KafkaLayout) -> list[str]:
    """``java``, logging properties and class path: shared by the format tool and the broker."""
    return [
        runtime.java,
        f"-Dlog4j2.configurationFile={layout.log4j}",
        f"-Dkafka.logs.dir={layout.root}",
        "-cp",
        f"{runtime.libs}/*",
    ]


def format_storage(
    runtime: KafkaRuntime, layout: KafkaLayout, password: str, cluster_id: str
) -> None:
    """Format the log dirs once, with the SCRAM user (a fresh data dir makes a start cold).
    Every node of one cluster is formatted with the same ``cluster_id`` and SCRAM user."""
    if (layout.data / "meta.properties").is_file():
        if not layout.scram_marker.is_file():
            raise StateDirError(
                f"the broker data in {layout.data} predates authentication and has no SCRAM "
                f"user; to start a closed broker run `tidegraph down`, remove {layout.root} "
                "(its topics go with it) and run `tidegraph up` again"
            )
        return
    # The SCRAM user's password goes in on stdin: on argv every process could read it from
    # /proc/<pid>/cmdline for as long as the format runs.
    command = [
        *_java_base(runtime, layout), str(stdin_args_path()), "kafka.tools.StorageTool",
        "format", "-t", cluster_id, "-c", str(layout.config), "--ignore-formatted",
    ]  # fmt: skip
    secret = f"--add-scram\nSCRAM-SHA-256=[name={USER},password={password}]\n"
    done = subprocess.run(command, input=secret, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise ServiceStartError(
            "kafka", "storage format failed", log_tail=tail.replace(password, "***")
        )
    layout.scram_marker.write_text(f"SCRAM-SHA-256 user {USER}\n")


# --- lifecycle ----------------------------------------------------------------------------------


def read_record(layout: KafkaLayout) -> KafkaProcess | None:
    """The broker `up` last recorded for this state folder, if any."""
    try:
        raw = json.loads(layout.record.read_text())
        return KafkaProcess(
            pid=int(raw["pid"]),
            port=int(raw["port"]),
            controller_port=int(raw["controller_port"]),
            version=str(raw["version"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running(layout: KafkaLayout) -> KafkaProcess | None:
    """The recorded broker when its process is still ours and alive."""
    record = read_record(layout)
    if record is None or not _proc.is_ours(record.pid, str(layout.config)):
        return None
    return record


def launch(
    layout: KafkaLayout,
    runtime: KafkaRuntime,
    *,
    port: int,
    controller_port: int,
    password: str | None = None,
    advertised_port: int | None = None,
) -> KafkaProcess:
    """Write the configuration, format if fresh, start the JVM; returns before it answers.
    ``password`` is the SCRAM user's: the one the log dirs were formatted with, or a new one
    for fresh ones. ``advertised_port``: see :func:`server_properties`."""
    password = password or new_password()
    controller_password = new_password()
    text = server_properties(
        layout,
        port,
        controller_port,
        password,
        controller_password,
        advertised_port=advertised_port,
    )
    write_config(layout, text)
    format_storage(runtime, layout, password, new_cluster_id())
    return spawn(layout, runtime, port=port, controller_port=controller_port, password=password)


def write_config(layout: KafkaLayout, text: str) -> None:
    """Write ``server.properties`` (0600: it holds the node's logins) and the logging
    configuration into the node's folder, which is the owner's only."""
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.root.chmod(0o700)
    layout.config.touch(mode=0o600)
    layout.config.chmod(0o600)
    layout.config.write_text(text)
    layout.log4j.write_text(LOG4J2)


def spawn(
    layout: KafkaLayout,
    runtime: KafkaRuntime,
    *,
    port: int,
    controller_port: int,
    password: str,
    jvm_flags: Sequence[str] = JVM_FLAGS,
) -> KafkaProcess:
    """Start the JVM of a configured, formatted node and record it; returns at once."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with layout.log.open("a") as log:
        log.write(f"\n===== tidegraph up: starting Kafka {runtime.version} at {stamp} =====\n")
    java, *rest = _java_base(runtime, layout)
    archive = class_archive(runtime)
    pending: Path | None = None
    if archive.is_file():
        sharing = f"-XX:SharedArchiveFile={archive}"
    else:
        pending = archive.with_name(f"{archive.name}.{os.getpid()}-{time.time_ns()}.partial")
        sharing = f"-XX:ArchiveClassesAtExit={pending}"
    command = [java, *jvm_flags, sharing, *rest, "kafka.Kafka", str(layout.config)]
    pid = _proc.spawn_detached(command, log=layout.log, cwd=layout.root)
    process = KafkaProcess(
        pid=pid,
        port=port,
        controller_port=controller_port,
        version=runtime.version,
        password=password,
    )
    record = {
        "pid": pid,
        "port": port,
        "controller_port": controller_port,
        "version": runtime.version,
        "started_at": time.time(),
        "archive": str(archive),
        "archive_pending": str(pending),
    }
    layout.record.write_text(json.dumps(record) + "\n")
    return process


def class_archive(runtime: KafkaRuntime) -> Path:
    """The broker's class-data-sharing archive for this JDK, next to the cached jars.

    Why: most of a warm start is the JVM loading and verifying the broker's classes. The
    first broker stopped by `down` dumps them (``-XX:ArchiveClassesAtExit``); every later
    start maps the archive instead. A stale or foreign archive is ignored by the JVM.
    """
    java = Path(runtime.java).resolve()
    identity = f"{java}:{java.stat().st_mtime_ns}".encode()
    return runtime.libs.parent / f"classes-{hashlib.sha256(identity).hexdigest()[:12]}.jsa"


def _adopt_archive(record: Path) -> None:
    """After the JVM exited: keep the archive it dumped, or drop a partial one."""
    try:
        raw = json.loads(record.read_text())
    except (OSError, ValueError):
        return
    if raw.get("archive_pending") in (None, "None"):
        return
    pending, archive = Path(raw["archive_pending"]), Path(raw["archive"])
    if pending.is_file() and pending.stat().st_size > 0 and not archive.exists():
        pending.replace(archive)
    pending.unlink(missing_ok=True)


def wait_ready(layout: KafkaLayout, process: KafkaProcess, *, timeout: float) -> None:
    """Block until the broker answers a metadata request listing itself, or raise."""
    deadline = time.monotonic() + timeout
    while True:
        if not _proc.is_alive(process.pid):
            raise ServiceStartError(
                "kafka",
                "exited during start-up",
                log_path=str(layout.log),
                log_tail=_proc.log_tail(layout.log),
            )
        left = deadline - time.monotonic()
        if _proc.port_answers(process.port) and brokers_answering(
            process.bootstrap, timeout=max(1.0, min(5.0, left)), security=process.security
        ):
            return
        if time.monotonic() >= deadline:
            raise ServiceStartError(
                "kafka",
                f"did not answer on {process.bootstrap} within {timeout:g}s",
                log_path=str(layout.log),
                log_tail=_proc.log_tail(layout.log),
            )
        time.sleep(0.2)


def stop(layout: KafkaLayout, *, timeout: float = 60.0) -> int | None:
    """Stop the broker `up` started here (controlled shutdown first); return its pid."""
    process = running(layout)
    if process is None:
        layout.record.unlink(missing_ok=True)
        return None
    _proc.terminate(process.pid, signal.SIGTERM, timeout=timeout)
    _adopt_archive(layout.record)
    layout.record.unlink(missing_ok=True)
    return process.pid


# --- probing ------------------------------------------------------------------------------------


def _run_blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion from sync code, even if this thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _count_brokers(bootstrap: str, seconds: float, security: KafkaSecurity) -> int:
    client = AIOKafkaClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=int(seconds * 1000),
        **security.client_options(),
    )
    try:
        async with asyncio.timeout(seconds):
            await client.bootstrap()
        return len(client.cluster.brokers())
    finally:
        await client.close()


@contextlib.contextmanager
def _quiet_client() -> Iterator[None]:
    """Silence aiokafka's connection errors while probing: "no answer" is an expected result."""
    logger = logging.getLogger("aiokafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def broker_count(
    bootstrap: str, *, timeout: float = 5.0, security: KafkaSecurity | None = None
) -> int:
    """How many live brokers the metadata from ``bootstrap`` lists to a client logging in
    with ``security`` (the environment's when ``None``); 0 when nothing answers."""
    try:
        with _quiet_client():
            count = _count_brokers(bootstrap, timeout, security or KafkaSecurity())
            return _run_blocking(count)
    except (KafkaError, OSError, TimeoutError):
        return 0


def brokers_answering(
    bootstrap: str, *, timeout: float = 5.0, security: KafkaSecurity | None = None
) -> bool:
    """True when a broker at ``bootstrap`` returns metadata naming at least one broker to a
    client logging in with ``security`` (the environment's when ``None``)."""
    return broker_count(bootstrap, timeout=timeout, security=security) > 0
