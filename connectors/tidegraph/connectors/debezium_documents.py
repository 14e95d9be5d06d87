"""A Debezium row event → the document versions the mapping says it stands for.

Every table the events name must be in the mapping (:mod:`row_mapping`, the same file as the
PostgreSQL connector's ``--facts``); an event of another table is passed over and counted.
The doc_key is ``<table>/<primary key>`` taken from the event key, so all tables of a realm
share it without collisions; the mapping's ``key`` must be the primary key, whole
(composite keys are refused). Snapshot reads, creates and updates are upserts of the row
after the change, deletes are deletes; ``source_version`` is the event's source position,
``event_time`` its commit time.
"""

from __future__ import annotations

from typing import Any

from tidegraph.connectors.debezium_events import Cell, EventError, RowEvent
from tidegraph.connectors.row_facts import References, RowFacts
from tidegraph.connectors.row_mapping import RowMapping, TableMapping
from tidegraph.schemas import DEFAULT_SPACE, DocumentVersion, RecordValidationError

__all__ = ["SOURCE", "EventMapper"]

SOURCE = "debezium"
"""The ``source`` field of every document this connector publishes."""


class _NoReferences:
    """For mappings whose facts name no other table: nothing is ever looked up."""

    async def entity_of(self, table: str, key: str) -> tuple[str, str] | None:
        raise AssertionError(f"no lookup configured for {table}/{key}")


class EventMapper:
    """Turns row events into document versions of one realm and space."""

    def __init__(
        self,
        mapping: RowMapping,
        realm: str,
        *,
        space: str = DEFAULT_SPACE,
        references: References | None = None,
    ) -> None:
        self.mapping = mapping
        self.realm = realm
        self.space = space
        self.references: References = references or _NoReferences()
        self._facts = {
            name: RowFacts(mapping, name) for name, t in mapping.tables.items() if not t.is_text
        }

    def maps(self, table: str) -> bool:
        return table in self.mapping.tables

    def doc_key(self, table: str, key: dict[str, Cell]) -> str:
        """``<table>/<key>``; raises :class:`EventError` unless the key is the mapping's."""
        column = self.mapping.tables[table].key
        if set(key) != {column}:
            raise EventError(
                f"the primary key of {table} is ({', '.join(key)}), but the mapping keys it by "
                f"{column!r}: the mapping's key must be the whole primary key (composite keys "
                "are not supported)",
                "unmappable",
            )
        value = key[column]
        if value is None:
            raise EventError(f"the key {column!r} of {table} is null", "unmappable")
        return f"{table}/{value}"

    def _fields(self, event: RowEvent) -> dict[str, Any]:
        return {
            "space": self.space,
            "source": SOURCE,
            "source_version": event.version,
            "event_time": event.event_time,
            "metadata": {"table": event.table},
        }

    async def documents(self, event: RowEvent) -> list[DocumentVersion]:
        """The version the event stands for; :class:`EventError` when it cannot be one."""
        doc_key = self.doc_key(event.table, event.key)
        try:
            if event.row is None:
                fields = self._fields(event)
                del fields["metadata"]
                return [DocumentVersion.for_delete(self.realm, doc_key, **fields)]
            spec = self.mapping.tables[event.table]
            if spec.is_text:
                return [self._text(event, spec, doc_key, event.row)]
            return [await self._facts_document(event, spec, event.row)]
        except RecordValidationError as exc:
            raise EventError(str(exc), "unmappable") from None

    def _text(
        self, event: RowEvent, spec: TableMapping, doc_key: str, row: dict[str, Cell]
    ) -> DocumentVersion:
        self._require(event, spec.columns)
        assert spec.content is not None
        fields = self._fields(event)
        title = row.get(spec.title) if spec.title else None
        if title is not None:
            fields["title"] = title
        order = row.get(spec.order) if spec.order else None
        if order is not None:
            fields["order_key"] = order
        return DocumentVersion.for_upsert(
            self.realm, doc_key, row.get(spec.content) or "", **fields
        )

    async def _facts_document(
        self, event: RowEvent, spec: TableMapping, row: dict[str, Cell]
    ) -> DocumentVersion:
        self._require(event, spec.columns)
        dated = [c for r in spec.relations for c in (r.valid_from, r.valid_to) if c]
        vague = sorted(c for c in dated if c in event.untyped)
        if vague:
            raise EventError(
                f"validity column(s) {', '.join(vague)} of {event.table} arrived as bare "
                "numbers without a schema (a date is a number of days then): enable "
                "value.converter.schemas.enable on the Debezium connector",
                "unmappable",
            )
        facts = self._facts[event.table]
        key = event.key[spec.key]
        values = {c: row.get(c) for c in facts.columns}
        return await facts.document(self.references, self.realm, key, values, **self._fields(event))

    @staticmethod
    def _require(event: RowEvent, columns: list[str]) -> None:
        assert event.row is not None
        missing = [c for c in columns if c not in event.row and c not in event.key]
        if missing:
            raise EventError(
                f"{event.table} has no column {', '.join(missing)} that the mapping names",
                "unmappable",
            )
