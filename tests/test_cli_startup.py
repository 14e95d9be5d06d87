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
