"""Which folder holds each local server's primary, once a standby has been promoted.

Before any promotion a server's primary is the folder `up` made for it: ``<state>/postgres``
for ``main``, ``<state>/postgres-<name>`` for the others (:mod:`local_pg_servers`), and its
standbys live in ``<state>/standby-<server>-<name>`` (:mod:`local_pg_standbys`).
`tidegraph pg promote` makes a standby's folder the server's primary; that choice is kept
in ``<state>/pg-topology.json`` (``{server: {"primary": folder, "retired": [folders]}}``)
so `up`, `down`, `status` and the env file follow the promoted server from then on. A
retired folder is the old primary's data: never started again by `up` (it may hold
commits the new primary lacks), kept for the operator to discard, or to make a standby of
the new primary (`tidegraph pg rejoin`, :mod:`local_pg_rejoin`), which takes it off the
list.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tidegraph.infra import local_pg

FILE = "pg-topology.json"
MAIN = "main"
SERVER_PREFIX = "postgres-"
STANDBY_PREFIX = "standby-"


def default_folder(server: str) -> str:
    """The folder `up` makes for ``server``'s first primary."""
    return "postgres" if server == MAIN else f"{SERVER_PREFIX}{server}"


def standby_folder(server: str, name: str) -> str:
    """The folder of standby ``name`` of ``server``."""
    return f"{STANDBY_PREFIX}{server}-{name}"


def _read(state: Path) -> dict[str, Any]:
    try:
        raw = json.loads((state / FILE).read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def primary_folder(state: Path, server: str) -> str:
    entry = _read(state).get(server)
    if isinstance(entry, dict) and isinstance(entry.get("primary"), str):
        return str(entry["primary"])
    return default_folder(server)


def primary_layout(state: Path, server: str) -> local_pg.PgLayout:
    """The layout of ``server``'s current primary."""
    return local_pg.PgLayout(state.resolve() / primary_folder(state, server))


def retired(state: Path, server: str) -> list[str]:
    """Folders of ``server``'s former primaries, oldest first."""
    entry = _read(state).get(server)
    found = entry.get("retired", []) if isinstance(entry, dict) else []
    return [str(f) for f in found]


def record_rejoin(state: Path, server: str, folder: str) -> None:
    """Take ``folder`` off ``server``'s retired primaries: it is a standby now."""
    topology = _read(state)
    found = topology.get(server)
    entry: dict[str, Any] = found if isinstance(found, dict) else {}
    entry["retired"] = [f for f in retired(state, server) if f != folder]
    topology[server] = {"primary": primary_folder(state, server), **entry}
    _write(state, topology)


def _write(state: Path, topology: dict[str, Any]) -> None:
    """Written whole to a new file, then renamed."""
    partial = state / f".{FILE}.partial-{os.getpid()}"
    partial.write_text(json.dumps(topology, indent=2) + "\n")
    partial.replace(state / FILE)


def record_promotion(state: Path, server: str, new_primary: str) -> str:
    """Make ``new_primary`` (a folder under ``state``) ``server``'s primary; return the
    folder it replaces, now retired."""
    topology = _read(state)
    old = primary_folder(state, server)
    found = topology.get(server)
    entry: dict[str, Any] = found if isinstance(found, dict) else {}
    history = [f for f in retired(state, server) if f != new_primary] + [old]
    topology[server] = {**entry, "primary": new_primary, "retired": history}
    _write(state, topology)
    return old
