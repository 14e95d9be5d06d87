"""Rows as facts: a table's row → the entities and relations its mapping derives.

``connect postgres --facts MAPPING`` and ``connect debezium --mapping MAPPING`` publish each
row of a facts-mapped table (:mod:`tidegraph.connectors.row_mapping`) as a document version
whose ``facts`` are derived from its columns, deterministically; the row's text is their
rendered passage. Updates and deletes of rows then update the graph exactly like document
versions do (a changed row replaces what it taught, a deleted row retracts it).

A row is either an entity itself (``entity``: the columns of its name, type or
``type_column``, ``description`` and ``aliases``) or about another table's entity
(``subject``: a foreign key column and the table it references). Each relation takes its
object from ``column``: a foreign key when ``references`` names a table of the mapping,
else the entity name itself (typed ``object_type``). NULL columns state nothing: a relation
whose object or subject is NULL, or whose referenced row does not exist, is left out.

A referenced row is read through :class:`References` when the referencing row is captured
(:class:`SqlReferences` reads the source database: in the PostgreSQL connector's initial
load under its snapshot, then as rows stand when a change is handled), so a renamed company
reaches the documents of the rows referencing it when those rows next change. A
``references`` column must hold the referenced table's key values (as a foreign key does):
the lookup reads them as the key's type, using its index.
"""

from __future__ import annotations

from typing import Any, Protocol

import psycopg
from psycopg import sql

from tidegraph.connectors.errors import SourceSetupError
from tidegraph.connectors.row_mapping import RowMapping
from tidegraph.schemas import CandidateEntity, CandidateRelation, DocumentVersion, ExtractionOutput

__all__ = ["References", "RowFacts", "SqlReferences"]


def _ident(table: str) -> sql.Identifier:
    return sql.Identifier(*table.split("."))


class References(Protocol):
    """Where the entity of a referenced row is found."""

    async def entity_of(self, table: str, key: str) -> tuple[str, str] | None:
        """Name and type of the entity of ``table``'s row keyed ``key``, when it exists."""
        ...


class SqlReferences:
    """Referenced rows read with SQL on a connection to the source database."""

    def __init__(self, mapping: RowMapping, conn: Any) -> None:
        self.mapping = mapping
        self.conn = conn

    async def entity_of(self, table: str, key: str) -> tuple[str, str] | None:
        spec = self.mapping.tables[table]
        assert spec.entity is not None  # checked when the mapping was loaded
        type_column = (
            sql.SQL("{}::text").format(sql.Identifier(spec.entity.type_column))
            if spec.entity.type_column
            else sql.SQL("NULL::text")
        )
        # The key travels untyped, so the server reads it as the key column's type and the
        # lookup uses the key's index.
        query = sql.SQL("SELECT {}::text, {} FROM {} WHERE {} = %s").format(
            sql.Identifier(spec.entity.name), type_column, _ident(table), sql.Identifier(spec.key)
        )
        try:
            row = await (await self.conn.execute(query, (key,))).fetchone()
        except psycopg.DataError as exc:
            raise SourceSetupError(
                f"{key!r} cannot be a key of {table} ({str(exc).splitlines()[0]}): a column the"
                " facts mapping says references a table must hold its key values"
            ) from None
        if row is None or row[0] is None:
            return None
        return str(row[0]), str(row[1] or spec.entity.type or "Concept")


class RowFacts:
    """One table's rows → document versions carrying facts, per its mapping."""

    def __init__(self, mapping: RowMapping, table: str) -> None:
        self.mapping = mapping
        self.name = table
        self.spec = mapping.facts_table(table)
        self.columns: tuple[str, ...] = tuple(self.spec.columns[1:])
        """Value columns, in the order rows are read (the key column comes before them)."""

    def doc_key(self, key: object) -> str:
        return f"{self.name}/{key}"

    async def facts(
        self, refs: References, values: dict[str, Any]
    ) -> tuple[ExtractionOutput, str | None]:
        """The facts one row states (``values``: column → text or None), and its subject."""
        entities: list[CandidateEntity] = []
        subject: str | None = None
        own = self.spec.entity
        if own is not None:
            name = values.get(own.name)
            if name is not None:
                subject = str(name)
                kind = values.get(own.type_column) if own.type_column else own.type
                entities.append(
                    CandidateEntity(
                        name=subject,
                        type=str(kind or "Concept"),
                        description=str(values.get(own.description) or "")
                        if own.description
                        else "",
                        aliases=[str(values[a]) for a in own.aliases if values.get(a) is not None],
                    )
                )
        elif self.spec.subject is not None:
            ref = values.get(self.spec.subject.column)
            found = (
                await refs.entity_of(self.spec.subject.references, str(ref))
                if ref is not None
                else None
            )
            if found is not None:
                subject = found[0]
                entities.append(CandidateEntity(name=found[0], type=found[1]))
        relations: list[CandidateRelation] = []
        for rel in self.spec.relations:
            value = values.get(rel.column)
            if subject is None or value is None:
                continue
            if rel.references is not None:
                target = await refs.entity_of(rel.references, str(value))
                if target is None:
                    continue
                obj, obj_type = target
            else:
                obj, obj_type = str(value), rel.object_type or "Concept"
            if all(e.name != obj for e in entities):
                entities.append(CandidateEntity(name=obj, type=obj_type))
            relations.append(
                CandidateRelation(
                    subject=subject,
                    predicate=rel.predicate,
                    object=obj,
                    negated=rel.negated,
                    valid_from=_text(values.get(rel.valid_from)) if rel.valid_from else None,
                    valid_to=_text(values.get(rel.valid_to)) if rel.valid_to else None,
                )
            )
        return ExtractionOutput(entities=entities, relations=relations), subject

    async def document(
        self,
        refs: References,
        realm: str,
        key: object,
        values: dict[str, Any],
        **fields: Any,
    ) -> DocumentVersion:
        """The upsert a row stands for; raises ``RecordValidationError`` when it cannot be
        one (a key longer than the contract allows)."""
        facts, subject = await self.facts(refs, values)
        if subject is not None:
            fields.setdefault("title", subject)
        order = values.get(self.spec.order) if self.spec.order else None
        if order is not None:
            fields["order_key"] = str(order)
        return DocumentVersion.for_facts(realm, self.doc_key(key), facts, **fields)


def _text(value: object) -> str | None:
    return None if value is None else str(value)
