"""Where `tidegraph up` leaves what other programs need: the state folder and its env file.

A settings source, like the environment: every ``tidegraph`` command and the Python client
find the state folder the same way (``TIDEGRAPH_STATE_DIR``, else the nearest
``.tidegraph/`` upwards that holds state, else the per-user folder) and read the
``KEY=value`` pairs `up` wrote into ``<state>/env`` — the broker's address and login
included — below anything the environment itself sets. Reading only: `up` writes the file
(``tidegraph.infra.services``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

ENV_FILE = "env"
"""The file `up` writes into the state folder (mode 0600)."""
STATE_FOLDER = ".tidegraph"
"""A project's own state folder, found from the working directory upwards."""
_UP_FOLDERS = frozenset({ENV_FILE, "kafka", "postgres"})
"""What `up` puts into a state folder."""


def user_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user state folder: ``$XDG_STATE_HOME/tidegraph`` (``~/.local/state/tidegraph``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/state")
    return Path(base).expanduser().resolve() / "tidegraph"


def _holds_state(folder: Path) -> bool:
    """A ``.tidegraph/`` someone meant as a state folder: empty, or with `up`'s files in it.

    A folder holding only the test suite's ``test*/`` areas does not count, so running the
    tests in a checkout never hides the services `up` started elsewhere.
    """
    try:
        names = {child.name for child in folder.iterdir()}
    except OSError:
        return False
    return not names or bool(names & _UP_FOLDERS)


def find_state_dir(start: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The state folder every command uses when none is given.

    The nearest ``.tidegraph/`` from ``start`` (the working directory) upwards that holds
    state, else :func:`user_state_dir`. `up` and every other command look the same way, so
    from any directory they agree on where the services are.
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / STATE_FOLDER
        if candidate.is_dir() and _holds_state(candidate):
            return candidate
    return user_state_dir(environ)


def state_path(
    state_dir: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> Path:
    """The state folder as an absolute path: ``state_dir``, ``TIDEGRAPH_STATE_DIR``, else
    :func:`find_state_dir`."""
    env = os.environ if environ is None else environ
    chosen = state_dir if state_dir is not None else env.get("TIDEGRAPH_STATE_DIR") or None
    if chosen is None:
        return find_state_dir(environ=env)
    return Path(chosen).expanduser().resolve()


def read_env_file(state_dir: Path) -> dict[str, str]:
    """The ``KEY=value`` pairs `up` wrote into ``<state>/env`` (empty when absent)."""
    values: dict[str, str] = {}
    try:
        text = (state_dir / ENV_FILE).read_text()
    except OSError:
        return values
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, value = words[1].split("=", 1)
            values[key] = value
    return values


def configured(state_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """``TIDEGRAPH_*`` settings as a command sees them: the environment's, then for what it
    does not set, the env file's of the state folder."""
    written = read_env_file(state_path(state_dir))
    given = {k: v for k, v in os.environ.items() if k.startswith("TIDEGRAPH_")}
    return {**{k: v for k, v in written.items() if k.startswith("TIDEGRAPH_")}, **given}
