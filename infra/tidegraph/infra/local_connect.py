"""A local Kafka Connect worker (distributed mode, one node) with Debezium and FileStreamSink.

Why this shape: the same as the broker's (``local_kafka``) — the jars come from Maven Central
once, into the cache folder (``connect-<version>/worker/libs`` for the worker, one folder per
plugin under ``connect-<version>/plugins``, the worker's ``plugin.path``, so each plugin
loads in its own class loader). Distributed mode keeps connector configurations and source
offsets in Kafka topics, so connectors survive a restart of the worker, and its REST API
adds them.

Closed like the broker: the worker and every client it makes for connectors (producers,
consumers, admin) log in to the local broker with SASL/SCRAM, the REST API listens on
loopback only, and secrets never travel in a connector's configuration: they live in
``secrets.properties`` (0600) and connectors name them as ``${file:<path>:<key>}``, which
Kafka's ``FileConfigProvider`` resolves inside the worker (the REST API shows the
reference, never the value).

Files under ``<state>/connect/``: ``worker.properties`` and ``secrets.properties`` (0600),
``log4j2.properties``, ``connect.log`` and ``connect.json`` (pid, REST port).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tidegraph.infra import _proc, local_kafka, maven
from tidegraph.infra.errors import ServiceStartError
from tidegraph.infra.package_files import connect_file
from tidegraph.schemas import KafkaSecurity

CONNECT_VERSION = "4.4.0"
"""The worker's Kafka release: the broker's (``tidegraph/infra/kafka/pom.xml``)."""
PLUGINS = ("connect-file", "debezium-postgres", "debezium-mysql")
"""Plugin folders, each with its pom under ``tidegraph/infra/connect/plugins/``."""
DEFAULT_REST_PORT = 8083
JVM_FLAGS = ("-Xms128m", "-Xmx768m", "-XX:+UseG1GC", "-Djava.awt.headless=true")
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"


@dataclass(frozen=True)
class ConnectRuntime:
    """A JDK, the worker's jars and the plugin folder, ready to launch."""

    java: str
    libs: Path
    """The worker's class path folder."""
    plugins: Path
    """The worker's ``plugin.path``: one sub-folder per plugin."""


def _home(cache: Path) -> Path:
    return cache / f"connect-{CONNECT_VERSION}"


def _jar_sets(cache: Path) -> list[tuple[Path, Path, str]]:
    """(pom, libs folder, a jar that must be there) for the worker and each plugin."""
    home = _home(cache)
    sets = [(connect_file("worker", "pom.xml"), home / "worker" / "libs", "connect-runtime-*")]
    for name in PLUGINS:
        expect = "connect-file-*" if name == "connect-file" else "debezium-connector-*"
        sets.append(
            (connect_file("plugins", name, "pom.xml"), home / "plugins" / name / "libs", expect)
        )
    return sets


def jars_cached(cache: Path) -> bool:
    """True when the worker and every plugin are fetched for the poms shipped now."""
    return all(maven.fetched(pom, libs) for pom, libs, _ in _jar_sets(cache))


def prepare(cache: Path | None = None) -> ConnectRuntime:
    """Check java (and mvn when something is missing), fetch what is missing."""
    java = local_kafka.find_java()
    cache = cache or local_kafka.cache_root()
    sets = _jar_sets(cache)
    missing = [s for s in sets if not maven.fetched(s[0], s[1])]
    if missing:
        mvn = local_kafka.find_mvn()
        for pom, libs, expect in missing:
            maven.fetch(
                pom, libs, mvn=mvn, expect=expect, what=f"Kafka Connect ({pom.parent.name})"
            )
    return ConnectRuntime(java=java, libs=sets[0][1], plugins=_home(cache) / "plugins")


@dataclass(frozen=True)
class ConnectLayout:
    """The worker's files under one state folder."""

    root: Path

    @classmethod
    def under(cls, state_dir: Path) -> ConnectLayout:
        return cls(state_dir.resolve() / "connect")

    @property
    def config(self) -> Path:
        return self.root / "worker.properties"

    @property
    def secrets(self) -> Path:
        return self.root / "secrets.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def log(self) -> Path:
        return self.root / "connect.log"

    @property
    def record(self) -> Path:
        return self.root / "connect.json"

    def secret(self, key: str) -> str:
        """How a connector configuration names a secret of ``secrets.properties``."""
        return "${file:" + str(self.secrets) + ":" + key + "}"


@dataclass(frozen=True)
class WorkerSettings:
    """What makes one worker (and its cluster) distinct from another on the same broker."""

    bootstrap: str
    security: KafkaSecurity
    rest_port: int = DEFAULT_REST_PORT
    group: str = "tidegraph-connect"
    """The Connect cluster's group id; its three internal topics are named after it."""

    @property
    def url(self) -> str:
        return f"http://{_proc.LOOPBACK}:{self.rest_port}"


def _jaas(security: KafkaSecurity) -> str:
    module = (
        "org.apache.kafka.common.security.plain.PlainLoginModule"
        if security.sasl_mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule"
    )
    password = security.sasl_password.get_secret_value() if security.sasl_password else ""
    return f'{module} required username="{security.sasl_username}" password="{password}";'


def client_login(security: KafkaSecurity) -> dict[str, str]:
    """Java client settings for ``security``: what the worker, and a connector's own Kafka
    clients (the MySQL connector's schema history), need to log in."""
    settings: dict[str, str] = {"security.protocol": security.security_protocol}
    if security.security_protocol.startswith("SASL_"):
        settings["sasl.mechanism"] = security.sasl_mechanism
        settings["sasl.jaas.config"] = _jaas(security)
    if security.ssl_cafile:
        settings["ssl.truststore.type"] = "PEM"
        settings["ssl.truststore.location"] = security.ssl_cafile
    return settings


def worker_properties(
    layout: ConnectLayout, runtime: ConnectRuntime, worker: WorkerSettings
) -> str:
    """The worker's configuration: one distributed node, JSON with schemas by default."""
    login = client_login(worker.security)
    settings: dict[str, str] = {
        "bootstrap.servers": worker.bootstrap,
        "group.id": worker.group,
        "config.storage.topic": f"{worker.group}.configs",
        "offset.storage.topic": f"{worker.group}.offsets",
        "status.storage.topic": f"{worker.group}.status",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        "status.storage.partitions": "1",
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "offset.flush.interval.ms": "1000",
        "listeners": f"http://{_proc.LOOPBACK}:{worker.rest_port}",
        "rest.advertised.host.name": _proc.LOOPBACK,
        "plugin.path": str(runtime.plugins),
        "config.providers": "file",
        "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
        "config.providers.file.param.allowed.paths": str(layout.root),
        **login,
    }
    for prefix in ("producer.", "consumer.", "admin."):
        settings.update({prefix + k: v for k, v in login.items()})
    lines = ["# Written by tidegraph at every start of the worker; edits are overwritten."]
    lines += [f"{key}={_escape(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    """A Java properties value: backslashes doubled (the JAAS line has none to keep)."""
    return value.replace("\\", "\\\\")


LOG4J2 = """\
# Connect worker log to stdout, which tidegraph appends to connect.log.
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = OUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
logger.reflections.name = org.reflections
logger.reflections.level = error
"""


@dataclass(frozen=True)
class ConnectProcess:
    """What was recorded about a worker we launched."""

    pid: int
    rest_port: int

    @property
    def url(self) -> str:
        return f"http://{_proc.LOOPBACK}:{self.rest_port}"


def read_secrets(layout: ConnectLayout) -> dict[str, str]:
    """The secrets written so far (none when the file is missing)."""
    try:
        lines = layout.secrets.read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return {key: value.replace("\\\\", "\\") for key, value in pairs}


def write_secrets(layout: ConnectLayout, secrets: Mapping[str, str]) -> None:
    """Add ``secrets`` to ``secrets.properties`` (0600), which the worker's
    ``FileConfigProvider`` reads whenever it resolves a connector's configuration."""
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.root.chmod(0o700)
    merged = {**read_secrets(layout), **secrets}
    layout.secrets.touch(mode=0o600)
    layout.secrets.chmod(0o600)
    text = "".join(f"{key}={_escape(value)}\n" for key, value in merged.items())
    layout.secrets.write_text(text)


def launch(
    layout: ConnectLayout,
    runtime: ConnectRuntime,
    worker: WorkerSettings,
    secrets: Mapping[str, str],
) -> ConnectProcess:
    """Write the configuration and secrets, start the JVM; returns before it answers."""
    write_secrets(layout, secrets)
    layout.config.touch(mode=0o600)
    layout.config.chmod(0o600)
    layout.config.write_text(worker_properties(layout, runtime, worker))
    layout.log4j.write_text(LOG4J2)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    with layout.log.open("a") as log:
        log.write(f"\n===== starting Kafka Connect {CONNECT_VERSION} at {stamp} =====\n")
    command = [
        runtime.java, *JVM_FLAGS, f"-Dlog4j2.configurationFile={layout.log4j}",
        "-cp", f"{runtime.libs}/*",
        "org.apache.kafka.connect.cli.ConnectDistributed", str(layout.config),
    ]  # fmt: skip
    pid = _proc.spawn_detached(command, log=layout.log, cwd=layout.root)
    process = ConnectProcess(pid=pid, rest_port=worker.rest_port)
    layout.record.write_text(json.dumps({"pid": pid, "rest_port": worker.rest_port}) + "\n")
    return process


def running(layout: ConnectLayout) -> ConnectProcess | None:
    """The recorded worker when its process is still ours and alive."""
    try:
        raw = json.loads(layout.record.read_text())
        process = ConnectProcess(pid=int(raw["pid"]), rest_port=int(raw["rest_port"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return process if _proc.is_ours(process.pid, str(layout.config)) else None


def wait_ready(layout: ConnectLayout, process: ConnectProcess, *, timeout: float) -> None:
    """Block until the REST API answers and the worker has joined its cluster, or raise."""
    deadline = time.monotonic() + timeout
    while True:
        if not _proc.is_alive(process.pid):
            raise ServiceStartError(
                "kafka connect", "exited during start-up", log_path=str(layout.log),
                log_tail=_proc.log_tail(layout.log),
            )  # fmt: skip
        try:
            # Listing connectors needs the worker to have read its config topic: a 200
            # here means it is a member of its cluster, not only listening.
            if httpx.get(f"{process.url}/connectors", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() >= deadline:
            raise ServiceStartError(
                "kafka connect", f"did not answer on {process.url} within {timeout:g}s",
                log_path=str(layout.log), log_tail=_proc.log_tail(layout.log),
            )  # fmt: skip
        time.sleep(0.5)


def stop(layout: ConnectLayout, *, timeout: float = 60.0) -> int | None:
    """Stop the worker started here; return its pid."""
    process = running(layout)
    layout.record.unlink(missing_ok=True)
    if process is None:
        return None
    _proc.terminate(process.pid, signal.SIGTERM, timeout=timeout)
    return process.pid


# --- connectors ---------------------------------------------------------------------------


class ConnectorError(ServiceStartError):
    """The worker refused a connector, or its task failed."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__("kafka connect", f"connector {name!r}: {reason}")
        self.name = name


def put_connector(url: str, name: str, config: Mapping[str, str]) -> None:
    """Create or update connector ``name`` (``PUT /connectors/<name>/config``)."""
    response = httpx.put(f"{url}/connectors/{name}/config", json=dict(config), timeout=60.0)
    if response.status_code not in (200, 201):
        raise ConnectorError(name, f"{response.status_code} {response.text[:2000]}")


def delete_connector(url: str, name: str) -> None:
    response = httpx.delete(f"{url}/connectors/{name}", timeout=60.0)
    if response.status_code not in (204, 404):
        raise ConnectorError(name, f"{response.status_code} {response.text[:2000]}")


def connector_state(url: str, name: str) -> dict[str, Any]:
    """``GET /connectors/<name>/status``: the connector's and its tasks' states."""
    response = httpx.get(f"{url}/connectors/{name}/status", timeout=10.0)
    if response.status_code != 200:
        return {}
    found: dict[str, Any] = response.json()
    return found


def wait_running(url: str, name: str, *, timeout: float = 120.0) -> None:
    """Until the connector and all its tasks run; raise with the trace when one failed."""
    deadline = time.monotonic() + timeout
    while True:
        state = connector_state(url, name)
        tasks = state.get("tasks", [])
        for task in tasks:
            if task.get("state") == "FAILED":
                raise ConnectorError(name, str(task.get("trace", "task failed"))[:4000])
        if state.get("connector", {}).get("state") == "RUNNING" and tasks:
            if all(t.get("state") == "RUNNING" for t in tasks):
                return
        if time.monotonic() >= deadline:
            raise ConnectorError(name, f"not running after {timeout:g}s: {state}")
        time.sleep(0.5)


def converters(*, schemas: bool) -> dict[str, str]:
    """JSON keys and values, with or without embedded schemas."""
    flag = "true" if schemas else "false"
    return {
        "key.converter": JSON_CONVERTER,
        "key.converter.schemas.enable": flag,
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": flag,
    }
