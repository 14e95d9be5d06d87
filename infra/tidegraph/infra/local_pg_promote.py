"""Failover of a local server to one of its standbys (`tidegraph pg promote SERVER/NAME`).

In this order:

1. fence the old primary: if it still runs it is stopped (fast shutdown — PostgreSQL sends
   its last WAL to the connected standbys before it exits), so two primaries never take
   writes at once;
2. promote the standby (``pg_promote()``, waiting until it accepts writes);
3. record it as the server's primary (:mod:`local_pg_topology`), so `up`, `down`, `status`
   and the env file follow it; the old primary's folder is retired, never started again;
4. point the server's other standbys at it (a slot of their own on it, restarted with the
   new ``primary_conninfo``; they follow its new timeline as long as they had not replayed
   past the point where it was promoted).

The old primary's data may hold commits the promoted standby never received
(asynchronous replication): it is kept for the operator, with the two ways on
(:func:`advice`): discard it, or rejoin it as a standby (:mod:`local_pg_rejoin`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import psycopg

from tidegraph.infra import local_pg, local_pg_standbys, local_pg_topology
from tidegraph.infra.errors import ServiceStartError, StateDirError


@dataclass(frozen=True)
class Promotion:
    """What :func:`promote` did."""

    server: str
    """The server that failed over."""
    promoted: str
    """The standby that is its primary now (``server/name``)."""
    primary: local_pg.PgProcess
    """The new primary (with the credentials)."""
    retired: Path
    """The old primary's folder."""
    stopped: int | None
    """The old primary's pid when it still ran and was stopped first."""
    followers: tuple[str, ...]
    """The other standbys, now following the new primary."""


def promote(
    state: Path, label: str, credentials: local_pg.PgCredentials, *, wait: float = 60.0
) -> Promotion:
    """Fail ``label``'s server over to it (see the module docstring)."""
    state = state.resolve()
    target = local_pg_standbys.find(state, label)
    process = local_pg.running(target.layout)
    if process is None:
        raise StateDirError(f"standby {label} does not run: start it with `tidegraph up` first")
    process = replace(process, credentials=credentials)
    old = local_pg_topology.primary_layout(state, target.server)
    stopped = local_pg.stop(old, timeout=wait)  # 1. never two primaries
    with psycopg.connect(process.dsn, autocommit=True, connect_timeout=5) as conn:  # 2.
        row = conn.execute("SELECT pg_promote(true, %s)", (int(wait),)).fetchone()
    if not row or not row[0]:
        raise ServiceStartError("postgres", f"standby {label} was not promoted within {wait:g}s")
    local_pg_topology.record_promotion(state, target.server, target.layout.root.name)  # 3.
    followers = []
    for sibling in local_pg_standbys.known(state, target.server):  # 4.
        if local_pg.stop(sibling.layout, timeout=wait) is None:
            continue
        with psycopg.connect(process.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(
                "SELECT pg_create_physical_replication_slot(%s, true)"
                " WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = %s)",
                (sibling.slot, sibling.slot),
            )
        restarted = local_pg_standbys.launch(state, sibling, process, credentials)
        local_pg.wait_ready(sibling.layout, restarted, timeout=wait)
        followers.append(sibling.label)
    return Promotion(target.server, label, process, old.root, stopped, tuple(followers))


def advice(promotion: Promotion) -> str:
    """What to do with the old primary's folder, for the operator."""
    return (
        f"The old primary's data stays in {promotion.retired}; `up` never starts it again. "
        "It may hold the last commits the standby had not received (replication is "
        "asynchronous): tidegraph does not need them — the realms' positions rolled back "
        "with them, so the indexer applies those records again from Kafka, and the change "
        "feed never published them. Either make it a standby of the new primary "
        f"(`tidegraph pg rejoin {promotion.server}`: pg_rewind, then a standby), or "
        f"discard it (rm -r {promotion.retired})."
    )
