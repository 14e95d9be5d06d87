"""The scripted model server runs on its own: a fixed --port, up without a terminal, and a
prose answer to the query service's synthesis prompt (README, "Trying the model path")."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tidegraph.infra import _proc
from tidegraph.query_service.synthesis import SYSTEM_PROMPT, build_prompt
from tidegraph.schemas.api import ChunkOut, QueryDataResponse

SERVER = Path(__file__).with_name("llm_server.py")


def test_standalone_on_a_fixed_port_without_stdin_answers_synthesis_in_prose() -> None:
    port = _proc.free_port()
    with subprocess.Popen(
        [sys.executable, str(SERVER), "--port", str(port)],
        stdin=subprocess.DEVNULL,  # as under nohup: stdin closed at once
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        _exercise(process, port)


def _exercise(process: subprocess.Popen[str], port: int) -> None:
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == f"http://127.0.0.1:{port}/v1"
        time.sleep(0.5)
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        for order_key in (None, "1843"):  # a dated document's passage says when it stated it
            chunk = ChunkOut(
                id="c1", space="default", doc_key="bio.md", ordinal=0,
                text="Ada Lovelace worked with Charles Babbage. She wrote notes.",
                citation="bio.md#0", channels=[], score=1.0, order_key=order_key,
            )  # fmt: skip
            data = QueryDataResponse(
                entities=[], relations=[], chunks=[chunk], communities=[], stats={}
            )
            prompt = build_prompt("Who did Ada work with?", data)
            body = {
                "model": "scripted",
                "messages": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": prompt.text},
                ],
            }
            answer = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=10
            )
            assert answer.status_code == 200, answer.text
            content = answer.json()["choices"][0]["message"]["content"]
            assert content == "From the passages: Ada Lovelace worked with Charles Babbage [1].", (
                prompt.text
            )
        embed = httpx.post(
            f"http://127.0.0.1:{port}/v1/embeddings",
            json={"model": "e", "input": ["x"], "dimensions": 8},
            timeout=10,
        )
        assert len(embed.json()["data"][0]["embedding"]) == 8
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
