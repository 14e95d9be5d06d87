"""A three-node Kafka cluster of the project's own (`up --brokers 3`) for a test module.

Heavy (three JVMs): a module starts one with :func:`local_cluster` in a module-scoped
fixture and shares it among its tests; a test that kills a node restores it
(:meth:`LocalCluster.restore`) before it ends, so the next one starts from three. The
cluster has a state folder of its own, so killing its nodes never disturbs the session's
shared broker, and it listens below the kernel's ephemeral range, so no outgoing connection
takes one of its ports between the check and the bind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from tidegraph.infra import _proc, local_kafka_cluster, services
from tidegraph.schemas.kafka_security import ENV_KEYS, kafka_client_options

from local_services import REPO, free_port_run

NODES = local_kafka_cluster.NODES


@dataclass
class LocalCluster:
    """The cluster `up --brokers 3` runs from ``state``; node ``i`` on ``port + i - 1``."""

    state: Path
    port: int

    def up(self) -> services.ServiceStatus:
        """`up --brokers 3 --only kafka` on this cluster's ports (starts what is missing)."""
        return services.up(
            self.state,
            services=[services.KAFKA],
            kafka_brokers=NODES,
            kafka_port=self.port,
            kafka_controller_port=self.port + NODES,
            timeout=180,
        )

    @property
    def layout(self) -> local_kafka_cluster.ClusterLayout:
        return local_kafka_cluster.ClusterLayout.under(self.state)

    def env(self) -> dict[str, str]:
        """Address and login of the cluster, as `up` wrote them into the env file."""
        written = services.read_env_file(self.state)
        return {k: v for k, v in written.items() if k in {*ENV_KEYS, "TIDEGRAPH_KAFKA_BOOTSTRAP"}}

    @property
    def bootstrap(self) -> str:
        return self.env()["TIDEGRAPH_KAFKA_BOOTSTRAP"]

    def pid(self, node: int) -> int:
        process = local_kafka_cluster.running(self.layout).get(node)
        assert process is not None, f"node {node} is not running"
        return process.pid

    def kill(self, node: int) -> float:
        """SIGKILL a node and wait until it is gone; returns the instant of the signal."""
        pid = self.pid(node)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        assert _proc.wait_for(lambda: not _proc.is_alive(pid), 30), f"node {node} survived"
        return killed_at

    @contextmanager
    def frozen(self, *nodes: int) -> Iterator[None]:
        """SIGSTOP the nodes for the block (they neither fetch nor answer), SIGCONT after."""
        pids = [self.pid(node) for node in nodes]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def quorum_leader(self) -> int:
        """The active controller: the leader of the highest epoch any running node wrote in
        its quorum state."""
        best = (-1, -1)
        for node in local_kafka_cluster.running(self.layout):
            path = self.layout.node(node).data / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if state.get("leaderId", -1) >= 0:
                best = max(best, (int(state["leaderEpoch"]), int(state["leaderId"])))
        assert best[1] >= 0, "no node knows a quorum leader"
        return best[1]

    def restore(self) -> None:
        """Start the nodes that died (as `up` does) and wait until they answer."""
        status = self.up()
        assert status.kafka.running, status.kafka.detail
        down = [b for b in status.kafka.brokers if not b.running]
        assert not down, f"nodes not answering after up: {down}"


@contextmanager
def local_cluster() -> Iterator[LocalCluster]:
    """A running cluster for the duration of the block; stopped and removed afterwards."""
    cluster = LocalCluster(
        REPO / ".tidegraph" / f"test-cluster-{uuid.uuid4().hex[:8]}", free_port_run(2 * NODES)
    )
    try:
        cluster.up()
        yield cluster
    finally:
        services.down(cluster.state)
        shutil.rmtree(cluster.state, ignore_errors=True)


async def describe(
    bootstrap: str, topics: list[str], limit: float = 30.0
) -> dict[str, list[dict[str, Any]]]:
    """Each topic's partitions as the cluster describes them now (leader, replicas, isr),
    ordered by partition; asked again while a broker does not know a topic yet (metadata
    reaches each broker a moment after the topic's creation)."""
    deadline = time.monotonic() + limit
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
        await admin.start()
        try:
            found = await admin.describe_topics(topics)
        finally:
            await admin.close()
        described = {
            t["topic"]: sorted(t["partitions"], key=lambda p: p["partition"]) for t in found
        }
        if all(described.get(t) for t in topics):
            return described
        assert time.monotonic() < deadline, f"not described: {topics}"
        await asyncio.sleep(0.2)


async def wait_in_sync(bootstrap: str, topics: list[str], limit: float = 120.0) -> None:
    """Until every partition of ``topics`` has a leader and all its replicas in sync."""
    deadline = time.monotonic() + limit
    while True:
        described = await describe(bootstrap, topics)
        lagging = [
            (topic, p["partition"])
            for topic, partitions in described.items()
            for p in partitions
            if len(p["isr"]) < len(p["replicas"]) or p["leader"] < 0
        ]
        if not lagging:
            return
        assert time.monotonic() < deadline, f"replicas still out of sync: {lagging[:5]}"
        await asyncio.sleep(0.5)


async def wait_led_elsewhere(
    bootstrap: str, topic: str, partition: int, dead: int, limit: float = 120.0
) -> int:
    """Until the partition has a live leader other than ``dead``; returns it."""
    deadline = time.monotonic() + limit
    while True:
        with_error = await describe(bootstrap, [topic])
        leader = int(with_error[topic][partition]["leader"])
        if leader not in (-1, dead):
            return leader
        assert time.monotonic() < deadline, f"{topic}[{partition}] still led by {leader}"
        await asyncio.sleep(0.2)
