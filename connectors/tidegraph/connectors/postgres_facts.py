"""Rows as facts: a mapping file turns a table's rows into entities and relations.

``tidegraph connect postgres --table T --facts MAPPING`` publishes each row of ``T`` as a
document version whose ``facts`` the mapping derives from its columns, deterministically;
the row's text is their rendered passage. Updates and deletes of rows then update the graph
exactly like document versions do (a changed row replaces what it taught, a deleted row
retracts it). The mapping (YAML, or JSON for a ``.json`` file) names every table the facts
involve, so a foreign key can become an edge to the referenced row's entity::

    tables:
      people:                      # table name as SQL resolves it
        key: id                    # doc_key = "people/<id>"
        entity: {name: full_name, type: Person, description: bio}
      companies:
        key: id
        entity: {name: name, type: Company}
      employments:
        key: id
        subject: {column: person_id, references: people}
        relations:
          - predicate: works_at
            column: company_id
            references: companies   # the referenced row's entity (its mapping's name, type)
            valid_from: started_on
            valid_to: ended_on

A ``references`` column must hold the referenced table's key values (as a foreign key
does): the lookup reads them as the key's type, using its index.

A row is either an entity itself (``entity``: the columns of its name, type or
``type_column``, ``description`` and ``aliases``) or about another table's entity
(``subject``: a foreign key column and the table it references). Each relation takes its
object from ``column``: a foreign key when ``references`` names a table of the mapping,
else the entity name itself (typed ``object_type``). NULL columns state nothing: a relation
whose object or subject is NULL, or whose referenced row does not exist, is left out.

Referenced rows are read when the row is captured (in the initial load's snapshot, then
as they stand when the change is streamed): a renamed company reaches the documents of
the rows referencing it when those rows next change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import psycopg
import yaml
from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tidegraph.connectors.errors import SourceSetupError
from tidegraph.schemas import problems_from
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.extraction import CandidateEntity, CandidateRelation, ExtractionOutput

__all__ = ["FactsMapping", "FactsTable", "RowFacts", "load_facts_mapping"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EntityColumns(_Strict):
    """The row is an entity: where its name, type, description and aliases are."""

    name: str = Field(description="Column holding the entity's name.")
    type: str | None = Field(None, description="The entity type, the same for every row.")
    type_column: str | None = Field(None, description="Column holding the entity type.")
    description: str | None = Field(None, description="Column holding a description.")
    aliases: list[str] = Field(default_factory=list, description="Columns holding aliases.")

    @model_validator(mode="after")
    def _one_type(self) -> EntityColumns:
        if self.type is not None and self.type_column is not None:
            raise ValueError("give either type or type_column, not both")
        return self

    @property
    def columns(self) -> list[str]:
        found = [self.name, self.type_column, self.description, *self.aliases]
        return [c for c in found if c]


class SubjectReference(_Strict):
    """The row is about another table's entity, named by a foreign key."""

    column: str = Field(description="Foreign key column.")
    references: str = Field(description="The referenced table, as the mapping names it.")


class RelationColumns(_Strict):
    """One relation each row states, from the row's subject to an object."""

    predicate: str = Field(min_length=1, description="The relation's predicate.")
    column: str = Field(description="Foreign key of the object, or the object's name.")
    references: str | None = Field(None, description="Table the foreign key references.")
    object_type: str | None = Field(
        None, description="Type of an object named by the column itself (default Concept)."
    )
    valid_from: str | None = Field(None, description="Column holding the start of validity.")
    valid_to: str | None = Field(None, description="Column holding the end of validity.")
    negated: bool = Field(False, description="The rows deny the relation.")

    @model_validator(mode="after")
    def _typed_once(self) -> RelationColumns:
        if self.references is not None and self.object_type is not None:
            raise ValueError("a referenced object takes its type from its table: drop object_type")
        return self

    @property
    def columns(self) -> list[str]:
        return [c for c in (self.column, self.valid_from, self.valid_to) if c]


class FactsTable(_Strict):
    """How one table's rows become facts."""

    key: str = Field(description="Key column: the doc_key is '<table>/<key>'.")
    entity: EntityColumns | None = None
    subject: SubjectReference | None = None
    relations: list[RelationColumns] = Field(default_factory=list)
    order: str | None = Field(None, description="Column whose value is the order_key.")

    @model_validator(mode="after")
    def _one_subject(self) -> FactsTable:
        if (self.entity is None) == (self.subject is None):
            raise ValueError("give exactly one of entity (the row is an entity) or subject")
        return self

    @property
    def columns(self) -> list[str]:
        """Every column the facts read, the key first, each once."""
        found = [self.key, *(self.entity.columns if self.entity else [])]
        if self.subject is not None:
            found.append(self.subject.column)
        for relation in self.relations:
            found += relation.columns
        if self.order:
            found.append(self.order)
        return list(dict.fromkeys(found))


class FactsMapping(_Strict):
    """Every table the facts involve, by the name SQL resolves it by."""

    tables: dict[str, FactsTable] = Field(min_length=1)

    @model_validator(mode="after")
    def _references_resolve(self) -> FactsMapping:
        for name, table in self.tables.items():
            refs = [(f"tables.{name}.subject", table.subject.references)] if table.subject else []
            refs += [
                (f"tables.{name}.relations.{i}", r.references)
                for i, r in enumerate(table.relations)
                if r.references is not None
            ]
            for where, ref in refs:
                target = self.tables.get(ref)
                if target is None:
                    raise ValueError(f"{where}: references {ref!r}, which is not in tables")
                if target.entity is None:
                    raise ValueError(
                        f"{where}: references {ref!r}, whose rows are not entities (no entity)"
                    )
        return self

    def table(self, name: str) -> FactsTable:
        """The mapping of the captured table; a clear error when the file has none."""
        found = self.tables.get(name)
        if found is None:
            raise SourceSetupError(
                f"the facts mapping has no entry for table {name!r} (it maps "
                f"{', '.join(sorted(self.tables))})"
            )
        return found


def load_facts_mapping(path: Path) -> FactsMapping:
    """Read and validate a mapping file; errors name the file, the field and the rule."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceSetupError(f"cannot read the facts mapping {path}: {exc.strerror}") from None
    try:
        data: Any = orjson.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise SourceSetupError(f"the facts mapping {path} is not valid {kind}: {exc}") from None
    try:
        return FactsMapping.model_validate(data)
    except ValidationError as exc:
        detail = "; ".join(f"{p.field}: {p.rule}" for p in problems_from(exc))
        raise SourceSetupError(f"the facts mapping {path} is invalid: {detail}") from None


def _ident(table: str) -> sql.Identifier:
    return sql.Identifier(*table.split("."))


class RowFacts:
    """One table's rows → document versions carrying facts, per its mapping."""

    def __init__(self, mapping: FactsMapping, table: str) -> None:
        self.mapping = mapping
        self.name = table
        self.spec = mapping.table(table)
        self.columns: tuple[str, ...] = tuple(self.spec.columns[1:])
        """Value columns, in the order rows are read (the key column comes before them)."""

    def doc_key(self, key: object) -> str:
        return f"{self.name}/{key}"

    async def _entity_of(self, conn: Any, table: str, key: str) -> tuple[str, str] | None:
        """Name and type of the entity of ``table``'s row keyed ``key``, when it exists."""
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
            row = await (await conn.execute(query, (key,))).fetchone()
        except psycopg.DataError as exc:
            raise SourceSetupError(
                f"{key!r} cannot be a key of {table} ({str(exc).splitlines()[0]}): a column the"
                " facts mapping says references a table must hold its key values"
            ) from None
        if row is None or row[0] is None:
            return None
        return str(row[0]), str(row[1] or spec.entity.type or "Concept")

    async def facts(self, conn: Any, values: dict[str, Any]) -> tuple[ExtractionOutput, str | None]:
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
                await self._entity_of(conn, self.spec.subject.references, str(ref))
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
                target = await self._entity_of(conn, rel.references, str(value))
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
        conn: Any,
        realm: str,
        key: object,
        values: dict[str, Any],
        **fields: Any,
    ) -> DocumentVersion:
        """The upsert a row stands for; raises ``RecordValidationError`` when it cannot be
        one (a key longer than the contract allows)."""
        facts, subject = await self.facts(conn, values)
        if subject is not None:
            fields.setdefault("title", subject)
        order = values.get(self.spec.order) if self.spec.order else None
        if order is not None:
            fields["order_key"] = str(order)
        return DocumentVersion.for_facts(realm, self.doc_key(key), facts, **fields)


def _text(value: object) -> str | None:
    return None if value is None else str(value)
