"""The README's main job: the sample corpus through the whole pipeline, then a query."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from tidegraph.infra.cli import main

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_indexes_the_sample_corpus_and_answers(
    kafka_bootstrap: str,
    pg_dsn: str,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TIDEGRAPH_KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("TIDEGRAPH_PG_DSN", pg_dsn)
    monkeypatch.setenv("TIDEGRAPH_TOPIC_PREFIX", unique_name("t"))
    realm = unique_name("demo")
    assert main(["demo", "--once", "--realm", realm, "--port", str(_free_port())]) == 0
    out = capsys.readouterr().out
    assert "Ada Lovelace worked_with Charles Babbage" in out
    assert "Charles Babbage designed Analytical Engine" in out
    assert "Charles Babbage ally_of George Airy" not in out  # superseded by the later dispute
