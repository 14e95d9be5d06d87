"""DocumentVersion v1: every contract rule accepted and rejected, and JSON round trips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.schemas.documents import (
    DOCUMENT_SCHEMA,
    DocumentVersion,
    compare_source_versions,
)
from tidegraph.schemas.errors import ContractError, RecordValidationError
from tidegraph.schemas.extraction import CandidateEntity, CandidateRelation, ExtractionOutput
from tidegraph.schemas.hashing import content_hash

HELLO_HASH = "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
FACTS: dict[str, Any] = {
    "entities": [
        {"name": "Ada Quill", "type": "Person", "description": "Engineer", "aliases": ["Ada"]},
        {"name": "Wrenfield", "type": "Company"},
    ],
    "relations": [
        {"subject": "Ada Quill", "predicate": "works_at", "object": "Wrenfield",
         "valid_from": "2019-03-01", "valid_to": None, "negated": False},
    ],
}  # fmt: skip


def upsert(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema": DOCUMENT_SCHEMA,
        "realm": "acme",
        "space": "default",
        "doc_key": "docs/handbook/onboarding.md",
        "op": "upsert",
        "content": "hello",
        "content_hash": HELLO_HASH,
        "title": "Onboarding",
        "source": "fs",
        "metadata": {"category": "hr"},
        "source_version": "000000000042",
        "order_key": "2024-06-30",
        "event_time": "2026-12-02T10:00:00Z",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not ...}


def delete(**overrides: Any) -> dict[str, Any]:
    return upsert(**{"op": "delete", "content": ..., "content_hash": ..., **overrides})


def problems(obj: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(RecordValidationError) as info:
        DocumentVersion.from_json(orjson.dumps(obj))
    return {p.field: p.rule for p in info.value.problems}


def test_contract_example_parses() -> None:
    doc = DocumentVersion.from_json(orjson.dumps(upsert()))
    assert doc.realm == "acme" and doc.op == "upsert" and doc.metadata == {"category": "hr"}
    assert doc.event_time == datetime(2026, 12, 2, 10, tzinfo=UTC)
    assert doc.hash_matches()


def test_content_hash_is_sha256_of_utf8() -> None:
    assert content_hash("hello") == HELLO_HASH
    assert content_hash("é") == "sha256:" + __import__("hashlib").sha256(b"\xc3\xa9").hexdigest()


@pytest.mark.parametrize("realm", ["a", "acme", "a_1", "z" + "9" * 39])
def test_realm_accepted(realm: str) -> None:
    assert DocumentVersion.from_dict(upsert(realm=realm)).realm == realm


@pytest.mark.parametrize("realm", ["", "Acme", "1acme", "_a", "a-b", "a" * 41, "acme\n", "é"])
def test_realm_rejected_with_rule(realm: str) -> None:
    assert "pattern" in problems(upsert(realm=realm))["realm"]


@pytest.mark.parametrize("space", ["default", "A.b-c_9", "x" * 64])
def test_space_accepted(space: str) -> None:
    assert DocumentVersion.from_dict(upsert(space=space)).space == space


@pytest.mark.parametrize("space", ["", "a b", "x" * 65, "a/b"])
def test_space_rejected(space: str) -> None:
    assert "pattern" in problems(upsert(space=space))["space"]


def test_space_wildcard_rejected_with_reason() -> None:
    assert "wildcard" in problems(upsert(space="*"))["space"]


def test_space_defaults_to_default() -> None:
    assert DocumentVersion.from_dict(upsert(space=...)).space == "default"


@pytest.mark.parametrize("length", [1, 1024])
def test_doc_key_length_accepted(length: int) -> None:
    assert len(DocumentVersion.from_dict(upsert(doc_key="k" * length)).doc_key) == length


@pytest.mark.parametrize("length", [0, 1025])
def test_doc_key_length_rejected(length: int) -> None:
    assert "doc_key" in problems(upsert(doc_key="k" * length))


def test_schema_id_required_on_the_wire() -> None:
    assert "required" in problems(upsert(schema=...))["schema"]


def test_schema_id_must_be_v1() -> None:
    assert "tidegraph.document.v1" in problems(upsert(schema="tidegraph.document.v2"))["schema"]


def test_op_must_be_upsert_or_delete() -> None:
    assert "op" in problems(upsert(op="merge"))


def test_upsert_needs_content_and_hash() -> None:
    found = problems(upsert(content=..., content_hash=...))
    assert found["content"] == "required when op is 'upsert'"
    assert found["content_hash"] == "required when op is 'upsert'"


def test_upsert_with_empty_content_is_valid() -> None:
    doc = DocumentVersion.from_dict(upsert(content="", content_hash=content_hash("")))
    assert doc.content == "" and doc.hash_matches()


def test_delete_needs_neither() -> None:
    doc = DocumentVersion.from_dict(delete())
    assert doc.content is None and doc.content_hash is None and doc.hash_matches()
    assert b"content" not in doc.to_json()


def test_delete_with_content_rejected() -> None:
    found = problems(upsert(op="delete"))
    assert found["content"] == "must be absent when op is 'delete'"
    assert found["content_hash"] == "must be absent when op is 'delete'"


def test_delete_with_null_content_accepted() -> None:
    assert DocumentVersion.from_dict(delete(content=None, content_hash=None)).op == "delete"


@pytest.mark.parametrize(
    "bad",
    [
        "sha256:" + "A" * 64,
        "sha256:" + "a" * 63,
        "sha256:" + "a" * 65,
        "md5:" + "a" * 64,
        "a" * 64,
        "sha256:" + "g" * 64,
    ],
)
def test_hash_format_rejected(bad: str) -> None:
    assert "pattern" in problems(upsert(content_hash=bad))["content_hash"]


def test_hash_mismatch_is_valid_but_detected() -> None:
    doc = DocumentVersion.from_dict(upsert(content_hash="sha256:" + "0" * 64))
    assert not doc.hash_matches()


def test_naive_event_time_rejected() -> None:
    assert "timezone" in problems(upsert(event_time="2026-12-02T10:00:00"))["event_time"]


def test_numeric_event_time_rejected() -> None:
    assert "event_time" in problems(upsert(event_time=1_700_000_000))


def test_event_time_required() -> None:
    assert "event_time" in problems(upsert(event_time=...))


def test_event_time_normalised_to_utc_with_z() -> None:
    doc = DocumentVersion.from_dict(upsert(event_time="2026-12-02T12:00:00+02:00"))
    assert doc.event_time == datetime(2026, 12, 2, 10, tzinfo=UTC)
    assert doc.event_time.utcoffset() == timedelta(0)
    assert orjson.loads(doc.to_json())["event_time"] == "2026-12-02T10:00:00Z"


def test_naive_datetime_rejected_from_python() -> None:
    with pytest.raises(ContractError):
        DocumentVersion.for_upsert("acme", "k", "x", event_time=datetime(2026, 1, 1))  # noqa: DTZ001


def test_source_version_is_optional_string() -> None:
    assert DocumentVersion.from_dict(upsert(source_version=...)).source_version is None
    assert "source_version" in problems(upsert(source_version=42))


def test_order_key_defaults_to_event_time() -> None:
    doc = DocumentVersion.from_dict(upsert(order_key=...))
    assert doc.order_key is None
    assert doc.effective_order_key == "2026-12-02T10:00:00.000000Z"
    assert DocumentVersion.from_dict(upsert()).effective_order_key == "2024-06-30"


def test_event_time_order_keys_compare_as_strings() -> None:
    a = DocumentVersion.from_dict(upsert(order_key=..., event_time="2026-12-02T10:00:00Z"))
    b = DocumentVersion.from_dict(upsert(order_key=..., event_time="2026-12-02T10:00:00.5Z"))
    assert a.effective_order_key < b.effective_order_key


def test_metadata_title_source_optional() -> None:
    doc = DocumentVersion.from_dict(upsert(metadata=..., title=..., source=...))
    assert doc.metadata == {} and doc.title is None and doc.source is None


def test_metadata_must_be_object() -> None:
    assert "metadata" in problems(upsert(metadata=[1, 2]))


def test_unknown_fields_ignored() -> None:
    assert DocumentVersion.from_dict(upsert(added_in_v1_1="x")).doc_key


def test_malformed_json_and_non_object() -> None:
    with pytest.raises(RecordValidationError, match="malformed JSON"):
        DocumentVersion.from_json(b"{not json")
    with pytest.raises(RecordValidationError, match="JSON object"):
        DocumentVersion.from_json(b"[1]")


def test_error_names_every_field_and_rule() -> None:
    with pytest.raises(RecordValidationError) as info:
        DocumentVersion.from_json(orjson.dumps(upsert(realm="Bad", doc_key="", content=...)))
    message = str(info.value)
    assert "realm: String should match pattern" in message
    assert "doc_key: String should have at least 1 character" in message
    assert "content: required when op is 'upsert'" in message
    assert isinstance(info.value, ContractError)


def test_model_is_frozen() -> None:
    doc = DocumentVersion.from_dict(upsert())
    with pytest.raises(ValueError, match="frozen"):
        doc.realm = "other"  # type: ignore[misc]


def test_for_upsert_and_for_delete() -> None:
    doc = DocumentVersion.for_upsert("acme", "k", "hello", title="T", space="s1")
    assert doc.content_hash == HELLO_HASH and doc.title == "T" and doc.space == "s1"
    assert doc.event_time.tzinfo is not None
    gone = DocumentVersion.for_delete("acme", "k", source_version="7")
    assert gone.op == "delete" and gone.source_version == "7"


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("9", "10", -1),
        ("10", "9", 1),
        ("0042", "42", 0),
        ("-1", "0", -1),
        ("b", "a", 1),
        ("10", "9a", -1),  # mixed: compared as strings
        ("2024-06-30", "2024-07-01", -1),
        ("x", "x", 0),
    ],
)
def test_compare_source_versions(a: str, b: str, expected: int) -> None:
    assert compare_source_versions(a, b) == expected


# ---------------------------------------------------------------- round trips

_realms = st.from_regex(r"[a-z][a-z0-9_]{0,39}", fullmatch=True)
_spaces = st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True)
_text = st.text(st.characters(codec="utf-8"), max_size=200)
_json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_times = st.datetimes(
    min_value=datetime(1970, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive by API
    max_value=datetime(2200, 1, 1),  # noqa: DTZ001
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), UTC]),
)


_entities = st.builds(
    CandidateEntity,
    name=_text,
    type=_text,
    description=_text,
    aliases=st.lists(_text, max_size=2),
)
_relations = st.builds(
    CandidateRelation,
    subject=_text,
    predicate=_text,
    object=_text,
    description=_text,
    negated=st.booleans(),
    confidence=st.floats(0, 1),
    valid_from=st.none() | _text,
    valid_to=st.none() | _text,
)
_facts = st.builds(
    ExtractionOutput,
    entities=st.lists(_entities, max_size=3),
    relations=st.lists(_relations, max_size=3),
)


@st.composite
def documents(draw: st.DrawFn) -> DocumentVersion:
    op = draw(st.sampled_from(["upsert", "delete"]))
    content = draw(_text) if op == "upsert" else None
    optional = st.none() | _text
    facts = draw(st.none() | _facts) if op == "upsert" else None
    return DocumentVersion(
        facts=facts,
        realm=draw(_realms),
        space=draw(_spaces),
        doc_key=draw(st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)),
        op=op,
        content=content,
        content_hash=content_hash(content) if content is not None else None,
        title=draw(optional),
        source=draw(optional),
        metadata=draw(st.dictionaries(_text, _json, max_size=4)),
        source_version=draw(optional),
        order_key=draw(optional),
        event_time=draw(_times),
    )


@given(documents())
def test_round_trip_model_json_model(doc: DocumentVersion) -> None:
    data = doc.to_json()
    again = DocumentVersion.from_json(data)
    assert again == doc
    assert again.to_json() == data
    assert again.hash_matches()
    assert data == orjson.dumps(doc.model_dump(mode="json", exclude_none=True))
