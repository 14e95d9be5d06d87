"""The advisory lock that serialises changes to one realm schema's layout.

Creating a realm (or its shadow), upgrading an older layout and swapping a rebuilt schema
in all take it, so none of them sees another half done.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection


async def lock_realm_schema(conn: AsyncConnection[Any], schema: str) -> None:
    """Hold the schema's layout lock until the current transaction ends."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("tidegraph:realm:" + schema,))


def replay_lock_key(realm: str) -> str:
    """The advisory lock a swapping replay of ``realm`` holds for its whole run (session
    level); deleting the realm meanwhile is refused."""
    return "tidegraph:replay:" + realm


def switch_lock_key(realm: str) -> str:
    """The advisory lock a move holds, exclusively, on the source server while it switches
    ``realm`` over; what the query service writes into the realm (coverage telemetry)
    takes it shared first, so a row either commits before the switch (and is carried) or
    sees the fence after it (and is written where the realm went)."""
    return "tidegraph:switch:" + realm
