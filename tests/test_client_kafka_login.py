"""The client reads the changes topic with the login the command line uses: the
environment's, else the env file `tidegraph up` wrote into the state folder; a refused or
missing login is named as such, not as an unreachable broker."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from tidegraph.client import AsyncClient, AuthenticationFailed
from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.schemas.kafka_security import ENV_KEYS
from tidegraph.schemas.topics import changes_topic

pytestmark = pytest.mark.kafka


def _write_env_file(state: Path, values: dict[str, str]) -> None:
    state.mkdir(parents=True)
    lines = [f"export {k}={shlex.quote(v)}" for k, v in values.items()]
    (state / "env").write_text("\n".join(lines) + "\n")
    (state / "env").chmod(0o600)


async def _read_all(bootstrap: str, prefix: str) -> list[str]:
    async with AsyncClient("http://127.0.0.1:9") as tg:  # the topic needs no HTTP service
        changes = tg.subscribe("nobody", bootstrap=bootstrap, topic_prefix=prefix, follow=False)
        return [c.id async for c in changes]


@pytest.fixture
def login(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The broker's login, taken out of this process's environment."""
    values = {k: os.environ[k] for k in ENV_KEYS if k in os.environ}
    assert values.get("TIDEGRAPH_KAFKA_SECURITY_PROTOCOL", "").startswith("SASL_"), (
        "the test broker takes SASL logins (tidegraph up's); this test checks them"
    )
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    return values


async def test_the_env_file_up_wrote_logs_the_client_in(
    kafka_bootstrap: str,
    login: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unique_name: Callable[[str], str],
) -> None:
    prefix = unique_name("cl")
    monkeypatch.setenv(
        "TIDEGRAPH_KAFKA_SECURITY_PROTOCOL", login["TIDEGRAPH_KAFKA_SECURITY_PROTOCOL"]
    )
    monkeypatch.setenv("TIDEGRAPH_KAFKA_SASL_USERNAME", login["TIDEGRAPH_KAFKA_SASL_USERNAME"])
    monkeypatch.setenv("TIDEGRAPH_KAFKA_SASL_PASSWORD", login["TIDEGRAPH_KAFKA_SASL_PASSWORD"])
    await ensure_topic_specs(kafka_bootstrap, [changes_topic(prefix, partitions=1)])
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)

    state = tmp_path / "state"
    _write_env_file(state, login)
    monkeypatch.setenv("TIDEGRAPH_STATE_DIR", str(state))
    assert await _read_all(kafka_bootstrap, prefix) == []  # logged in, read to the end

    # the environment still wins over the file: a wrong password there is refused, and said
    monkeypatch.setenv("TIDEGRAPH_KAFKA_SASL_PASSWORD", "not-the-password")
    with pytest.raises(AuthenticationFailed, match=r"refused the login of user 'tidegraph'"):
        await _read_all(kafka_bootstrap, prefix)


async def test_no_login_at_all_is_named_as_a_missing_login(
    kafka_bootstrap: str, login: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDEGRAPH_STATE_DIR", str(tmp_path / "empty"))
    with pytest.raises(AuthenticationFailed, match=r"wants a login \(SASL\).*<state>/env"):
        await _read_all(kafka_bootstrap, "anything")
