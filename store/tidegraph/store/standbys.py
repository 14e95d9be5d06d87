"""What a reader asks a streaming standby before trusting it: how far a realm has got there,
and how far the standby's replay lags behind its primary.

A realm's head sequence lives in its own schema (the ``meta`` row every write transaction
advances), and a standby replays that row with everything else the commit wrote. So
"this standby has applied sequence S of realm R" is exactly "R's ``meta.seq`` read on the
standby is at least S": no clock, no LSN arithmetic, and it stays exact when several realms
share a server.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection, sql

_LAG = sql.SQL(
    "SELECT pg_is_in_recovery(),"
    " pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn(),"
    " EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE status = 'streaming'),"
    " extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8"
)


async def realm_head(conn: AsyncConnection[Any], schema: str) -> int:
    """The realm's latest commit sequence as this server sees it (0 before any write)."""
    cur = await conn.execute(sql.SQL("SELECT seq FROM {}.meta").format(sql.Identifier(schema)))
    row = await cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


async def replay_lag(conn: AsyncConnection[Any]) -> float | None:
    """Seconds the standby's replay is behind, ``None`` when it is not a standby (promoted,
    or a primary named by mistake: its data no longer follows the primary's).

    ``now() - pg_last_xact_replay_timestamp()`` alone grows without bound on an idle
    primary, so a standby streaming with everything received already replayed counts as
    0. A standby whose WAL receiver is not streaming cannot tell what it misses: it is
    measured by its last replayed commit, which errs towards not using it."""
    cur = await conn.execute(_LAG)
    row = await cur.fetchone()
    if row is None or not row[0]:
        return None
    _, replayed_all, streaming, since_last = row
    if replayed_all and streaming:
        return 0.0
    if since_last is None:
        return float("inf")
    return max(0.0, float(since_last))
