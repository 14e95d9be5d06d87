"""Which entities make up the live graph: one predicate for every read that asks.

An entity goes dormant when its last mention goes and is archived by retention; either way
retrieval, community builds and the coverage reads leave it out, and they must agree on
exactly that, so they compose this predicate instead of retyping it.
"""

from __future__ import annotations

from psycopg import sql


def alive(alias: str | None = None) -> sql.Composed:
    """Entity rows ``alias`` (unqualified when ``None``) neither dormant nor archived."""
    if alias is None:
        return sql.SQL("dormant_since IS NULL AND archived_since IS NULL").format()
    return sql.SQL("{e}.dormant_since IS NULL AND {e}.archived_since IS NULL").format(
        e=sql.Identifier(alias)
    )
