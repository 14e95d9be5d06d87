"""Every producer in tidegraph's packages is built from ``producer_options()``: acks from
every in-sync replica and idempotence, so an acknowledged record survives a broker and a
retry across a leader change is written once."""

from __future__ import annotations

import ast

import pytest

from tidegraph.schemas.kafka_security import kafka_client_options, producer_options

from local_services import REPO

PACKAGES = ("schemas", "store", "connectors", "indexer", "query_service", "infra", "client")
DURABILITY = {"acks", "enable_idempotence"}


def _producer_calls() -> list[tuple[str, ast.Call]]:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package / "tidegraph").rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and _name(node.func) == "AIOKafkaProducer":
                    where = f"{path.relative_to(REPO)}:{node.lineno}"
                    found.append((where, node))
    return found


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else ""


def test_every_producer_is_built_from_producer_options() -> None:
    calls = _producer_calls()
    # connectors' producer and dead letters, the indexer, the publisher, realm deletion
    assert len(calls) >= 5, [where for where, _ in calls]
    for where, call in calls:
        spread = [k.value for k in call.keywords if k.arg is None and isinstance(k.value, ast.Call)]
        assert any(_name(v.func) == "producer_options" for v in spread), (
            f"{where}: AIOKafkaProducer without **producer_options()"
        )
        overridden = {k.arg for k in call.keywords} & DURABILITY
        assert not overridden, f"{where}: overrides {sorted(overridden)}"


def test_producer_options_ask_for_every_in_sync_replica_and_idempotence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIDEGRAPH_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("TIDEGRAPH_KAFKA_SASL_USERNAME", "u")
    monkeypatch.setenv("TIDEGRAPH_KAFKA_SASL_PASSWORD", "p")
    options = producer_options()
    assert options == {**kafka_client_options(), "acks": "all", "enable_idempotence": True}
    assert options["sasl_plain_username"] == "u"
