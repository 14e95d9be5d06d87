"""`tidegraph up --brokers 3`: three combined KRaft nodes, closed like the single broker,
reused by `up`, listed by `status`, stopped by `down`, surviving the loss of a node with
every acknowledged record; tidegraph's topics on it at three copies, two in sync.

One cluster for the module (three JVMs are heavy); a test that kills a node restores it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from tidegraph.connectors.topics import ensure_topic_specs, topics_report
from tidegraph.infra import _proc, local_kafka, local_kafka_cluster, services
from tidegraph.infra.errors import StateDirError
from tidegraph.schemas.kafka_security import KafkaSecurity, kafka_client_options, producer_options
from tidegraph.schemas.topics import topic_specs

from cluster_helpers import (
    NODES,
    LocalCluster,
    describe,
    local_cluster,
    wait_in_sync,
    wait_led_elsewhere,
)
from local_services import run_cli

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with local_cluster() as running:
        yield running


@pytest.fixture
def cluster_login(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """This process's clients log in to the cluster; returns its bootstrap list."""
    for key, value in cluster.env().items():
        monkeypatch.setenv(key, value)
    return cluster.bootstrap


def _ours(path: Path) -> list[int]:
    """Pids of live processes whose command line mentions ``path``."""
    return [
        pid
        for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
        if pid != os.getpid() and _proc.is_ours(pid, str(path))
    ]


def test_three_closed_nodes_each_with_its_own_ports_and_folder(cluster: LocalCluster) -> None:
    status = services.status(cluster.state)
    kafka = status.kafka
    assert kafka.running and kafka.origin == "local"
    ports = [cluster.port + i for i in range(NODES)]
    controllers = [cluster.port + NODES + i for i in range(NODES)]
    assert [b.node_id for b in kafka.brokers] == [1, 2, 3]
    assert [b.address for b in kafka.brokers] == [f"127.0.0.1:{p}" for p in ports]
    assert [b.controller for b in kafka.brokers] == [f"127.0.0.1:{p}" for p in controllers]
    assert all(b.running and b.pid is not None for b in kafka.brokers)
    # the env file carries every node, so clients reach the cluster while any one answers
    assert cluster.env()["TIDEGRAPH_KAFKA_BOOTSTRAP"] == ",".join(f"127.0.0.1:{p}" for p in ports)
    assert kafka.address == cluster.bootstrap
    # and so does Kafka's own client configuration, for its tools and Java clients
    properties = cluster.state / services.CLIENT_PROPERTIES
    assert properties.stat().st_mode & 0o777 == 0o600
    assert f"bootstrap.servers={cluster.bootstrap}" in properties.read_text().splitlines()
    layout = local_kafka_cluster.ClusterLayout.under(cluster.state)
    password = services.read_env_file(cluster.state)[services.KAFKA_PASSWORD_KEY]
    for broker in kafka.brokers:
        node = layout.node(broker.node_id)
        assert node.root.stat().st_mode & 0o777 == 0o700
        assert node.config.stat().st_mode & 0o777 == 0o600
        assert password not in node.record.read_text()
        config = node.config.read_text()
        assert f"node.id={broker.node_id}\n" in config
        assert "unclean.leader.election.enable=false\n" in config
        assert "min.insync.replicas=2\n" in config
        assert "default.replication.factor=3\n" in config
        assert "offsets.topic.replication.factor=3\n" in config
        command = _proc.command_line(broker.pid or 0)
        assert str(node.config) in command and "-Xmx384m" in command
        # loopback only: nothing of this node listens anywhere but 127.0.0.1
        host, port = broker.address.split(":")
        assert host == "127.0.0.1" and _proc.port_answers(int(port))
        assert f"listeners=SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:" in config
    # closed: each node answers the SCRAM login only
    login = local_kafka.local_security(password)
    for broker in kafka.brokers:
        assert local_kafka.broker_count(broker.address, security=login, timeout=10) == NODES
        plain = KafkaSecurity(security_protocol="PLAINTEXT")
        assert local_kafka.broker_count(broker.address, security=plain, timeout=3) == 0
        wrong = local_kafka.local_security(password[::-1])
        assert local_kafka.broker_count(broker.address, security=wrong, timeout=3) == 0
    shown = run_cli(["--state-dir", str(cluster.state), "status"], env=_cli_env())
    for broker in kafka.brokers:
        assert f"node {broker.node_id}  running  local   {broker.address}" in shown.stdout


def _cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TIDEGRAPH_")}


def test_up_again_reuses_the_running_cluster(cluster: LocalCluster) -> None:
    before = services.status(cluster.state).kafka
    pids = [b.pid for b in before.brokers]
    again = cluster.up()
    assert not again.kafka.started and [b.pid for b in again.kafka.brokers] == pids
    # without --brokers, `up` takes what runs; the CLI writes the same env file
    done = run_cli(["--state-dir", str(cluster.state), "up", "--only", "kafka"], env=_cli_env())
    assert done.returncode == 0, done.stderr
    assert [b.pid for b in services.status(cluster.state).kafka.brokers] == pids
    assert cluster.env()["TIDEGRAPH_KAFKA_BOOTSTRAP"] == before.address
    with pytest.raises(StateDirError, match="runs 3 nodes, not 1"):
        services.up(cluster.state, services=[services.KAFKA], kafka_brokers=1)
    with pytest.raises(StateDirError, match="already runs from port"):
        services.up(cluster.state, services=[services.KAFKA], kafka_brokers=NODES, kafka_port=1024)
    with pytest.raises(StateDirError, match="runs 1 or 3 Kafka nodes"):
        services.up(cluster.state, services=[services.KAFKA], kafka_brokers=2)


async def test_every_topic_three_copies_two_in_sync(
    cluster_login: str, unique_name: Callable[[str], str]
) -> None:
    """Documents, changes and dead letters, as every command creates them, and what the
    cluster's internal topics and defaults are."""
    specs = topic_specs(unique_name("c"), partitions=4)
    assert await ensure_topic_specs(cluster_login, specs) == []
    names = [s.name for s in specs]
    await wait_in_sync(cluster_login, names)
    described = await describe(cluster_login, names)
    resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
    configs = await _configs(
        cluster_login, [*resources, ConfigResource(ConfigResourceType.BROKER, "1")]
    )
    for name in names:
        assert len(described[name]) == 4
        for p in described[name]:
            assert sorted(p["replicas"]) == [1, 2, 3] and sorted(p["isr"]) == [1, 2, 3]
        # set on the topic itself, so they hold on a cluster whose defaults say otherwise
        assert configs[name]["min.insync.replicas"] == ("2", TOPIC_SETTING)
        assert configs[name]["unclean.leader.election.enable"] == ("false", TOPIC_SETTING)
    assert configs["1"]["unclean.leader.election.enable"][0] == "false"
    assert configs["1"]["min.insync.replicas"][0] == "2"
    # leadership spread over the nodes, so any node's loss moves some of it
    assert {p["leader"] for p in described[names[0]]} == {1, 2, 3}


TOPIC_SETTING = 1
"""DescribeConfigs' ``config_source`` of a value set on the topic (DYNAMIC_TOPIC_CONFIG)."""


async def _configs(
    bootstrap: str, resources: list[ConfigResource]
) -> dict[str, dict[str, tuple[str, int]]]:
    """Each resource's configuration in force, by name: value and where it comes from."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **kafka_client_options())
    await admin.start()
    try:
        responses = await admin.describe_configs(resources)
    finally:
        await admin.close()
    found: dict[str, dict[str, tuple[str, int]]] = {}
    for response in responses:
        for res in response.to_object()["resources"]:
            found[res["resource_name"]] = {
                e["config_names"]: (e["config_value"], e["config_source"])
                for e in res["config_entries"]
            }
    return found


async def test_an_existing_topic_with_fewer_copies_is_reported(
    cluster_login: str, unique_name: Callable[[str], str]
) -> None:
    (spec, *_) = topic_specs(unique_name("w"), partitions=1)
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster_login, **kafka_client_options())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(spec.name, 1, 1, topic_configs=dict(spec.configs))])
    finally:
        await admin.close()
    report = await topics_report(cluster_login, [spec])
    assert report.existing == [spec.name]
    assert report.warnings == [
        f"topic {spec.name!r} exists with replication factor 1 but tidegraph creates it "
        "with 3 on this cluster; left unchanged"
    ]


async def test_the_cluster_survives_the_loss_of_its_active_controller(
    cluster: LocalCluster, cluster_login: str, unique_name: Callable[[str], str]
) -> None:
    """SIGKILL the node that is the quorum's leader and leads the topic's partition:
    survivors elect a controller and a partition leader, every record acknowledged before
    is readable, writes at acks=all go on with two in sync; `up` brings the node back."""
    controller = cluster.quorum_leader()
    others = [n for n in range(1, NODES + 1) if n != controller]
    topic = unique_name("s")
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster_login, **kafka_client_options())
    await admin.start()
    try:  # the controller leads the partition: one kill takes both leaderships
        assignment = {0: [controller, *others]}
        await admin.create_topics([NewTopic(topic, -1, -1, replica_assignments=assignment)])
    finally:
        await admin.close()
    await wait_in_sync(cluster_login, [topic])
    acks: list[float] = []
    async with AIOKafkaProducer(bootstrap_servers=cluster_login, **producer_options()) as producer:
        for i in range(200):
            await producer.send_and_wait(topic, f"before-{i}".encode())
        killed_at = cluster.kill(controller)
        for i in range(200):
            await producer.send_and_wait(topic, f"after-{i}".encode())
            acks.append(time.monotonic())
    first_ack = acks[0] - killed_at
    leader = await wait_led_elsewhere(cluster_login, topic, 0, controller)
    (partition,) = (await describe(cluster_login, [topic]))[topic]
    assert leader in others and sorted(partition["isr"]) == others
    assert cluster.quorum_leader() in others, "the survivors elect a controller"
    status = services.status(cluster.state).kafka
    assert status.running and [b.running for b in status.brokers].count(False) == 1
    assert f"node {controller} down" in status.detail
    values = await _read_to_end(cluster_login, topic)
    assert values == [f"before-{i}".encode() for i in range(200)] + [
        f"after-{i}".encode() for i in range(200)
    ]
    print(f"\nleader election seen by an acks=all producer: first ack {first_ack:.1f}s after")
    cluster.restore()
    await wait_in_sync(cluster_login, [topic])


async def test_an_acknowledged_record_outlives_a_leader_whose_followers_lag(
    cluster: LocalCluster, cluster_login: str, unique_name: Callable[[str], str]
) -> None:
    """The case "acknowledged = not lost" is about: freeze both followers, write, kill the
    leader, thaw them. With ``acks=all`` and two in sync nothing is acknowledged while the
    followers hold none of it (a leader alone would acknowledge what dies with it); after
    the election every record is there once, in order."""
    controller = cluster.quorum_leader()  # stays: the survivors need no new quorum leader
    leader = next(n for n in range(1, NODES + 1) if n != controller)
    followers = [n for n in range(1, NODES + 1) if n != leader]
    topic = unique_name("f")
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster_login, **kafka_client_options())
    await admin.start()
    try:
        assignment = {0: [leader, *followers]}
        await admin.create_topics([NewTopic(topic, -1, -1, replica_assignments=assignment)])
    finally:
        await admin.close()
    await wait_in_sync(cluster_login, [topic])
    before = [f"before-{i}".encode() for i in range(50)]
    during = [f"during-{i}".encode() for i in range(50)]
    producer = AIOKafkaProducer(bootstrap_servers=cluster_login, **producer_options())
    await producer.start()
    try:
        for value in before:
            await producer.send_and_wait(topic, value)
        with cluster.frozen(*followers):
            # a fetch a follower left waiting at the leader (up to 500 ms) is answered into
            # its socket even while it is frozen: let those lapse before writing
            await asyncio.sleep(1.5)
            pending = [await producer.send(topic, value) for value in during]
            await asyncio.sleep(3)
            acknowledged_alone = [f for f in pending if f.done() and f.exception() is None]
            cluster.kill(leader)
        async with asyncio.timeout(120):
            await asyncio.gather(*pending)
    finally:
        await producer.stop()
    stored = await _read_to_end(cluster_login, topic)
    acknowledged = before + [during[pending.index(f)] for f in acknowledged_alone]
    lost = [value for value in acknowledged if value not in stored]
    assert not lost, f"{len(lost)} acknowledged records lost with the leader: {lost[:3]}"
    assert acknowledged_alone == [], "acknowledged while only the leader held them"
    assert stored == before + during, "each record once, in order"
    cluster.restore()
    await wait_in_sync(cluster_login, [topic])


async def _read_to_end(bootstrap: str, topic: str) -> list[bytes]:
    """Every value of the topic's one partition, from its start to its end offset now."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", **kafka_client_options()
    )
    await consumer.start()
    got: list[bytes] = []
    partition = TopicPartition(topic, 0)
    try:
        consumer.assign([partition])
        end = (await consumer.end_offsets([partition]))[partition]
        async with asyncio.timeout(60):
            while await consumer.position(partition) < end:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value or b"" for r in records]
    finally:
        await consumer.stop()
    return got


def test_down_stops_every_node(cluster: LocalCluster) -> None:
    """Last in the module: the fixture's own `down` then finds nothing to stop."""
    pids = [b.pid for b in services.status(cluster.state).kafka.brokers]
    stopped = services.down(cluster.state)
    assert sorted(s.pid for s in stopped) == sorted(pids)
    assert {s.name for s in stopped} == {services.KAFKA}
    assert _ours(cluster.state) == []
    after = services.status(cluster.state).kafka
    assert not after.running and after.brokers == ()
    # the login stays with the data, the addresses go
    assert set(services.read_env_file(cluster.state)) == {services.KAFKA_PASSWORD_KEY}
