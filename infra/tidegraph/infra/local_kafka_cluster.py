"""A three-node Apache Kafka cluster in KRaft mode on loopback: `tidegraph up --brokers 3`.

Why combined nodes: every node is a broker and a controller, and the three controllers are
the voters of the metadata quorum. It is the usual choice for a small cluster: three JVMs
rather than six, and the quorum survives the loss of one node exactly as the partitions do
(two of three). A larger production cluster runs its controllers apart.

Each node is the single broker's node (:mod:`tidegraph.infra.local_kafka`) with its own id,
ports and folder, closed the same way: SCRAM for clients and between brokers (one SCRAM user,
formatted into every node), PLAIN between the controllers with a password the three share,
made anew whenever the whole cluster starts. A node started again while the others run keeps
its configuration, so that its controller login still matches theirs. Topics default to
three copies, two in sync, and no unclean leader election
(:func:`tidegraph.schemas.topics.replication`).

Files under the state folder: ``kafka-cluster/ports.json`` (every node's ports, so the full
bootstrap list is known while a node is down) and ``kafka-cluster/node-<id>/``, each laid out
as :class:`~tidegraph.infra.local_kafka.KafkaLayout` (``server.properties``, ``data/``,
``broker.log``, ``kafka.json``). Node ``i`` listens for clients on ``port + i - 1`` and for
the controllers on ``controller_port + i - 1``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from tidegraph.infra import _proc, local_kafka
from tidegraph.infra.errors import ServiceStartError, StateDirError
from tidegraph.infra.local_kafka import KafkaLayout, KafkaProcess, KafkaRuntime
from tidegraph.schemas import KafkaSecurity, local_bootstrap

NODES = 3
"""Nodes of the local cluster: the smallest quorum that survives one loss."""
JVM_FLAGS = (
    "-Xms128m",
    "-Xmx384m",
    *(flag for flag in local_kafka.JVM_FLAGS if not flag.startswith(("-Xms", "-Xmx"))),
)
"""Three JVMs share a development machine: a small heap each."""


@dataclass(frozen=True)
class NodePorts:
    """Where one node listens, on 127.0.0.1."""

    client: int
    """SASL_PLAINTEXT listener of clients and of the other brokers."""
    controller: int
    """KRaft controller listener."""


def node_ports(port: int, controller_port: int, size: int = NODES) -> dict[int, NodePorts]:
    """Node ``i`` (from 1) on ``port + i - 1`` and ``controller_port + i - 1``."""
    return {i: NodePorts(port + i - 1, controller_port + i - 1) for i in range(1, size + 1)}


def bootstrap_of(ports: Mapping[int, NodePorts]) -> str:
    """Every node's client address, comma separated: a client reaches the cluster while
    any one of them answers."""
    return ",".join(local_bootstrap(ports[node].client) for node in sorted(ports))


@dataclass(frozen=True)
class ClusterLayout:
    """The cluster's files under one state folder."""

    root: Path
    """``<state>/kafka-cluster``, absolute."""
    size: int = NODES
    """How many nodes."""

    @classmethod
    def under(cls, state_dir: Path) -> ClusterLayout:
        return cls(state_dir.resolve() / "kafka-cluster")

    @property
    def node_ids(self) -> range:
        return range(1, self.size + 1)

    def node(self, node_id: int) -> KafkaLayout:
        """One node's folder, laid out as the single broker's."""
        return KafkaLayout(self.root / f"node-{node_id}")

    @property
    def ports_file(self) -> Path:
        return self.root / "ports.json"

    @property
    def recorded(self) -> bool:
        """True from a node's start until `down`, even if it died meanwhile."""
        return any(self.node(i).record.exists() for i in self.node_ids)

    @property
    def has_data(self) -> bool:
        """True while any node's log dirs exist (the SCRAM password must be kept)."""
        return any(self.node(i).data.exists() for i in self.node_ids)


@dataclass(frozen=True)
class NodeView:
    """One node as `status` shows it."""

    node_id: int
    ports: NodePorts
    process: KafkaProcess | None
    """The running JVM, or ``None`` when the node is down."""


@dataclass(frozen=True)
class ClusterView:
    """The cluster of a state folder as recorded and as it runs now."""

    nodes: tuple[NodeView, ...]
    version: str
    """Kafka release of the running nodes ("" when none runs)."""
    password: str = field(default="", repr=False, compare=False)
    """The SCRAM password of :data:`~tidegraph.infra.local_kafka.USER`, when known."""

    @property
    def ports(self) -> dict[int, NodePorts]:
        return {n.node_id: n.ports for n in self.nodes}

    @property
    def bootstrap(self) -> str:
        return bootstrap_of(self.ports)

    @property
    def security(self) -> KafkaSecurity:
        return local_kafka.local_security(self.password)

    @property
    def running(self) -> tuple[NodeView, ...]:
        return tuple(n for n in self.nodes if n.process is not None)


# --- what runs ----------------------------------------------------------------------------------


def recorded_ports(layout: ClusterLayout) -> dict[int, NodePorts]:
    """Every node's ports as the last fresh start wrote them (empty when never started)."""
    try:
        raw = json.loads(layout.ports_file.read_text())
        return {int(k): NodePorts(int(v["client"]), int(v["controller"])) for k, v in raw.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def running(layout: ClusterLayout) -> dict[int, KafkaProcess]:
    """The nodes whose recorded JVM is still ours and alive."""
    found = {i: local_kafka.running(layout.node(i)) for i in layout.node_ids}
    return {i: process for i, process in found.items() if process is not None}


def view(layout: ClusterLayout, password: str = "") -> ClusterView | None:
    """The cluster as recorded, each node with its process when it runs; ``None`` when no
    cluster was ever started from this state folder."""
    ports = recorded_ports(layout)
    if not ports:
        return None
    alive = running(layout)
    nodes = tuple(NodeView(i, ports[i], alive.get(i)) for i in sorted(ports))
    version = next((p.version for p in alive.values()), "")
    return ClusterView(nodes=nodes, version=version, password=password)


# --- start ----------------------------------------------------------------------------------------


def to_start(
    layout: ClusterLayout, wanted: Mapping[int, NodePorts], *, explicit: bool
) -> dict[int, NodePorts]:
    """The nodes `up` must start, with their ports; empty when all run.

    While any node runs the cluster keeps its recorded ports: a missing node rejoins where
    the others expect it, and ``explicit`` ports that differ are refused.
    """
    alive = running(layout)
    recorded = recorded_ports(layout)
    if alive and recorded:
        if explicit and dict(wanted) != recorded:
            first = recorded[min(recorded)].client
            raise StateDirError(
                f"the Kafka cluster from {layout.root.parent} already runs from port {first}: "
                "run `tidegraph down` first to move it"
            )
        chosen = {i: p for i, p in recorded.items() if i not in alive}
    else:
        chosen = dict(wanted)
    used = [port for p in chosen.values() for port in (p.client, p.controller)]
    if len(set(used)) != len(used):
        raise StateDirError(f"the Kafka cluster's nodes cannot share ports: {sorted(used)}")
    return chosen


def ensure_ports_free(start: Mapping[int, NodePorts]) -> None:
    """Raise :class:`~tidegraph.infra.errors.PortInUseError` for the first port taken."""
    for i, p in start.items():
        _proc.ensure_port_free(f"Kafka node {i}", p.client, option="--kafka-port")
        _proc.ensure_port_free(
            f"the controller of Kafka node {i}", p.controller, option="--kafka-controller-port"
        )


def launch(
    layout: ClusterLayout, runtime: KafkaRuntime, start: Mapping[int, NodePorts], password: str
) -> ClusterView:
    """Start the nodes ``start`` names (:func:`to_start`); returns before they answer.

    With no node running, every node is configured afresh (one new controller password for
    all) and formatted if new, with the cluster id its peers' data already carries.
    Otherwise the missing nodes start as they were configured.
    """
    if not running(layout):
        _configure(layout, runtime, start, password)
    for i, ports in start.items():
        node = layout.node(i)
        if not node.config.is_file():
            raise StateDirError(
                f"Kafka node {i} has no configuration in {node.root}: run `tidegraph down`, "
                "then `tidegraph up` with the same --brokers again"
            )
        local_kafka.spawn(
            node,
            runtime,
            port=ports.client,
            controller_port=ports.controller,
            password=password,
            jvm_flags=JVM_FLAGS,
        )
    found = view(layout, password)
    assert found is not None, "ports.json is written before any node starts"
    return found


def _configure(
    layout: ClusterLayout, runtime: KafkaRuntime, ports: Mapping[int, NodePorts], password: str
) -> None:
    """Write every node's configuration and the ports, then format the new log dirs."""
    if set(ports) != set(layout.node_ids):
        raise StateDirError(f"a fresh start configures every node {list(layout.node_ids)}")
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.root.chmod(0o700)
    layout.ports_file.write_text(
        json.dumps({i: {"client": p.client, "controller": p.controller} for i, p in ports.items()})
    )
    voters = {i: p.controller for i, p in ports.items()}
    controller_password = local_kafka.new_password()
    for i in layout.node_ids:
        node = layout.node(i)
        settings = local_kafka.node_settings(
            node, i, ports[i].client, voters, password, controller_password
        )
        local_kafka.write_config(node, local_kafka.render_properties(settings))
    cluster_id = _cluster_id(layout) or local_kafka.new_cluster_id()
    # Each format is a JVM of its own, seconds long: the three run side by side.
    with concurrent.futures.ThreadPoolExecutor(max_workers=layout.size) as pool:
        formats = [
            pool.submit(local_kafka.format_storage, runtime, layout.node(i), password, cluster_id)
            for i in layout.node_ids
        ]
        for done in formats:
            done.result()


def _cluster_id(layout: ClusterLayout) -> str | None:
    """The id a formatted node's ``meta.properties`` carries, if any node is formatted."""
    for i in layout.node_ids:
        with contextlib.suppress(OSError):
            for line in (layout.node(i).data / "meta.properties").read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "cluster.id" and value.strip():
                    return value.strip()
    return None


def wait_ready(layout: ClusterLayout, cluster: ClusterView, *, timeout: float) -> None:
    """Block until every node answers a metadata request itself, listing every node as a
    live broker, or raise. Asked of the whole bootstrap list, a node not yet serving could
    hide behind the others, and a node killed moments ago stays listed until the
    controller fences it; topics created too early would get fewer copies."""
    deadline = time.monotonic() + timeout
    waiting = {n.node_id: n for n in cluster.running}
    while True:
        for node in list(waiting.values()):
            assert node.process is not None
            if not _proc.is_alive(node.process.pid):
                _raise_start_error(layout, node.node_id, "exited during start-up")
            left = max(1.0, min(5.0, deadline - time.monotonic()))
            address = local_bootstrap(node.ports.client)
            count = local_kafka.broker_count(address, timeout=left, security=cluster.security)
            if count >= layout.size:
                del waiting[node.node_id]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            first = min(waiting)
            _raise_start_error(
                layout, first, f"did not list {layout.size} brokers within {timeout:g}s"
            )
        time.sleep(0.2)


def _raise_start_error(layout: ClusterLayout, node_id: int, what: str) -> NoReturn:
    log = layout.node(node_id).log
    raise ServiceStartError(
        "kafka", f"node {node_id} {what}", log_path=str(log), log_tail=_proc.log_tail(log)
    )


# --- stop ---------------------------------------------------------------------------------------


def stop(layout: ClusterLayout, *, timeout: float = 60.0) -> list[int]:
    """Stop every node; return the pids stopped."""
    return stop_nodes(layout, layout.node_ids, timeout=timeout)


def stop_nodes(
    layout: ClusterLayout, node_ids: Collection[int], *, timeout: float = 60.0
) -> list[int]:
    """Stop the nodes named; return the pids stopped.

    All are told at once, so each shuts down cleanly while the quorum still stands (one at
    a time, the last would wait for a quorum long gone), then each is waited for as the
    single broker is."""
    alive = {i: p for i, p in running(layout).items() if i in node_ids}
    for process in alive.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
    for i in node_ids:
        local_kafka.stop(layout.node(i), timeout=timeout)
    return [process.pid for process in alive.values()]
