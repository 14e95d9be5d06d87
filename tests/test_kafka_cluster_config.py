"""How many copies, how many in sync, and what each node of a local cluster is told: pure
values, no broker."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.infra import local_kafka, local_kafka_cluster, local_kafka_plan
from tidegraph.infra.errors import StateDirError
from tidegraph.schemas.topics import Replication, replication, topic_specs

from local_services import run_cli


@given(st.integers(min_value=1, max_value=1000))
def test_with_three_brokers_one_may_die_without_loss_or_stopping_writes(brokers: int) -> None:
    """What `acks=all` promises on a topic of ``factor`` copies with ``min_insync``: an
    acknowledged record is on ``min_insync`` brokers, and writes go on while that many
    replicas are alive."""
    chosen = replication(brokers)
    assert 1 <= chosen.min_insync <= chosen.factor <= brokers
    if brokers >= 3:
        survives_one_loss = chosen.min_insync >= 2  # a copy is left after any one loss
        writes_after_one_loss = chosen.factor - 1 >= chosen.min_insync
        assert survives_one_loss and writes_after_one_loss
        assert chosen.factor == 3, "more copies cost disk and produce latency for nothing"
    else:
        assert chosen.factor == brokers and chosen.min_insync == 1


def test_replication_needs_a_broker() -> None:
    with pytest.raises(ValueError, match="at least one broker"):
        replication(0)
    assert Replication(2).min_insync == 1


def test_every_topic_refuses_unclean_leader_election() -> None:
    for spec in topic_specs("p"):
        assert spec.configs["unclean.leader.election.enable"] == "false"


def _settings(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    return dict(pairs)


def test_a_cluster_node_is_told_its_quorum_and_the_replication(tmp_path: Path) -> None:
    layout = local_kafka_cluster.ClusterLayout.under(tmp_path)
    ports = local_kafka_cluster.node_ports(9092, 9095)
    assert ports == {
        1: local_kafka_cluster.NodePorts(9092, 9095),
        2: local_kafka_cluster.NodePorts(9093, 9096),
        3: local_kafka_cluster.NodePorts(9094, 9097),
    }
    assert local_kafka_cluster.bootstrap_of(ports) == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    voters = {i: p.controller for i, p in ports.items()}
    node = layout.node(2)
    settings = local_kafka.node_settings(node, 2, 9093, voters, "p", "c")
    assert settings["node.id"] == "2"
    assert settings["controller.quorum.voters"] == (
        "1@127.0.0.1:9095,2@127.0.0.1:9096,3@127.0.0.1:9097"
    )
    assert settings["listeners"] == "SASL_PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:9096"
    assert settings["log.dirs"] == str(tmp_path.resolve() / "kafka-cluster" / "node-2" / "data")
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "share.coordinator.state.topic.replication.factor",
    ):
        assert settings[key] == "3", key
    for key in ("min.insync.replicas", "transaction.state.log.min.isr"):
        assert settings[key] == "2", key
    assert settings["unclean.leader.election.enable"] == "false"


def test_the_single_broker_keeps_one_copy(tmp_path: Path) -> None:
    layout = local_kafka.KafkaLayout.under(tmp_path)
    settings = _settings(local_kafka.server_properties(layout, 9092, 9093, "p", "c"))
    assert settings["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert settings["offsets.topic.replication.factor"] == "1"
    assert settings["min.insync.replicas"] == "1"
    assert settings["unclean.leader.election.enable"] == "false"


def test_a_node_count_up_does_not_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StateDirError, match=r"--brokers 2: `tidegraph up` runs 1 or 3"):
        local_kafka_plan.brokers(tmp_path, 2)
    assert local_kafka_plan.brokers(tmp_path, None) == 1
    assert local_kafka_plan.brokers(tmp_path, 3) == 3
    done = run_cli(["--state-dir", str(tmp_path), "up", "--brokers", "2"], env={"PATH": ""})
    assert done.returncode == 2 and "invalid choice: 2" in done.stderr
