"""The mapping file: how each table's rows become documents — their text, or facts.

One format for every connector that reads rows (``connect postgres --facts``, ``connect
debezium --mapping``), one validator (:func:`load_row_mapping`). YAML, or JSON for a
``.json`` file; unknown keys, a missing ``key`` and references that do not resolve are
refused at start with the file, the field and the rule::

    tables:
      shop.articles:                 # table name as SQL resolves it (schema.table)
        key: id                      # doc_key = "shop.articles/<id>"
        content: body                # text mode: the row's text ...
        title: headline              # ... and its title
        order: published_on          # the order_key column (either mode)
      hr.people:                     # facts mode: the row is an entity ...
        key: id
        entity: {name: full_name, type: Person, description: bio}
      hr.employments:                # ... or about another table's entity
        key: id
        subject: {column: person_id, references: hr.people}
        relations:
          - {predicate: works_at, column: company_id, references: hr.companies,
             valid_from: started_on, valid_to: ended_on}

How facts are read from a row is :mod:`tidegraph.connectors.row_facts`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tidegraph.connectors.errors import SourceSetupError
from tidegraph.schemas import problems_from

__all__ = [
    "EntityColumns",
    "RelationColumns",
    "RowMapping",
    "SubjectReference",
    "TableMapping",
    "load_row_mapping",
]


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


class TableMapping(_Strict):
    """How one table's rows become documents: their text, or facts."""

    key: str = Field(description="Key column: the doc_key is '<table>/<key>'.")
    content: str | None = Field(None, description="Column holding the text (text mode).")
    title: str | None = Field(None, description="Column holding the title (text mode).")
    entity: EntityColumns | None = None
    subject: SubjectReference | None = None
    relations: list[RelationColumns] = Field(default_factory=list)
    order: str | None = Field(None, description="Column whose value is the order_key.")

    @model_validator(mode="after")
    def _one_kind(self) -> TableMapping:
        given = [k for k in ("content", "entity", "subject") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of content (the row's text), entity (the row is an entity) "
                "or subject (the row is about another table's entity)"
            )
        if self.content is not None and self.relations:
            raise ValueError("relations need an entity or a subject, not content")
        if self.title is not None and self.content is None:
            raise ValueError("title is for text (content); with facts the title is the subject")
        return self

    @property
    def is_text(self) -> bool:
        return self.content is not None

    @property
    def columns(self) -> list[str]:
        """Every column the facts read, the key first, each once."""
        found = [self.key, *(self.entity.columns if self.entity else [])]
        found += [c for c in (self.content, self.title) if c]
        if self.subject is not None:
            found.append(self.subject.column)
        for relation in self.relations:
            found += relation.columns
        if self.order:
            found.append(self.order)
        return list(dict.fromkeys(found))


class RowMapping(_Strict):
    """Every table the documents involve, by the name SQL resolves it by."""

    tables: dict[str, TableMapping] = Field(min_length=1)

    @model_validator(mode="after")
    def _references_resolve(self) -> RowMapping:
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

    def table(self, name: str) -> TableMapping:
        """The mapping of the captured table; a clear error when the file has none."""
        found = self.tables.get(name)
        if found is None:
            raise SourceSetupError(
                f"the mapping has no entry for table {name!r} (it maps "
                f"{', '.join(sorted(self.tables))})"
            )
        return found

    def facts_table(self, name: str) -> TableMapping:
        """:meth:`table`, which must map the rows to facts."""
        found = self.table(name)
        if found.is_text:
            raise SourceSetupError(
                f"the mapping gives table {name!r} as text (content: {found.content}), not facts"
            )
        return found

    @property
    def references(self) -> bool:
        """Whether any table's facts name rows of another table (which must be read)."""
        return any(
            t.subject is not None or any(r.references for r in t.relations)
            for t in self.tables.values()
        )


def load_row_mapping(path: Path) -> RowMapping:
    """Read and validate a mapping file; errors name the file, the field and the rule."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceSetupError(f"cannot read the mapping {path}: {exc.strerror}") from None
    try:
        data: Any = orjson.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise SourceSetupError(f"the mapping {path} is not valid {kind}: {exc}") from None
    try:
        return RowMapping.model_validate(data)
    except ValidationError as exc:
        detail = "; ".join(f"{p.field}: {p.rule}" for p in problems_from(exc))
        raise SourceSetupError(f"the mapping {path} is invalid: {detail}") from None
