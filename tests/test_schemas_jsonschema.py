"""The committed JSON Schema files: fresh, valid Draft 2020-12, and agreeing with the models."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from test_schemas_changes import change, changes  # type: ignore[import-not-found]
from test_schemas_documents import (  # type: ignore[import-not-found]
    FACTS,
    delete,
    documents,
    upsert,
)

from tidegraph.schemas.changes import GraphChange
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.errors import RecordValidationError
from tidegraph.schemas.jsonschema_export import JSON_DIR, generated_files, load, stale_files

DOCUMENT = Draft202012Validator(
    load("document.v1.json"), format_checker=Draft202012Validator.FORMAT_CHECKER
)
CHANGE = Draft202012Validator(
    load("change.v1.json"), format_checker=Draft202012Validator.FORMAT_CHECKER
)


def test_committed_files_are_fresh() -> None:
    stale = stale_files()
    assert not stale, (
        f"stale JSON Schema files {stale} in {JSON_DIR}: "
        "run `python -m tidegraph.schemas.jsonschema_export`"
    )


def test_files_live_inside_the_package() -> None:
    assert JSON_DIR.parent.name == "schemas" and JSON_DIR.parent.parent.name == "tidegraph"
    assert set(generated_files()) == {"document.v1.json", "change.v1.json"}


@pytest.mark.parametrize("name", ["document.v1.json", "change.v1.json"])
def test_files_are_valid_schemas(name: str) -> None:
    Draft202012Validator.check_schema(load(name))


def _model_accepts(model: type[DocumentVersion] | type[GraphChange], obj: dict[str, Any]) -> bool:
    try:
        model.from_json(orjson.dumps(obj))
    except RecordValidationError:
        return False
    return True


DOCUMENT_CASES = [
    upsert(),
    delete(),
    upsert(space=..., title=..., source=..., metadata=..., source_version=..., order_key=...),
    upsert(schema=...),
    upsert(schema="tidegraph.document.v2"),
    upsert(realm="Acme"),
    upsert(space="*"),
    upsert(space="a b"),
    upsert(doc_key=""),
    upsert(doc_key="k" * 1025),
    upsert(op="merge"),
    upsert(content=...),
    upsert(content_hash=...),
    upsert(content_hash="sha256:" + "A" * 64),
    upsert(op="delete"),
    delete(content="x"),
    upsert(event_time=...),
    upsert(event_time="2026-12-02T10:00:00"),
    upsert(event_time="yesterday"),
    upsert(source_version=42),
    upsert(metadata=[]),
    upsert(facts=FACTS),
    upsert(facts={}),
    upsert(facts={"entities": [{"name": "A", "aliases": "B"}]}),
    upsert(facts={"relations": [{"subject": "A", "predicate": "knows"}]}),
    upsert(facts=[]),
    delete(facts=FACTS),
]


@pytest.mark.parametrize("obj", DOCUMENT_CASES)
def test_document_schema_agrees_with_model(obj: dict[str, Any]) -> None:
    assert DOCUMENT.is_valid(obj) == _model_accepts(DocumentVersion, obj)


CHANGE_CASES = [
    change(),
    change(schema=...),
    change(kind="relation_added", superseded_by=...),
    change(kind="relation_added", relation=...),
    change(kind="entity_added", relation=..., superseded_by=...),
    change(kind="communities_built", relation=..., superseded_by=..., doc_key=...),
    change(kind="document_failed", relation=..., superseded_by=..., error="no valid chunk"),
    change(kind="document_failed", relation=..., superseded_by=..., doc_key=...),
    change(kind="nope"),
    change(space="*"),
    change(seq=-1),
    change(belief_time="2026-12-02T10:00:01"),
]


@pytest.mark.parametrize("obj", CHANGE_CASES)
def test_change_schema_agrees_with_model(obj: dict[str, Any]) -> None:
    # The schema cannot see that `id` starts with realm:seq; every case here keeps that true.
    assert CHANGE.is_valid(obj) == _model_accepts(GraphChange, obj)


@settings(max_examples=50)
@given(documents())
def test_generated_documents_validate(doc: DocumentVersion) -> None:
    DOCUMENT.validate(orjson.loads(doc.to_json()))


@settings(max_examples=50)
@given(changes())
def test_generated_changes_validate(c: GraphChange) -> None:
    CHANGE.validate(orjson.loads(c.to_json()))
