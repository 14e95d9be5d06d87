"""GraphChange v1: kinds, required fields per kind, absent fields, round trips."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.schemas.changes import (
    CHANGE_SCHEMA,
    REQUIRED_BY_KIND,
    ChangeKind,
    EntityRef,
    GraphChange,
    RelationRef,
    change_id,
)
from tidegraph.schemas.errors import RecordValidationError

CONTRACT_KINDS = {
    "document_indexed", "document_replaced", "document_deleted", "document_failed",
    "entity_added", "entity_dormant", "entity_revived", "entity_updated", "entity_archived",
    "entity_unarchived", "relation_added",
    "relation_superseded", "relation_retracted", "relation_restored", "communities_built",
    "communities_stale",
    "realm_deleted",  # an addition to CONTRACT's list (README, "Management verbs")
}  # fmt: skip

RELATION = {
    "id": "r1",
    "subject": "Charles Babbage",
    "predicate": "designed",
    "object": "Analytical Engine",
    "negated": False,
    "valid_from": None,
    "valid_to": None,
}


def change(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema": CHANGE_SCHEMA,
        "id": "acme:1234:0",
        "realm": "acme",
        "space": "default",
        "seq": 1234,
        "belief_time": "2026-12-02T10:00:01.123Z",
        "kind": "relation_superseded",
        "doc_key": "docs/a.md",
        "relation": RELATION,
        "superseded_by": "r2",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not ...}


def rejected(obj: dict[str, Any]) -> str:
    with pytest.raises(RecordValidationError) as info:
        GraphChange.from_json(orjson.dumps(obj))
    return str(info.value)


def test_kinds_are_the_contracts() -> None:
    assert {k.value for k in ChangeKind} == CONTRACT_KINDS
    assert set(REQUIRED_BY_KIND) == set(ChangeKind)


def test_contract_example_round_trips() -> None:
    parsed = GraphChange.from_json(orjson.dumps(change()))
    assert parsed.kind is ChangeKind.RELATION_SUPERSEDED
    assert parsed.belief_time == datetime(2026, 12, 2, 10, 0, 1, 123000, tzinfo=UTC)
    out = orjson.loads(parsed.to_json())
    assert out["relation"] == RELATION  # valid_from/valid_to kept as null inside relation
    assert out["belief_time"] == "2026-12-02T10:00:01.123000Z"


def test_fields_that_do_not_apply_are_absent() -> None:
    c = GraphChange(
        id=change_id("acme", 7, 0),
        realm="acme",
        seq=7,
        belief_time=datetime(2026, 1, 1, tzinfo=UTC),
        kind=ChangeKind.COMMUNITIES_BUILT,
    )
    out = orjson.loads(c.to_json())
    assert set(out) == {"schema", "id", "realm", "space", "seq", "belief_time", "kind"}


def test_entity_change_carries_entity_only() -> None:
    c = GraphChange(
        id="acme:8:1",
        realm="acme",
        seq=8,
        belief_time=datetime(2026, 1, 1, tzinfo=UTC),
        kind="entity_added",
        entity=EntityRef(id="e1", name="Ada Lovelace", type="Person"),
    )
    out = orjson.loads(c.to_json())
    assert out["entity"] == {"id": "e1", "name": "Ada Lovelace", "type": "Person"}
    assert "relation" not in out and "doc_key" not in out and "superseded_by" not in out


@pytest.mark.parametrize(
    ("kind", "drop", "needs"),
    [
        ("relation_added", "relation", "relation"),
        ("relation_superseded", "superseded_by", "superseded_by"),
        ("document_indexed", "doc_key", "doc_key"),
        ("entity_dormant", "entity", "entity"),
    ],
)
def test_kind_requires_its_fields(kind: str, drop: str, needs: str) -> None:
    obj = change(kind=kind, entity={"id": "e", "name": "n", "type": "t"})
    obj.pop(drop)
    assert f"requires {needs}" in rejected(obj)


def test_unknown_kind_rejected() -> None:
    assert "kind" in rejected(change(kind="relation_exploded"))


def test_id_must_match_realm_and_seq() -> None:
    assert "id must start with realm:seq" in rejected(change(id="acme:1:0"))
    assert "pattern" in rejected(change(id="acme-1-0"))


def test_space_wildcard_rejected() -> None:
    assert "wildcard" in rejected(change(space="*"))


def test_naive_belief_time_rejected() -> None:
    assert "timezone" in rejected(change(belief_time="2026-12-02T10:00:01"))


def test_schema_id_required() -> None:
    assert "schema: required" in rejected(change(schema=...))


def test_negative_seq_rejected() -> None:
    assert "seq" in rejected(change(seq=-1, id="acme:-1:0"))


_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=30)
_opt = st.none() | _names


@st.composite
def changes(draw: st.DrawFn) -> GraphChange:
    kind = draw(st.sampled_from(list(ChangeKind)))
    realm = draw(st.from_regex(r"[a-z][a-z0-9_]{0,39}", fullmatch=True))
    seq = draw(st.integers(0, 2**62))
    needs = REQUIRED_BY_KIND[kind]
    entity = EntityRef(id=draw(_names), name=draw(_names), type=draw(_names))
    relation = RelationRef(
        id=draw(_names),
        subject=draw(_names),
        predicate=draw(st.from_regex(r"[a-z_]{1,20}", fullmatch=True)),
        object=draw(_names),
        negated=draw(st.booleans()),
        valid_from=draw(st.none() | st.sampled_from(["1625", "1625-06", "1625-06-01"])),
        valid_to=draw(st.none() | st.sampled_from(["1700", "1701-01"])),
    )
    return GraphChange(
        id=change_id(realm, seq, draw(st.integers(0, 1000))),
        realm=realm,
        space=draw(st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True)),
        seq=seq,
        belief_time=draw(st.datetimes(timezones=st.just(UTC))),
        kind=kind,
        doc_key=draw(_names) if "doc_key" in needs else draw(_opt),
        entity=entity if "entity" in needs or draw(st.booleans()) else None,
        relation=relation if "relation" in needs else None,
        superseded_by=draw(_names) if "superseded_by" in needs else None,
        error=draw(_opt) if kind is ChangeKind.DOCUMENT_FAILED else None,
    )


@given(changes())
def test_round_trip_model_json_model(c: GraphChange) -> None:
    data = c.to_json()
    again = GraphChange.from_json(data)
    assert again == c
    assert again.to_json() == data
    assert None not in orjson.loads(data).values()
