"""An old primary made a standby of its server's new primary (`tidegraph pg rejoin SERVER`).

After `tidegraph pg promote` the old primary's folder is retired: it may hold commits the
promoted standby never received, so it must never run as a primary again. Rejoining turns
it into a standby instead, in this order:

1. the new primary gets the standby's physical replication slot first, so the WAL the
   rewound server still needs stays on the primary from here on;
2. ``pg_rewind`` (shipped with the embedded server, run as its account) makes the old data
   directory match the new primary's at the point where their timelines forked and copies
   the primary's WAL since: whatever the old primary committed after the fork is thrown
   away. A server that was SIGKILLed is first brought to a consistent state by
   ``pg_rewind`` itself (single-user crash recovery); a folder whose WAL ends before the
   fork needs no rewind, which ``pg_rewind`` says and leaves it at that. The local servers
   keep data page checksums (PostgreSQL 18's default), which ``pg_rewind`` requires;
3. the folder becomes a standby folder of the server (renamed when it was not one) and
   leaves the retired list (:mod:`local_pg_topology`);
4. it starts as a standby (:func:`local_pg_standbys.launch`) and replays the new primary's
   WAL from the fork on; `up`, `down`, `status` and the env file know it from then on.

Throwing the lost commits away is safe for tidegraph: every realm's position rolled back
with them, the indexer applied those records again from Kafka on the new primary, and the
change feed never published them (it waits for the standbys).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import psycopg

from tidegraph.infra import _proc, local_pg, local_pg_standbys, local_pg_topology
from tidegraph.infra.errors import ServiceStartError, StateDirError


@dataclass(frozen=True)
class Rejoined:
    """What :func:`rejoin` did."""

    server: str
    standby: str
    """The old primary's label as a standby now (``server/name``)."""
    folder: Path
    """Its folder now."""
    retired: str
    """The retired folder it was."""
    rewind: str
    """``pg_rewind``'s last line: how far it had to go."""
    process: local_pg.PgProcess


def rejoin(
    state: Path, server: str, credentials: local_pg.PgCredentials, *, wait: float = 60.0
) -> Rejoined:
    """Make ``server``'s most recently retired primary a standby of its current primary
    (see the module docstring)."""
    state = state.resolve()
    retired = local_pg_topology.retired(state, server)
    if not retired:
        raise StateDirError(f"server {server} has no retired primary under {state}")
    folder = retired[-1]
    old = local_pg.PgLayout(state / folder)
    if not (old.data / "PG_VERSION").is_file():
        raise StateDirError(f"{old.root} holds no data directory: nothing to rejoin")
    if local_pg.running(old) is not None:
        raise StateDirError(f"the old primary in {old.root} runs: stop it first")
    primary = local_pg.running(local_pg_topology.primary_layout(state, server))
    if primary is None:
        raise StateDirError(f"server {server}'s primary does not run: start it with `up`")
    primary = replace(primary, credentials=credentials)
    target = _standby_for(state, server, folder)
    with psycopg.connect(primary.dsn, autocommit=True, connect_timeout=5) as conn:  # 1.
        conn.execute(
            "SELECT pg_create_physical_replication_slot(%s, true)"
            " WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = %s)",
            (target.slot, target.slot),
        )
    rewind = _rewind(state, old, primary, credentials)  # 2.
    if target.layout.root != old.root:  # 3.
        old.root.rename(target.layout.root)
    (target.layout.data / "standby.signal").touch()
    (target.layout.root / local_pg_standbys.PORT_FILE).unlink(missing_ok=True)
    local_pg_topology.record_rejoin(state, server, folder)
    process = local_pg_standbys.launch(state, target, primary, credentials)  # 4.
    local_pg.wait_ready(target.layout, process, timeout=wait)
    return Rejoined(server, target.label, target.layout.root, folder, rewind, process)


def _standby_for(state: Path, server: str, folder: str) -> local_pg_standbys.LocalStandby:
    """The standby the folder becomes: itself when it was one of ``server``'s standbys
    before its promotion, else a new name."""
    prefix = local_pg_topology.standby_folder(server, "")
    if folder.startswith(prefix):
        return local_pg_standbys.standby(state, server, folder.removeprefix(prefix))
    return local_pg_standbys.standby(state, server, local_pg_standbys.next_name(state, server))


def _rewind(
    state: Path,
    old: local_pg.PgLayout,
    primary: local_pg.PgProcess,
    credentials: local_pg.PgCredentials,
) -> str:
    run_as = local_pg.system_account()
    binaries = local_pg.server_bin_dir(state, run_as)
    local_pg.drop_stale_lock(old)
    source = (
        f"host={_proc.LOOPBACK} port={primary.port} user={local_pg.SUPERUSER} "
        f"dbname={local_pg.DATABASE}"
    )
    done = local_pg.run_tool(
        [str(binaries / "pg_rewind"), "--target-pgdata", str(old.data),
         "--source-server", source],
        cwd=old.root, run_as=run_as, env={"PGPASSWORD": credentials.superuser},
    )  # fmt: skip
    lines = (done.stdout + done.stderr).strip().splitlines()
    if not lines:
        raise ServiceStartError("postgres", "pg_rewind said nothing")
    return lines[-1].removeprefix("pg_rewind: ")
