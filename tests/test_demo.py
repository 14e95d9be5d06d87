"""The README's main job: the sample corpus through the whole pipeline, then a query; and a
demo that would show nothing says why and fails instead of answering from an empty realm."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from demo_checks import check_time_lines

from local_services import env_without_settings

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def demo(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``tidegraph demo --once ARGS`` on the test services, in a realm and topics of its own."""
    env = env_without_settings(
        TIDEGRAPH_KAFKA_BOOTSTRAP=kafka_bootstrap,
        TIDEGRAPH_PG_DSN=pg_dsn,
        TIDEGRAPH_TOPIC_PREFIX=unique_name("t"),
        TIDEGRAPH_STATE_DIR=str(tmp_path / "state"),
    )
    realm = unique_name("demo")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tidegraph.infra.cli", "demo", "--once", "--realm", realm,
             "--port", str(_free_port()), *args],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    return run


@pytest.mark.slow
def test_demo_indexes_the_sample_corpus_and_answers(
    demo: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    done = demo()
    assert done.returncode == 0, done.stderr
    # A healthy start prints no ERROR line and no traceback (README's promise).
    noisy = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if " ERROR " in line or "Traceback" in line
    ]
    assert not noisy, "\n".join(noisy)
    assert "demo: 7 documents indexed, 0 failed" in done.stderr
    out = done.stdout
    assert "Ada Lovelace worked_with Charles Babbage" in out
    assert "Charles Babbage designed Analytical Engine" in out
    assert "Charles Babbage ally_of George Airy" not in out  # superseded by the later dispute
    check_time_lines(done.stderr)


def test_a_corpus_that_is_not_there_is_an_error_not_an_empty_demo(
    demo: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """What an installed wheel did when the corpus was looked up outside the package:
    published nothing, answered with no relation and exited 0."""
    missing = tmp_path / "corpus"
    done = demo("--corpus", str(missing))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == (
        f"tidegraph: the corpus at {missing} cannot be read in full: "
        f"{missing}: no such file or folder"
    )
    assert done.stdout == ""  # no answer printed


def test_a_corpus_holding_no_document_is_an_error(
    demo: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "notes.pdf").write_bytes(b"%PDF")  # passed over, not read
    done = demo("--corpus", str(tmp_path / "corpus"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "holds no document: nothing would be indexed" in done.stderr
    assert done.stdout == ""


@pytest.mark.slow
def test_a_demo_that_indexed_nothing_says_so_and_fails(
    demo: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "weather.md").write_text("the weather was mild, and it rained in the evening.\n")
    done = demo("--corpus", str(corpus))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "demo: 0 documents indexed, 1 failed" in done.stderr
    assert "demo:   failed weather.md: " in done.stderr
    assert f"tidegraph: indexed nothing: every document of {corpus} failed" in done.stderr
    assert done.stdout == ""
