"""Belief time in SQL: what each write records, and how every read finds it again.

A read ``as_believed_at`` T must answer exactly what the same read answered at T (DESIGN
invariant 6). So the realm keeps, for every row a read reports from — relations, entities,
documents — the values it reported, per belief interval, in an append-only history table,
and a read at T reads the interval open at T instead of the row: the same columns, under
the same names (:func:`relations_at`, :func:`entities_at`). Every filter, join and ranking
written for the present rows then reads the past unchanged; nothing is recomputed from
provenance that may have changed since. Chunks, mentions and community builds carry their
belief interval on the row itself (``t_created``, ``t_expired``) and are never deleted.

The write rule is one for all three histories (:class:`History`): once a write has left its
rows final, each touched row whose reported values differ from its open interval closes
that interval at the write's instant and opens one with its present values; an interval
opened at this very instant is replaced instead (the history never holds an empty
interval); a row no longer believed (a retracted relation) only closes its interval.

What is not kept: vectors (a read at T ranks by similarity with today's embeddings) and the
rendered sentence of a relation, which its full-text channel matches (it changes only with
the relation's ends or stated period, which the history does keep).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, LiteralString

from psycopg import AsyncConnection, sql


def believed(alias: str) -> sql.Composed:
    """Row ``alias`` (with ``t_created``/``t_expired``) was believed at ``%(believed)s``."""
    a = sql.Identifier(alias)
    return sql.SQL(
        "{a}.t_created <= %(believed)s AND ({a}.t_expired IS NULL OR {a}.t_expired > %(believed)s)"
    ).format(a=a)


def live(alias: str) -> sql.Composed:
    """Row ``alias`` is believed now."""
    return sql.SQL("{}.t_expired IS NULL").format(sql.Identifier(alias))


def belief(alias: str, at: bool) -> sql.Composed:
    """:func:`believed` at ``%(believed)s`` when ``at``, else :func:`live`."""
    return believed(alias) if at else live(alias)


@dataclass(frozen=True)
class History:
    """A table's reported values, per belief interval, in its history table."""

    table: str
    """The history table."""
    keys: tuple[str, ...]
    """Columns naming the row (in the history and in :attr:`source`)."""
    values: tuple[str, ...]
    """The reported values."""
    source: LiteralString
    """SELECT of the believed rows touched (keys and values, under the history's column
    names), a template over the realm's tables in braces taking the write's parameters."""
    scope: LiteralString
    """Predicate on history rows ``h`` of the rows touched, taking the same parameters."""

    def statements(self) -> tuple[str, str, str]:
        """The three statements of the write rule (module docstring), taking the source's
        parameters and ``%(bt)s``: replace an interval opened at this instant, close one
        opened earlier, open the new ones."""
        same = (
            f"NOT EXISTS (SELECT 1 FROM ({self.source}) s WHERE {_row('s', self.keys)} ="
            f" {_row('h', self.keys)} AND {_row('s', self.values)} IS NOT DISTINCT FROM"
            f" {_row('h', self.values)})"
        )
        table = "{" + self.table + "}"
        columns = ", ".join((*self.keys, *self.values))
        return (
            f"DELETE FROM {table} h WHERE {self.scope} AND h.t_expired IS NULL"
            f" AND h.t_created = %(bt)s AND {same}",
            f"UPDATE {table} h SET t_expired = %(bt)s WHERE {self.scope}"
            f" AND h.t_expired IS NULL AND {same}",
            f"INSERT INTO {table} ({columns}, t_created)"
            f" SELECT {', '.join('s.' + c for c in (*self.keys, *self.values))}, %(bt)s"
            f" FROM ({self.source}) s WHERE NOT EXISTS (SELECT 1 FROM {table} h"
            f" WHERE {_row('h', self.keys)} = {_row('s', self.keys)} AND h.t_expired IS NULL)",
        )

    async def record(
        self, conn: AsyncConnection[Any], schema: str, params: Mapping[str, Any]
    ) -> None:
        """Run :meth:`statements` on ``conn`` for the realm ``schema`` (a write outside the
        indexer's write context: archival, unarchival)."""
        for statement in self.statements():
            names = {n for _, n, _, _ in string.Formatter().parse(statement) if n}
            tables = {n: sql.Identifier(schema, n) for n in names}
            await conn.execute(sql.SQL(statement).format(**tables), params)


def _row(alias: str, columns: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"{alias}.{c}" for c in columns) + ")"


RELATIONS = History(
    table="relation_history",
    keys=("relation_id",),
    values=(
        "state",
        "superseded_by",
        "superseded_via",
        "subject_id",
        "object_id",
        "weight",
        "order_key",
        "valid_from",
        "valid_to",
        "valid_from_d",
        "valid_to_d",
        "doc_keys",
        "expired",
    ),
    source=(
        "SELECT r.id AS relation_id, r.status AS state, r.superseded_by, r.superseded_via,"
        " r.subject_id, r.object_id, r.weight, r.order_key, r.valid_from, r.valid_to,"
        " r.valid_from_d, r.valid_to_d, r.doc_keys, r.t_expired AS expired"
        " FROM {relations} r WHERE r.id = ANY(%(ids)s) AND r.status <> 'retracted'"
    ),
    scope="h.relation_id = ANY(%(ids)s)",
)
"""A relation's belief state and everything a read reports of it: a retracted relation is
believed nowhere, so its interval closes."""

ENTITIES = History(
    table="entity_history",
    keys=("entity_id",),
    values=(
        "space",
        "name",
        "name_key",
        "type",
        "description",
        "aliases",
        "alias_keys",
        "dormant_since",
        "archived_since",
    ),
    source=(
        "SELECT e.id AS entity_id, e.space, e.name, e.name_key, e.type, e.description,"
        " e.aliases, ARRAY(SELECT a.alias_lower FROM {entity_aliases} a"
        "  WHERE a.entity_id = e.id ORDER BY 1) AS alias_keys,"
        " e.dormant_since, e.archived_since FROM {entities} e WHERE e.id = ANY(%(ids)s)"
    ),
    scope="h.entity_id = ANY(%(ids)s)",
)
"""An entity's names (and the keys lookups match), attributes, dormancy and archival."""

DOCUMENTS = History(
    table="document_history",
    keys=("space", "doc_key"),
    values=(
        "status",
        "content_hash",
        "source_version",
        "order_key",
        "title",
        "chunk_count",
        "indexed_at",
        "error",
    ),
    source=(
        "SELECT d.space, d.doc_key, d.status, d.content_hash, d.source_version, d.order_key,"
        " d.title, d.chunk_count, d.indexed_at, d.error FROM {documents} d"
        " WHERE d.space = %(space)s AND d.doc_key = %(doc_key)s"
    ),
    scope="h.space = %(space)s AND h.doc_key = %(doc_key)s",
)
"""The document version a realm holds, as its status route reports it."""


def relations_at(schema: str) -> sql.Composed:
    """The realm's relations as believed at ``%(believed)s``, with the present table's
    columns: those its history reports (state as ``status``), and the present row's for
    what never changes (predicate, birth) or is not kept (text, vector)."""
    return sql.SQL(
        "(SELECT r.id, r.space, h.subject_id, r.predicate, h.object_id, r.negated,"
        " r.description, r.confidence, h.valid_from, h.valid_to, h.valid_from_d,"
        " h.valid_to_d, h.weight, h.order_key, h.state AS status, h.superseded_by,"
        " h.superseded_via, r.t_created, h.expired AS t_expired, h.doc_keys, r.rendered,"
        " r.tsv, r.embedding FROM {rel} r JOIN {hist} h ON h.relation_id = r.id AND {b})"
    ).format(
        rel=sql.Identifier(schema, "relations"),
        hist=sql.Identifier(schema, "relation_history"),
        b=believed("h"),
    )


def entities_at(schema: str) -> sql.Composed:
    """The realm's entities as believed at ``%(believed)s``, with the present table's
    columns (and ``alias_keys``, what the alias table holds now). An entity merged into
    another and deleted since is there too, without a vector (nor a birth instant)."""
    return sql.SQL(
        "(SELECT h.entity_id AS id, h.space, h.name, h.name_key, h.type, h.description,"
        " h.aliases, h.alias_keys, e.embedding, h.dormant_since, h.archived_since,"
        " e.created_at FROM {hist} h LEFT JOIN {ent} e ON e.id = h.entity_id"
        " WHERE {b} AND h.space IS NOT NULL)"
    ).format(
        ent=sql.Identifier(schema, "entities"),
        hist=sql.Identifier(schema, "entity_history"),
        b=believed("h"),
    )


def relations_view(schema: str, at: bool) -> sql.Composable:
    """The relations a read reads: the table now, :func:`relations_at` at an instant."""
    return relations_at(schema) if at else sql.Identifier(schema, "relations")


def entities_view(schema: str, at: bool) -> sql.Composable:
    """The entities a read reads: the table now, :func:`entities_at` at an instant."""
    return entities_at(schema) if at else sql.Identifier(schema, "entities")
