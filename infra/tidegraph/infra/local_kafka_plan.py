"""What `up` does about the local Kafka of a state folder: the single broker or a cluster.

How many nodes: as asked (``--brokers``, ``TIDEGRAPH_KAFKA_BROKERS``), else as many as `up`
started here and `down` has not stopped, else one. Asking for another count than the one
running is refused: the single broker and the cluster keep separate data, and switching is
`down`, then `up --brokers N`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tidegraph.infra import _proc, local_kafka, local_kafka_cluster
from tidegraph.infra.errors import StateDirError
from tidegraph.infra.local_kafka_cluster import ClusterLayout, ClusterView, NodePorts

SUPPORTED = (1, local_kafka_cluster.NODES)
"""Node counts `up` runs: one broker, or the smallest cluster that survives a loss."""


def brokers(state: Path, asked: int | None) -> int:
    """The node count for ``state``: ``asked`` when given, else what runs there, else 1."""
    if asked is not None and asked not in SUPPORTED:
        raise StateDirError(
            f"--brokers {asked}: `tidegraph up` runs {' or '.join(map(str, SUPPORTED))} Kafka nodes"
        )
    if ClusterLayout.under(state).recorded:
        runs: int | None = local_kafka_cluster.NODES
    elif local_kafka.running(local_kafka.KafkaLayout.under(state)) is not None:
        runs = 1
    else:
        runs = None
    if asked is not None and runs is not None and asked != runs:
        raise StateDirError(
            f"Kafka from {state} runs {runs} node{'s' if runs > 1 else ''}, not {asked}: "
            f"run `tidegraph down` first, then `tidegraph up --brokers {asked}`"
        )
    return asked or runs or 1


@dataclass
class KafkaStart:
    """The local Kafka `up` checks, starts, waits for, or stops again on a failure."""

    state: Path
    """The state folder (absolute)."""
    brokers: int
    """1 or :data:`~tidegraph.infra.local_kafka_cluster.NODES` (:func:`brokers`)."""
    port: int
    """Client port of the broker, or of the cluster's first node."""
    controller_port: int
    """Controller port of the broker, or of the cluster's first node."""
    explicit: bool
    """True when the ports were asked for, so a broker running elsewhere is an error."""
    advertised_port: int | None = None
    """Single broker only: see :func:`~tidegraph.infra.local_kafka.server_properties`."""
    _nodes: dict[int, NodePorts] = field(default_factory=dict)
    _started: local_kafka.KafkaProcess | ClusterView | None = None

    @property
    def single(self) -> local_kafka.KafkaLayout:
        return local_kafka.KafkaLayout.under(self.state)

    @property
    def cluster(self) -> ClusterLayout:
        return ClusterLayout.under(self.state)

    def needed(self) -> bool:
        """Whether anything must start; False when everything already runs."""
        if self.brokers > 1:
            wanted = local_kafka_cluster.node_ports(self.port, self.controller_port, self.brokers)
            self._nodes = local_kafka_cluster.to_start(self.cluster, wanted, explicit=self.explicit)
            return bool(self._nodes)
        running = local_kafka.running(self.single)
        if running is not None:
            if self.explicit and running.port != self.port:
                raise StateDirError(
                    f"Kafka from {self.state} already runs on port {running.port}, not "
                    f"{self.port}: run `tidegraph down` first"
                )
            return False
        if self.port == self.controller_port:
            raise StateDirError(f"Kafka and its controller cannot share port {self.port}")
        return True

    def check_ports(self) -> None:
        """Every port :meth:`launch` will bind is free now."""
        if self.brokers > 1:
            local_kafka_cluster.ensure_ports_free(self._nodes)
            return
        _proc.ensure_port_free("Kafka", self.port)
        _proc.ensure_port_free("the Kafka controller", self.controller_port)

    def launch(
        self, runtime: local_kafka.KafkaRuntime, password: str, progress: Callable[[str], None]
    ) -> None:
        """Start what :meth:`needed` found missing; returns before it answers."""
        if self.brokers > 1:
            nodes = ", ".join(str(i) for i in sorted(self._nodes))
            first = self._nodes[min(self._nodes)].client
            progress(f"kafka: starting Kafka {runtime.version}, node {nodes}, from port {first}")
            self._started = local_kafka_cluster.launch(self.cluster, runtime, self._nodes, password)
            return
        progress(f"kafka: starting Kafka {runtime.version} on 127.0.0.1:{self.port}")
        self._started = local_kafka.launch(
            self.single,
            runtime,
            port=self.port,
            controller_port=self.controller_port,
            password=password,
            advertised_port=self.advertised_port,
        )

    def wait_ready(self, timeout: float) -> None:
        """Block until what :meth:`launch` started answers (every node, for a cluster)."""
        if isinstance(self._started, ClusterView):
            local_kafka_cluster.wait_ready(self.cluster, self._started, timeout=timeout)
        elif self._started is not None:
            local_kafka.wait_ready(self.single, self._started, timeout=timeout)

    def undo(self) -> None:
        """Stop what :meth:`launch` started, and only that."""
        if isinstance(self._started, ClusterView):
            local_kafka_cluster.stop_nodes(self.cluster, list(self._nodes))
        elif self._started is not None:
            local_kafka.stop(self.single)
