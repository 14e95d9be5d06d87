"""A fresh clone in a private folder (``mktemp -d``, mode 0700) with the state folder outside
it, as a newcomer runs it: ``scripts/demo`` bootstraps, starts Kafka and PostgreSQL and
shows both times, and the README's model-path example answers from its evidence. Under
root the server runs as its own account, which cannot enter the clone's folder: it runs
from a copy of its install in the state folder, and the clone's folders stay closed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from demo_checks import check_time_lines

from tidegraph.infra import _proc

from local_services import REPO

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.postgres]


@dataclass(frozen=True)
class Clone:
    private: Path
    """The 0700 folder holding the clone."""
    root: Path
    """The clone."""
    state: Path
    """Its state folder, outside the private folder."""
    env: dict[str, str]
    """A newcomer's environment: no tidegraph settings but free ports and the state folder."""

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.root / ".venv/bin/tidegraph"), *args],
            cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip


def _checkout_files() -> list[str]:
    """What a clone of this checkout holds (tracked files, and new ones not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout  # fmt: skip
    return [name for name in listed.decode().split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def clone() -> Iterator[Clone]:
    private = Path(tempfile.mkdtemp(prefix="tidegraph-private-"))
    outside = Path(tempfile.mkdtemp(prefix="tidegraph-state-"))
    assert private.stat().st_mode & 0o777 == 0o700
    root = private / "tidegraph"
    for name in _checkout_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGRAPH_")}
    env.update(
        TIDEGRAPH_STATE_DIR=str(outside / "state"),
        TIDEGRAPH_KAFKA_PORT=str(_proc.free_port()),
        TIDEGRAPH_KAFKA_CONTROLLER_PORT=str(_proc.free_port()),
        TIDEGRAPH_PG_PORT=str(_proc.free_port()),
    )
    made = Clone(private, root, outside / "state", env)
    try:
        yield made
    finally:
        if (root / ".venv/bin/tidegraph").exists():
            made.run("down")
        shutil.rmtree(private, ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)


def test_the_demo_runs_from_a_private_folder(clone: Clone) -> None:
    port = _proc.free_port()
    done = subprocess.run(
        ["scripts/demo", "--once", "--port", str(port)],
        cwd=clone.root, env=clone.env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    answer = json.loads(done.stdout[done.stdout.index("{") :])
    assert "Ada Lovelace worked_with Charles Babbage" in answer["relations"]
    check_time_lines(done.stderr)

    # the clone's folders stay as the user made them: nothing was opened up to reach it
    assert clone.private.stat().st_mode & 0o777 == 0o700
    record = json.loads((clone.state / "postgres" / "postgres.json").read_text())
    server = Path(os.readlink(f"/proc/{record['pid']}/exe"))
    if os.geteuid() == 0:  # run as its own account: from the copy in the state folder
        assert server.is_relative_to(clone.state / "pg-install"), server
    else:
        assert server.is_relative_to(clone.root), server


def test_the_readme_model_path_example_answers(clone: Clone) -> None:
    """README, "Trying the model path without a model", step by step (on free ports)."""
    assert (clone.root / ".venv/bin/tidegraph").exists(), "the demo test bootstraps the clone"
    llm_port, serve_port = _proc.free_port(), _proc.free_port()
    env = dict(clone.env)
    env.update(
        TIDEGRAPH_LLM_BASE_URL=f"http://127.0.0.1:{llm_port}/v1",
        TIDEGRAPH_LLM_MODEL="scripted",
        TIDEGRAPH_EMBED_MODEL="scripted-embed",
        OPENAI_API_KEY="unused",
    )
    model_path = Clone(clone.private, clone.root, clone.state, env)
    python = str(clone.root / ".venv/bin/python")
    background = [
        subprocess.Popen(
            [python, "tests/llm_server.py", "--port", str(llm_port)],
            cwd=clone.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
    ]
    try:
        created = model_path.run(
            "realm", "create", "saga", "--config", "tests/fixtures/llm/realm.json"
        )
        assert created.returncode == 0, created.stderr
        published = model_path.run("publish", "--realm", "saga", "tests/fixtures/llm/corpus")
        assert published.returncode == 0, published.stderr
        for command in (["indexer"], ["serve", "--port", str(serve_port)]):
            background.append(
                subprocess.Popen(
                    [str(clone.root / ".venv/bin/tidegraph"), *command],
                    cwd=clone.root,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
            )
        answer = _ask(f"http://127.0.0.1:{serve_port}", background)
    finally:
        for process in background:
            process.terminate()
        for process in background:
            process.wait(30)
    assert answer["data"]["chunks"], answer
    assert answer["answer"] != "The evidence given does not answer the question.", answer
    assert answer["answer"].startswith("From the passages: ") and "[1]" in answer["answer"]


def _ask(base: str, processes: list[subprocess.Popen[bytes]]) -> dict[str, object]:
    """The README's curl, until the indexer has indexed the corpus and serve answers."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in processes), "a README process exited"
        try:
            r = httpx.post(
                f"{base}/v1/realms/saga/query", json={"query": "Who founded Wrenfield?"}, timeout=30
            )
            if r.status_code == 200 and r.json()["data"]["chunks"]:
                body: dict[str, object] = r.json()
                return body
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError("no answer from the README's model-path example within 180 s")
