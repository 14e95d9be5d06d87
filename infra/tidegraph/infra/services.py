"""`up`, `down` and `status` for the development services, as a Python API.

Rules the command line and the test fixtures rely on:

- ``up`` is idempotent: a service this state folder already runs (recorded pid, alive, our
  command line, port answering) is reused, never started twice.
- ``down`` stops only what ``up`` started from the same state folder; it never signals a
  process whose command line is not ours, nor touches an external service.
- An external service (``TIDEGRAPH_KAFKA_BOOTSTRAP`` / ``TIDEGRAPH_PG_DSN`` set) is only
  checked, never started. A value equal to what our own ``<state>/env`` file wrote does not
  count as external: that file merely points back at the local services.
- ``up`` is all or nothing: if a service fails to start, the ones this call started are
  stopped again before the error propagates.
- Everything is checked before anything starts: java, mvn (only while the jars are not
  cached), the embedded binaries, and every port.
"""

# Long on purpose: `up`, `down` and `status` share the state file, the ports and the env file they
# write.
from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidegraph.infra import (
    _proc,
    local_kafka,
    local_kafka_cluster,
    local_kafka_plan,
    local_pg,
    local_pg_servers,
    local_pg_standbys,
    local_pg_topology,
)
from tidegraph.infra.errors import (
    InfraError,
    ServiceUnreachableError,
    StateDirError,
)
from tidegraph.schemas import (
    ENV_FILE,
    MAIN,
    Settings,
    load_settings,
    local_bootstrap,
    local_state,
    read_env_file,
)
from tidegraph.schemas import find_state_dir as find_state_dir

KAFKA = "kafka"
POSTGRES = "postgres"
SERVICES: tuple[str, ...] = (KAFKA, POSTGRES)
ENV_KEYS = {KAFKA: "TIDEGRAPH_KAFKA_BOOTSTRAP", POSTGRES: "TIDEGRAPH_PG_DSN"}
KAFKA_PASSWORD_KEY = "TIDEGRAPH_LOCAL_KAFKA_PASSWORD"  # noqa: S105 - a variable's name
"""The local broker's SCRAM password, kept for as long as its log dirs exist."""
REPLICATION_DSN_KEY = "TIDEGRAPH_PG_REPLICATION_DSN"
"""The PostgreSQL connector's DSN on the local server (its own role)."""
PG_SERVERS_KEY = "TIDEGRAPH_PG_SERVERS"
"""Where `up --pg-servers` names its extra servers (:mod:`tidegraph.schemas.servers`)."""
PG_STANDBYS_KEY = "TIDEGRAPH_PG_STANDBYS"
"""Where `up --replicas` names each server's standbys (:mod:`tidegraph.schemas.servers`)."""
CLIENT_PROPERTIES = "client.properties"
"""Kafka's own client configuration for the local broker, beside the env file."""
UP_WROTE_KEY = "TIDEGRAPH_UP_WROTE"
"""Which addresses of the env file `up` wrote (a digest of each), so that a shell that
loaded the file still tells them from addresses given by hand once the file has changed."""

Origin = Literal["local", "external"]
Progress = Callable[[str], None]


class LocalSettings(BaseSettings):
    """What only `up` needs (``TIDEGRAPH_KAFKA_CONTROLLER_PORT``, ``_START_TIMEOUT``,
    ``_KAFKA_BROKERS``).

    The service ports themselves (``TIDEGRAPH_KAFKA_PORT``, ``TIDEGRAPH_PG_PORT``) are in
    :class:`~tidegraph.schemas.settings.Settings`, because every command's default address
    is derived from them.
    """

    model_config = SettingsConfigDict(env_prefix="TIDEGRAPH_", extra="ignore")

    kafka_controller_port: int | None = Field(
        None, ge=1, le=65535, description="KRaft controller port (default: Kafka port + nodes)."
    )
    start_timeout: float = Field(90.0, gt=0, description="Seconds to wait for each service.")
    kafka_brokers: int | None = Field(
        None, description="Kafka nodes: 1 or 3 (default: as many as run, else 1)."
    )


@dataclass(frozen=True)
class BrokerState:
    """One node of a local Kafka cluster."""

    node_id: int
    """The node's id (1, 2, 3)."""
    address: str
    """Its client listener, ``127.0.0.1:port``."""
    controller: str
    """Its controller listener, ``127.0.0.1:port``."""
    pid: int | None
    """Process id while it runs."""
    running: bool
    """Answering right now."""


@dataclass(frozen=True)
class ServiceState:
    """One service as `up`/`status` see it."""

    name: str
    """``kafka`` or ``postgres``."""
    origin: Origin
    """``local`` (run from the state folder) or ``external`` (given by the environment)."""
    running: bool
    """Answering right now."""
    address: str
    """Bootstrap servers or DSN; may hold a password for an external DSN (see ``shown``)."""
    pid: int | None = None
    """Process id when local and running."""
    started: bool = False
    """True when this very `up` call started it."""
    detail: str = ""
    """Version or the reason it is not running."""
    replication_address: str = field(default="", repr=False)
    """The local server's DSN for the PostgreSQL connector's role (holds its password)."""
    brokers: tuple[BrokerState, ...] = ()
    """The nodes, when the local Kafka is a cluster (`up --brokers 3`)."""

    @property
    def shown(self) -> str:
        """The address with any password masked."""
        return local_pg.redact(self.address) if self.name == POSTGRES else self.address


@dataclass(frozen=True)
class ServiceStatus:
    """Both services and where their addresses were written."""

    state_dir: Path
    """The state folder (absolute)."""
    kafka: ServiceState
    """The broker."""
    postgres: ServiceState
    """The database server."""
    env_file: Path | None = field(default=None)
    """``<state>/env`` when it exists."""

    @property
    def services(self) -> tuple[ServiceState, ServiceState]:
        return (self.kafka, self.postgres)

    @property
    def ok(self) -> bool:
        return all(s.running for s in self.services)

    @property
    def kafka_bootstrap(self) -> str:
        return self.kafka.address

    @property
    def pg_dsn(self) -> str:
        return self.postgres.address


# --- state folder and env file ----------------------------------------------------------------


def state_path(state_dir: str | os.PathLike[str] | None, settings: Settings | None = None) -> Path:
    """The state folder as an absolute path: ``--state-dir``, ``TIDEGRAPH_STATE_DIR``, else
    :func:`find_state_dir` (:mod:`tidegraph.schemas.local_state`)."""
    chosen = state_dir if state_dir is not None else (settings or load_settings()).state_dir
    return local_state.state_path(chosen)


def _write_env_file(
    state_dir: Path, states: Collection[ServiceState], secrets: Mapping[str, str]
) -> Path | None:
    """Rewrite ``<state>/env`` (mode 0600 from its first byte): the addresses of what runs,
    the connector's DSN when the local server runs, and ``secrets`` (the local server's
    passwords, kept for as long as its data directory exists: they exist nowhere else)."""
    path = state_dir / ENV_FILE
    values = {ENV_KEYS[s.name]: s.address for s in states if s.running or s.origin == "external"}
    for s in states:
        if s.name == POSTGRES and s.origin == "local" and s.running and s.replication_address:
            values[REPLICATION_DSN_KEY] = s.replication_address
        if (
            s.name == KAFKA
            and s.origin == "local"
            and s.running
            and secrets.get(KAFKA_PASSWORD_KEY)
        ):
            values.update(local_kafka.local_security(secrets[KAFKA_PASSWORD_KEY]).env())
    pg = next((s for s in states if s.name == POSTGRES), None)
    if pg is not None and pg.origin == "local" and pg.running:
        credentials = local_pg.PgCredentials.from_env(secrets)
        extra = local_pg_servers.running(state_dir, credentials)
        if extra:
            values[PG_SERVERS_KEY] = local_pg_servers.servers_entry(extra)
        standbys = local_pg_standbys.running(state_dir, credentials)
        if standbys:
            values[PG_STANDBYS_KEY] = local_pg_standbys.standbys_entry(standbys)
    values.update(secrets)
    _write_client_properties(state_dir, states, secrets)
    if not values:
        path.unlink(missing_ok=True)
        return None
    addresses = {ENV_KEYS[s.name]: s.address for s in states if s.origin == "local" and s.running}
    if addresses:
        values[UP_WROTE_KEY] = _wrote(addresses)
    header = "# Written by `tidegraph up`; load into a shell with: . " + shlex.quote(str(path))
    lines = [header] + [f"export {key}={shlex.quote(value)}" for key, value in values.items()]
    _write_private(path, lines)
    return path


def _write_client_properties(
    state_dir: Path, states: Collection[ServiceState], secrets: Mapping[str, str]
) -> None:
    """``<state>/client.properties`` (0600) while the local broker runs: its address and
    login as Kafka's own tools and Java clients take them; removed when it does not run."""
    path = state_dir / CLIENT_PROPERTIES
    kafka = next((s for s in states if s.name == KAFKA), None)
    password = secrets.get(KAFKA_PASSWORD_KEY)
    if kafka is None or kafka.origin != "local" or not kafka.running or not password:
        path.unlink(missing_ok=True)
        return
    security = local_kafka.local_security(password)
    header = [
        "# Written by `tidegraph up`: the local broker for Kafka's own tools and Java clients,",
        f"#   kafka-console-consumer.sh --bootstrap-server {kafka.address} \\",
        f"#     --consumer.config {path} --topic tidegraph.changes --from-beginning",
    ]
    _write_private(path, header + security.java_properties(kafka.address))


def _write_private(path: Path, lines: list[str]) -> None:
    """Replace ``path`` with ``lines``, mode 0600 from its first byte."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    os.replace(partial, path)


def _local_secrets(state: Path, written: Mapping[str, str]) -> dict[str, str]:
    """The local services' passwords to keep in the env file: while their data exists."""
    kept: dict[str, str] = {}
    credentials = local_pg.PgCredentials.from_env(written)
    if credentials is not None and local_pg_topology.primary_layout(state, MAIN).data.exists():
        kept.update(credentials.env())
    password = written.get(KAFKA_PASSWORD_KEY)
    single = local_kafka.KafkaLayout.under(state).data.exists()
    if password and (single or local_kafka_cluster.ClusterLayout.under(state).has_data):
        kept[KAFKA_PASSWORD_KEY] = password
    return kept


def _close_state_dir(state: Path) -> None:
    """Owner only (0700); the others' search bit stays where the server account needs it
    to reach its own folder (it lists and reads nothing)."""
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(state.stat().st_mode & 0o001 | 0o700)


def _digest(key: str, value: str) -> str:
    return key + "=" + hashlib.sha256(value.encode()).hexdigest()[:16]


def _wrote(addresses: Mapping[str, str]) -> str:
    """The marker naming ``addresses`` (variable → value) as `up`'s own."""
    return " ".join(_digest(key, value) for key, value in sorted(addresses.items()))


def _external(settings: Settings, service: str, written: dict[str, str]) -> str | None:
    """The external address for ``service`` when the environment names one.

    An address `up` wrote is not external, whether it still stands in the env file or came
    through a shell that loaded an earlier one (the marker travels with it): values that
    `up` wrote never change what `up` does."""
    fieldname = "kafka_bootstrap" if service == KAFKA else "pg_dsn"
    if fieldname not in settings.model_fields_set:
        return None
    value = settings.kafka_bootstrap if service == KAFKA else settings.pg_dsn.get_secret_value()
    key = ENV_KEYS[service]
    if written.get(key) == value:
        return None
    if _digest(key, value) in os.environ.get(UP_WROTE_KEY, "").split():
        return None
    return value


# --- status -------------------------------------------------------------------------------------


def _kafka_state(state: Path, external: str | None) -> ServiceState:
    if external is not None:
        up_ = local_kafka.brokers_answering(external, timeout=3.0)
        return ServiceState(KAFKA, "external", up_, external, detail="" if up_ else "no answer")
    cluster = local_kafka_cluster.ClusterLayout.under(state)
    if cluster.recorded:
        return _cluster_state(cluster)
    layout = local_kafka.KafkaLayout.under(state)
    process = local_kafka.running(layout)
    if process is None:
        record = local_kafka.read_record(layout)
        where = record.bootstrap if record else ""
        return ServiceState(KAFKA, "local", False, where, detail="not running")
    answering = _proc.port_answers(process.port)
    return ServiceState(
        KAFKA,
        "local",
        answering,
        process.bootstrap,
        pid=process.pid,
        detail=f"Kafka {process.version}" if answering else "process up, port not answering",
    )


def _cluster_state(layout: local_kafka_cluster.ClusterLayout) -> ServiceState:
    """The cluster runs while a majority of its nodes answer; each node is listed."""
    cluster = local_kafka_cluster.view(layout)
    if cluster is None:
        return ServiceState(KAFKA, "local", False, "", detail="not running")
    nodes = tuple(
        BrokerState(
            node_id=n.node_id,
            address=local_bootstrap(n.ports.client),
            controller=local_bootstrap(n.ports.controller),
            pid=n.process.pid if n.process else None,
            running=n.process is not None and _proc.port_answers(n.ports.client),
        )
        for n in cluster.nodes
    )
    up_ = [n for n in nodes if n.running]
    down_ = [str(n.node_id) for n in nodes if not n.running]
    detail = f"Kafka {cluster.version}, {len(up_)} of {len(nodes)} brokers" if up_ else ""
    if down_:
        detail += f"{'; ' if detail else ''}node {', '.join(down_)} down"
    return ServiceState(
        KAFKA,
        "local",
        len(up_) > len(nodes) // 2,
        cluster.bootstrap,
        detail=detail,
        brokers=nodes,
    )


def _pg_state(state: Path, external: str | None, written: Mapping[str, str]) -> ServiceState:
    if external is not None:
        up_ = local_pg.answers(external)
        return ServiceState(POSTGRES, "external", up_, external, detail="" if up_ else "no answer")
    layout = local_pg_topology.primary_layout(state, MAIN)
    credentials = local_pg.PgCredentials.from_env(written)
    process = local_pg.running(layout)
    if process is None:
        record = local_pg.read_record(layout)
        where = replace(record, credentials=credentials).dsn if record else ""
        return ServiceState(POSTGRES, "local", False, where, detail="not running")
    process = replace(process, credentials=credentials)
    answering = _proc.port_answers(process.port)
    return ServiceState(
        POSTGRES,
        "local",
        answering,
        process.dsn,
        pid=process.pid,
        detail="PostgreSQL (embedded)" if answering else "process up, port not answering",
        replication_address=process.replication_dsn,
    )


def status(state_dir: str | os.PathLike[str] | None = None) -> ServiceStatus:
    """What runs for this state folder, and whether external services answer."""
    settings = load_settings()
    state = state_path(state_dir, settings)
    written = read_env_file(state)
    env_file = state / ENV_FILE
    return ServiceStatus(
        state_dir=state,
        kafka=_kafka_state(state, _external(settings, KAFKA, written)),
        postgres=_pg_state(state, _external(settings, POSTGRES, written), written),
        env_file=env_file if env_file.is_file() else None,
    )


_NAMES = {KAFKA: "Kafka", POSTGRES: "PostgreSQL"}


def unavailable(status: ServiceStatus) -> str | None:
    """One line naming what does not answer and ending with what to do; None when all do."""
    down = [s for s in status.services if not s.running]
    if not down:
        return None
    local = [_NAMES[s.name] for s in down if s.origin == "local"]
    external = [s for s in down if s.origin == "external"]
    what: list[str] = []
    todo: list[str] = []
    if local:
        verb = "is" if len(local) == 1 else "are"
        what.append(f"{' and '.join(local)} {verb} not running (state folder {status.state_dir})")
        todo.append("run `tidegraph up`")
    for s in external:
        what.append(f"{_NAMES[s.name]} at {s.shown} does not answer")
        todo.append(f"start it or correct {ENV_KEYS[s.name]}")
    return f"{'; '.join(what)} — {' and '.join(todo)}"


# --- up -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ports:
    kafka: int
    controller: int
    pg: int
    kafka_explicit: bool
    pg_explicit: bool


def _ports(
    settings: Settings,
    kafka_port: int | None,
    controller_port: int | None,
    pg_port: int | None,
    brokers: int = 1,
) -> _Ports:
    local = LocalSettings()
    kafka = kafka_port or settings.kafka_port
    controller = controller_port or local.kafka_controller_port or kafka + brokers
    return _Ports(
        kafka=kafka,
        controller=controller,
        pg=pg_port or settings.pg_port,
        kafka_explicit=kafka_port is not None or "kafka_port" in settings.model_fields_set,
        pg_explicit=pg_port is not None or "pg_port" in settings.model_fields_set,
    )


def _silent(_: str) -> None:
    return None


# Long on purpose: the start sequence (state, ports, each service, env file) reads top to bottom in
# the order it runs.
def up(
    state_dir: str | os.PathLike[str] | None = None,
    *,
    kafka_port: int | None = None,
    kafka_controller_port: int | None = None,
    pg_port: int | None = None,
    services: Collection[str] = SERVICES,
    timeout: float | None = None,
    progress: Progress = _silent,
    kafka_advertised_port: int | None = None,
    pg_servers: int = 1,
    kafka_brokers: int | None = None,
    replicas: int = 0,
) -> ServiceStatus:
    """Start (or reuse, or check) the services and write ``<state>/env``.

    ``kafka_advertised_port``: the port a started broker tells clients to use after
    bootstrap (default: its own), for a proxy standing in front of it. ``kafka_brokers``:
    1 or 3 nodes (:mod:`~tidegraph.infra.local_kafka_plan`); node ``i`` of a cluster listens
    on ``kafka_port + i - 1``, its controller on ``kafka_controller_port + i - 1``.
    ``pg_servers``: local PostgreSQL servers to run, ``main`` and ``pg2`` …
    (:mod:`local_pg_servers`); ``replicas``: streaming standbys of each of them to run
    (:mod:`local_pg_standbys`; those already made are started again whatever the number)."""
    if pg_servers < 1:
        raise StateDirError(f"--pg-servers {pg_servers}: at least one server (main)")
    if replicas < 0:
        raise StateDirError(f"--replicas {replicas}: zero or more standbys per server")
    unknown = set(services) - set(SERVICES)
    if unknown:
        raise StateDirError(f"unknown service(s) {sorted(unknown)}; choose from {SERVICES}")
    settings = load_settings()
    state = state_path(state_dir, settings)
    written = read_env_file(state)
    wait = timeout or LocalSettings().start_timeout
    ext_kafka = _external(settings, KAFKA, written)
    ext_pg = _external(settings, POSTGRES, written)
    local_kafka_asked = KAFKA in services and ext_kafka is None
    asked = kafka_brokers or LocalSettings().kafka_brokers
    brokers = local_kafka_plan.brokers(state, asked) if local_kafka_asked else 1
    ports = _ports(settings, kafka_port, kafka_controller_port, pg_port, brokers)
    kafka_start = local_kafka_plan.KafkaStart(
        state, brokers, ports.kafka, ports.controller, ports.kafka_explicit, kafka_advertised_port
    )
    pg_layout = local_pg_topology.primary_layout(state, MAIN)

    # 1. Decide, and check everything, before anything starts.
    start_kafka = local_kafka_asked and kafka_start.needed()
    start_pg = POSTGRES in services and ext_pg is None
    if start_pg and (running_pg := local_pg.running(pg_layout)) is not None:
        if ports.pg_explicit and running_pg.port != ports.pg:
            raise StateDirError(
                f"PostgreSQL from {state} already runs on port {running_pg.port}, not "
                f"{ports.pg}: run `tidegraph down` first"
            )
        start_pg = False
    if start_kafka:
        local_kafka.check_prerequisites()
        kafka_start.check_ports()
    if start_pg:
        local_pg.check_prerequisites()
        _proc.ensure_port_free("PostgreSQL", ports.pg)
    if KAFKA in services and ext_kafka is not None:
        progress(f"kafka: checking external broker {ext_kafka}")
        if not local_kafka.brokers_answering(ext_kafka, timeout=min(wait, 10.0)):
            raise ServiceUnreachableError(
                "Kafka",
                ext_kafka,
                "no metadata answer",
                hint="start it, or correct TIDEGRAPH_KAFKA_BOOTSTRAP "
                "(unset it to use `tidegraph up`'s)",
            )
    if POSTGRES in services and ext_pg is not None:
        progress(f"postgres: checking external server {local_pg.redact(ext_pg)}")
        local_pg.ensure_vector(ext_pg)

    # 2. Start: the broker's JVM boots while PostgreSQL starts. The state folder is closed
    # first, and new passwords are in the env file before the server is given them.
    _close_state_dir(state)
    credentials = local_pg.PgCredentials.from_env(written)
    if start_pg and credentials is None:
        credentials = local_pg.PgCredentials.generate()
        written = {**written, **credentials.env()}
        _write_env_file(state, [], written)
    if start_kafka and not written.get(KAFKA_PASSWORD_KEY):
        written = {**written, KAFKA_PASSWORD_KEY: local_kafka.new_password()}
        _write_env_file(state, [], written)
    started: list[str] = []
    try:
        if start_kafka:
            cache = local_kafka.cache_root()
            if not local_kafka.jars_cached(cache):
                progress(f"kafka: fetching the broker jars with Maven into {cache}")
            runtime = local_kafka.prepare(cache)
            kafka_start.launch(runtime, written[KAFKA_PASSWORD_KEY], progress)
            started.append(KAFKA)
        if start_pg:
            progress(f"postgres: starting on 127.0.0.1:{ports.pg}")
            pg_process = local_pg.launch(pg_layout, port=ports.pg, credentials=credentials)
            started.append(POSTGRES)
            local_pg.wait_ready(pg_layout, pg_process, timeout=wait)
            local_pg.ensure_vector(pg_process.dsn)
        if POSTGRES in services and ext_pg is None and pg_servers > 1:
            main = local_pg.running(pg_layout)
            if main is None:
                raise StateDirError(f"PostgreSQL from {state} does not run: `tidegraph up` again")
            local_pg_servers.start(state, pg_servers, main.port, credentials, wait, progress)
        if POSTGRES in services and ext_pg is None and credentials is not None:
            local_pg_standbys.start(state, replicas, credentials, wait, progress)
        if start_kafka:
            progress("kafka: waiting for Kafka to answer")
            kafka_start.wait_ready(wait)
    except (InfraError, OSError) as exc:
        if KAFKA in started:
            kafka_start.undo()
        _stop(state, [s for s in started if s != KAFKA])
        if isinstance(exc, OSError):
            raise StateDirError(f"could not start services under {state}: {exc}") from exc
        raise

    # 3. Report, and point other commands at what runs.
    kafka = _kafka_state(state, ext_kafka)
    pg = _pg_state(state, ext_pg, written)
    kafka = _mark_started(kafka, KAFKA in started)
    pg = _mark_started(pg, POSTGRES in started)
    env_file = _write_env_file(state, [kafka, pg], _local_secrets(state, written))
    return ServiceStatus(state_dir=state, kafka=kafka, postgres=pg, env_file=env_file)


def _mark_started(state: ServiceState, started: bool) -> ServiceState:
    if not started:
        return state
    return replace(state, started=True)


# --- down ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stopped:
    """A service `down` stopped."""

    name: str
    """``kafka`` or ``postgres``."""
    pid: int
    """The process id it had."""


def _stop(state: Path, services: Collection[str]) -> list[Stopped]:
    stopped: list[Stopped] = []
    if POSTGRES in services:
        for label, standby in local_pg_standbys.stop_all(state):
            stopped.append(Stopped(f"{POSTGRES} {label}", standby))
        for name, extra in local_pg_servers.stop_all(state):
            stopped.append(Stopped(f"{POSTGRES} {name}", extra))
        pid = local_pg.stop(local_pg_topology.primary_layout(state, MAIN))
        if pid is not None:
            stopped.append(Stopped(POSTGRES, pid))
    if KAFKA in services:
        pid = local_kafka.stop(local_kafka.KafkaLayout.under(state))
        if pid is not None:
            stopped.append(Stopped(KAFKA, pid))
        cluster = local_kafka_cluster.ClusterLayout.under(state)
        stopped += [Stopped(KAFKA, pid) for pid in local_kafka_cluster.stop(cluster)]
    return stopped


def down(
    state_dir: str | os.PathLike[str] | None = None, *, services: Collection[str] = SERVICES
) -> tuple[Stopped, ...]:
    """Stop what `up` started from this state folder; external services are left alone."""
    settings = load_settings()
    state = state_path(state_dir, settings)
    stopped = _stop(state, services)
    refresh_env_file(state)
    return tuple(stopped)


def refresh_env_file(state_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Rewrite ``<state>/env`` from what runs now (after `down`, or a promotion that moved
    a server's primary); its path, unless nothing was left to write."""
    state = state_path(state_dir)
    after = status(state)
    return _write_env_file(state, after.services, _local_secrets(state, read_env_file(state)))


def given_or_up() -> tuple[str, str]:
    """``(kafka bootstrap, PostgreSQL DSN)``: those ``TIDEGRAPH_KAFKA_BOOTSTRAP`` and
    ``TIDEGRAPH_PG_DSN`` name, else the local ones `up` runs (started if needed), with what
    its env file says — the broker's login included — put into this process's environment
    where nothing else set it, as every command gets it. For scripts such as benchmarks."""
    bootstrap = os.environ.get("TIDEGRAPH_KAFKA_BOOTSTRAP")
    dsn = os.environ.get("TIDEGRAPH_PG_DSN")
    if bootstrap and dsn:
        return bootstrap, dsn
    status = up()
    for key, value in read_env_file(status.state_dir).items():
        os.environ.setdefault(key, value)
    return status.kafka_bootstrap, status.pg_dsn
