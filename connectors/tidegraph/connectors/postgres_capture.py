"""What the PostgreSQL connector captures, and how a row or a row change becomes a document.

``source_version`` is the commit LSN (20 digits) followed by the change's position in its
transaction (10 digits): versions order as integers and as strings, a later commit always
wins, and snapshot rows (the slot's consistent point, position 0) sort below every change
streamed after them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from tidegraph.connectors import pgoutput
from tidegraph.connectors.errors import SourceSetupError
from tidegraph.connectors.row_facts import RowFacts, SqlReferences
from tidegraph.connectors.row_mapping import RowMapping
from tidegraph.schemas import DEFAULT_SPACE, DocumentVersion, RecordValidationError

SOURCE = "postgres"
_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")

Conn = psycopg.AsyncConnection[tuple[Any, ...]]
Change = pgoutput.Insert | pgoutput.Update | pgoutput.Delete


def source_version(lsn: int, position: int) -> str:
    """Commit LSN and position in the transaction, fixed width: orders as int and as str."""
    return f"{lsn:020d}{position:010d}"


def default_slot_name(realm: str, table: str) -> str:
    """``tidegraph_<realm>_<table>``, folded to what slot names allow (a-z, 0-9, _)."""
    return re.sub(r"[^a-z0-9_]", "_", f"tidegraph_{realm}_{table}".lower())[:63]


@dataclass(frozen=True)
class CaptureSpec:
    """Which table to capture and how its columns map onto a document: its text
    (``content_column``), or facts (``facts``, see ``row_facts``), never both."""

    table: str
    """Table name as SQL would resolve it (``orders`` or ``sales.orders``)."""
    key_column: str
    """Its value is the ``doc_key`` (``<table>/<key>`` with facts); must be part of the
    replica identity."""
    realm: str
    content_column: str | None = None
    """Column holding the text; required unless ``facts`` is given."""
    facts: RowMapping | None = None
    """Mapping of rows to facts; the text is then their rendered passage."""
    title_column: str | None = None
    order_column: str | None = None
    """Its text value becomes ``order_key``."""
    space: str = DEFAULT_SPACE
    slot: str | None = None
    """Replication slot (and publication) name; derived from realm and table when absent."""

    def __post_init__(self) -> None:
        if (self.content_column is None) == (self.facts is None):
            raise SourceSetupError("capture a table's text (a content column) or facts, not both")
        if self.facts is not None:
            key = self.facts.facts_table(self.table).key
            if key != self.key_column:
                raise SourceSetupError(
                    f"the facts mapping keys {self.table} by {key!r}, not {self.key_column!r}"
                )
            if self.title_column or self.order_column:
                raise SourceSetupError(
                    "with facts, the title is the row's subject and the order column comes "
                    "from the mapping (order:)"
                )

    @property
    def slot_name(self) -> str:
        name = self.slot or default_slot_name(self.realm, self.table)
        if not _SLOT_NAME.fullmatch(name):
            raise SourceSetupError(f"slot name {name!r} must match {_SLOT_NAME.pattern}")
        return name

    @property
    def value_columns(self) -> tuple[str | None, str | None, str | None]:
        """Content, title and order columns, in the order rows are read."""
        return (self.content_column, self.title_column, self.order_column)


@dataclass(frozen=True)
class Table:
    """The captured table as the catalog names it."""

    oid: int
    schema: str
    name: str

    @property
    def ident(self) -> sql.Composable:
        return sql.Identifier(self.schema, self.name)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


def _as_text(column: str | None) -> sql.Composable:
    if column is None:
        return sql.SQL("NULL::text")
    return sql.SQL("{}::text").format(sql.Identifier(column))


class RowMapper:
    """Turns rows (initial load) and ``pgoutput`` changes (stream) into document versions.

    Rows that cannot become a valid document (NULL key, key longer than the contract
    allows) are handed to ``on_refuse`` with the reason and skipped.
    """

    def __init__(
        self, spec: CaptureSpec, table: Table, on_refuse: Callable[[str | None, str], None]
    ) -> None:
        self.spec = spec
        self.table = table
        self.on_refuse = on_refuse
        self._metadata = {"table": table.qualified}
        self.facts = RowFacts(spec.facts, spec.table) if spec.facts is not None else None
        self.value_columns: tuple[str | None, ...] = (
            self.facts.columns if self.facts is not None else spec.value_columns
        )
        """The columns read after the key: content, title and order, or the facts'."""

    def select_all(self) -> sql.Composed:
        """Key and value columns of every row, as text."""
        columns = [_as_text(self.spec.key_column), *(_as_text(c) for c in self.value_columns)]
        return sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(columns), self.table.ident)

    async def from_row(
        self, conn: Conn, row: tuple[Any, ...], version: str, event_time: datetime
    ) -> DocumentVersion | None:
        """The upsert a row read by :meth:`select_all` stands for."""
        return await self.row_document(conn, row[0], tuple(row[1:]), version, event_time)

    async def row_document(
        self,
        conn: Conn,
        key: object,
        values: tuple[object, ...],
        version: str,
        event_time: datetime,
    ) -> DocumentVersion | None:
        """The upsert of a row's key and value columns; ``conn`` reads referenced rows."""
        if self.facts is None:
            return self.upsert(key, (values[0], values[1], values[2]), version, event_time)
        if key is None:
            self.on_refuse(None, "row with a NULL key column")
            return None
        try:
            return await self.facts.document(
                SqlReferences(self.facts.mapping, conn),
                self.spec.realm,
                key,
                dict(zip(self.facts.columns, values, strict=True)),
                space=self.spec.space,
                source=SOURCE,
                source_version=version,
                metadata=self._metadata,
                event_time=event_time,
            )
        except RecordValidationError as exc:
            self.on_refuse(str(key), str(exc))
            return None

    def upsert(
        self,
        key: object,
        values: tuple[object, object, object],
        version: str,
        event_time: datetime,
    ) -> DocumentVersion | None:
        """An upsert from key and (content, title, order); NULL content is empty text."""
        if key is None:
            self.on_refuse(None, "row with a NULL key column")
            return None
        content, title, order = values
        fields: dict[str, object] = {
            "space": self.spec.space,
            "source": SOURCE,
            "source_version": version,
            "metadata": self._metadata,
        }
        if title is not None:
            fields["title"] = str(title)
        if order is not None:
            fields["order_key"] = str(order)
        try:
            return DocumentVersion.for_upsert(
                self.spec.realm,
                str(key),
                "" if content is None else str(content),
                event_time=event_time,
                **fields,
            )
        except RecordValidationError as exc:
            self.on_refuse(str(key), str(exc))
            return None

    def delete(self, key: object, version: str, event_time: datetime) -> DocumentVersion | None:
        if key is None:
            self.on_refuse(None, "deleted row without its key column")
            return None
        try:
            return DocumentVersion.for_delete(
                self.spec.realm,
                self.facts.doc_key(key) if self.facts is not None else str(key),
                space=self.spec.space,
                source=SOURCE,
                source_version=version,
                event_time=event_time,
            )
        except RecordValidationError as exc:
            self.on_refuse(str(key), str(exc))
            return None

    async def documents(
        self,
        conn: Conn,
        change: Change,
        relation: pgoutput.Relation,
        begin: pgoutput.Begin,
        position: int,
    ) -> list[DocumentVersion]:
        """The versions one row change stands for (a key change is a delete and an upsert).

        ``position`` numbers the change inside its transaction; versions use ``position + 1``
        and, for a key change, ``position + 2``.
        """
        index = {c.name: i for i, c in enumerate(relation.columns)}
        key_at = index[self.spec.key_column]
        version = source_version(begin.final_lsn, position + 1)
        when = begin.commit_time
        if isinstance(change, pgoutput.Delete):
            gone = self.delete(change.old[key_at], version, when)
            return [gone] if gone is not None else []
        out: list[DocumentVersion] = []
        new = change.new
        if isinstance(change, pgoutput.Update) and change.old is not None:
            old_key = change.old[key_at]
            if old_key is not None and old_key != new[key_at]:
                gone = self.delete(old_key, version, when)
                if gone is not None:
                    out.append(gone)
                version = source_version(begin.final_lsn, position + 2)
        values: tuple[object, ...] = tuple(
            None if c is None else new[index[c]] for c in self.value_columns
        )
        if any(v is pgoutput.UNCHANGED_TOAST for v in values):
            current = await self.current_values(conn, new[key_at])
            if current is None:
                return out  # deleted since; its delete follows in the stream
            values = tuple(
                current[i] if v is pgoutput.UNCHANGED_TOAST else v for i, v in enumerate(values)
            )
        doc = await self.row_document(conn, new[key_at], values, version, when)
        if doc is not None:
            out.append(doc)
        return out

    async def current_values(self, conn: Conn, key: object) -> tuple[object, ...] | None:
        """The value columns of a row now: for TOASTed values an UPDATE left out."""
        query = sql.SQL("SELECT {} FROM {} WHERE {} = %s").format(
            sql.SQL(", ").join(_as_text(c) for c in self.value_columns),
            self.table.ident,
            sql.Identifier(self.spec.key_column),
        )
        return await (await conn.execute(query, (key,))).fetchone()
