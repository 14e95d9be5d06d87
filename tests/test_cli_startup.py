"""The CLI answers ``--help`` without importing the model client (``openai`` takes ~2 s)."""

from __future__ import annotations

import subprocess
import sys


def test_help_does_not_import_the_model_client() -> None:
    probe = (
        "import sys\n"
        "from tidegraph.infra import cli\n"
        "try:\n"
        "    cli.main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('openai' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_service_help_shows_the_defaults() -> None:
    for command, shown in (
        ("serve", ["--port PORT", "(default: 8080)", "(default: 127.0.0.1)", "(default: 16)"]),
        ("indexer", ["(default: tidegraph-indexer)", "(default: INFO)"]),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "tidegraph.infra.cli", command, "--help"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        flat = " ".join(out.split())
        for needle in shown:
            assert needle in flat, (command, needle, out)
        assert "(default: None)" not in flat and "(default: False)" not in flat
