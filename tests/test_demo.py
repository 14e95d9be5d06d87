"""The README's main job: the sample corpus through the whole pipeline, then a query."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from demo_checks import check_time_lines

from local_services import env_without_settings

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_indexes_the_sample_corpus_and_answers(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    env = env_without_settings(
        TIDEGRAPH_KAFKA_BOOTSTRAP=kafka_bootstrap,
        TIDEGRAPH_PG_DSN=pg_dsn,
        TIDEGRAPH_TOPIC_PREFIX=unique_name("t"),
        TIDEGRAPH_STATE_DIR=str(tmp_path / "state"),
    )
    realm = unique_name("demo")
    done = subprocess.run(
        [sys.executable, "-m", "tidegraph.infra.cli", "demo", "--once", "--realm", realm,
         "--port", str(_free_port())],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # A healthy start prints no ERROR line and no traceback (README's promise).
    noisy = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if " ERROR " in line or "Traceback" in line
    ]
    assert not noisy, "\n".join(noisy)
    out = done.stdout
    assert "Ada Lovelace worked_with Charles Babbage" in out
    assert "Charles Babbage designed Analytical Engine" in out
    assert "Charles Babbage ally_of George Airy" not in out  # superseded by the later dispute
    check_time_lines(done.stderr)
