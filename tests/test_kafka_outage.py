"""A broker outage under a running indexer: aiokafka's connection errors (about 1,750 lines
in 45 s before) are one line when it starts and a counted summary every 30 s; told to stop
meanwhile, the indexer exits cleanly."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tidegraph.infra import _proc, services
from tidegraph.schemas import kafka_security

from indexer_helpers import make_topics, publish, stored_position, upsert, wait_for
from local_services import env_without_settings

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

_AIOKAFKA_LINE = re.compile(r"^\S+ \S+ (?:WARNING|ERROR|CRITICAL) aiokafka[\w.]*: ")


def _spawn_indexer(group: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "tidegraph.infra.cli", "indexer", "--group", group],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )


async def test_indexer_logs_a_broker_outage_in_a_few_lines(
    pg_dsn: str,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = tmp_path / "broker"
    kafka_port, controller_port = _proc.free_port(), _proc.free_port()
    status = services.up(
        state, services=[services.KAFKA], kafka_port=kafka_port,
        kafka_controller_port=controller_port,
    )  # fmt: skip
    bootstrap = status.kafka_bootstrap
    # this broker's own credentials, for this process's clients and the indexer's
    login = {k: v for k, v in services.read_env_file(state).items() if k in kafka_security.ENV_KEYS}
    for key, value in login.items():
        monkeypatch.setenv(key, value)
    log = tmp_path / "indexer.log"
    process: subprocess.Popen[bytes] | None = None
    try:
        topics = await make_topics(bootstrap, unique_name("t"), partitions=1)
        group, realm = unique_name("g"), unique_name("r")
        env = env_without_settings(
            TIDEGRAPH_KAFKA_BOOTSTRAP=bootstrap,
            TIDEGRAPH_PG_DSN=pg_dsn,
            TIDEGRAPH_TOPIC_PREFIX=topics.prefix,
            TIDEGRAPH_EMBEDDER="hashing:64",
            TIDEGRAPH_STATE_DIR=str(tmp_path / "state"),
        )
        process = _spawn_indexer(group, env, log)
        await publish(topics, [upsert(realm, "a.md", "Ada Lovelace worked with Charles Babbage.")])

        async def consumed() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 1

        await wait_for(consumed, 90, "the indexer to apply the first record")
        services.down(state, services=[services.KAFKA])
        outage_started = time.monotonic()
        await asyncio.sleep(40)  # past one summary interval (30 s)
        process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.wait, 60)
        outage = time.monotonic() - outage_started
    finally:
        if process is not None and process.poll() is None:
            process.kill()
        services.down(state, services=[services.KAFKA])
    text = log.read_text()
    lines = text.splitlines()
    noisy = [line for line in lines if _AIOKAFKA_LINE.match(line)]
    assert "Traceback" not in text, text[-3000:]
    assert code == 0, text[-3000:]
    started = [line for line in noisy if "Kafka unreachable:" in line]
    summaries = [line for line in noisy if "Kafka still unreachable after" in line]
    assert len(started) == 1, "\n".join(noisy)
    assert 1 <= len(summaries) <= outage / 30 + 1, "\n".join(noisy)
    # Any other aiokafka line would be the flood the filter exists to stop (a first run
    # counted 2,084 connection errors in the first 30 s, told in these two lines).
    assert len(noisy) == len(started) + len(summaries), "\n".join(noisy)
