"""``tidegraph query REALM "question"`` against a running ``tidegraph serve``: the answer
with the facts it rests on (validity, belief state, documents) and its references; ``--json``
is the API's own answer; the time options take what the API takes; without a chat model the
retrieved facts, said so; a refusal is one line."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import timedelta

import httpx
import pytest

from tidegraph.client import Client

from llm_server import ScriptedLLMServer
from local_services import run_cli
from surface_helpers import live_pipeline, spawn_serve

pytestmark = [pytest.mark.postgres, pytest.mark.kafka, pytest.mark.slow]
KEY = "cli-query-key"
QUESTION = "Who is Charles Babbage's enemy?"


def _cli(url: str, *args: str, key: str = KEY) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGRAPH_")}
    done = run_cli(["query", *args, "--url", url, "--api-key", key], env)
    return done.returncode, done.stdout, done.stderr


async def test_query_from_the_shell(
    pg_dsn: str,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    llm_server: ScriptedLLMServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    realm, prefix = unique_name("q"), unique_name("qp")
    async with live_pipeline(kafka_bootstrap, pg_dsn, realm, prefix) as live:
        names = sorted(p.name for p in live.corpus_dir.glob("*.md"))
        await live.publish(live.corpus(*[n for n in names if n != "rivalry-2.md"]))
        await live.publish(live.corpus("rivalry-2.md"))
    keys = f"{KEY}={realm}"
    with spawn_serve(pg_dsn, kafka_bootstrap, prefix, realms=(realm,), api_keys=keys) as bare:
        # no chat model on this service: the facts retrieved, and stderr says why
        code, out, err = _cli(bare, realm, QUESTION, "--mode", "local")
        assert code == 0, err
        assert "has no chat model" in err
        assert "Charles Babbage enemy_of George Airy (valid 1842–…, current) — rivalry-2.md" in out
        assert "[rivalry-2.md#0]" in out
        code, _, err = _cli(bare, realm, QUESTION, key="not-a-key")
        assert code == 1 and err.strip() == "tidegraph: 401 unauthenticated: unknown API key"
        code, _, err = _cli(bare, realm, QUESTION, "--as-of", "1830-13")
        assert code == 2 and err.startswith("tidegraph: --as-of: '1830-13' is not a year")

    for name, value in (
        ("TIDEGRAPH_LLM_BASE_URL", llm_server.base_url),
        ("TIDEGRAPH_LLM_MODEL", "scripted"),
        ("OPENAI_API_KEY", "unused"),
    ):
        monkeypatch.setenv(name, value)
    with spawn_serve(pg_dsn, kafka_bootstrap, prefix, realms=(realm,), api_keys=keys) as url:
        code, out, err = _cli(url, realm, QUESTION, "--mode", "local", "--include-superseded")
        assert code == 0, err
        answer, rest = out.split("\n\n", 1)
        assert answer.startswith("From the passages: ") and answer.endswith("[1].")
        assert "References:\n  [1] " in rest
        superseded = "Charles Babbage ally_of George Airy (valid 1830–1841, superseded by"
        assert f"{superseded} Charles Babbage enemy_of George Airy) — rivalry-1.md" in rest

        # --json is the API's answer; the time options as the API takes them
        with Client(url, KEY) as tg:
            ally = next(
                r
                for r in tg.relations(realm, predicate="ally_of", include_superseded=True).relations
            )
            then = (ally.t_created + timedelta(milliseconds=1)).isoformat()
            for options in (
                [],
                ["--as-of", "1830"],
                ["--as-believed-at", then],
                ["--as-of", "1842"],
            ):
                code, out, err = _cli(url, realm, QUESTION, "--mode", "local", "--json", *options)
                assert code == 0, err
                got = json.loads(out)
                body: dict[str, object] = {"query": QUESTION, "mode": "local"}
                for flag, value in zip(options[::2], options[1::2], strict=True):
                    body[flag.removeprefix("--").replace("-", "_")] = value
                async with httpx.AsyncClient(timeout=30) as http:
                    asked = await http.post(
                        f"{url}/v1/realms/{realm}/query",
                        json=body,
                        headers={"Authorization": f"Bearer {KEY}"},
                    )
                want = asked.json()
                assert got["answer"] == want["answer"], options
                ids = [r["id"] for r in got["data"]["relations"]]
                assert ids == [r["id"] for r in want["data"]["relations"]], options
            believed = _cli(url, realm, QUESTION, "--mode", "local", "--as-believed-at", then)[1]
            assert "Charles Babbage ally_of George Airy (valid 1830–1841, current)" in believed
            assert "enemy_of" not in believed.split("Facts:", 1)[1]
