"""Replay pieces that need no service: names, the realm's partition, the feed a rebuild
publishes, the progress line."""

from __future__ import annotations

import io
from typing import Any

import pytest

from tidegraph.indexer.replay.diff import Difference, feed_changes, format_difference
from tidegraph.indexer.replay.rebuild import (
    ReplayOptions,
    ReplayProgress,
    audit_schema,
    rebuild_config,
    replay_group,
    retired_schema,
    shadow_schema,
)
from tidegraph.infra.commands.replay import ProgressLine, parse_until
from tidegraph.schemas.errors import ConfigError, InvalidNameError
from tidegraph.schemas.realm_config import RealmConfig


def test_schema_names_are_derived_validated_and_fit_postgres() -> None:
    assert shadow_schema("acme", "1") == "realm_acme__shadow_1"
    assert shadow_schema("acme", "realm_acme__shadow_try2") == "realm_acme__shadow_try2"
    assert audit_schema("acme", "q3") == "realm_acme__audit_q3"
    assert retired_schema("acme", "4") == "realm_acme__retired_4"
    assert replay_group("realm_acme__shadow_1") == "tidegraph-replay:realm_acme__shadow_1"
    for bad in ("", "Upper", "with-dash", 'quo"te', "_lead", "x" * 33):
        with pytest.raises(InvalidNameError):
            shadow_schema("acme", bad)
    with pytest.raises(InvalidNameError):
        shadow_schema("Not A Realm", "1")
    longest = "r" * 40
    assert len(shadow_schema(longest, "12345678")) == 63
    with pytest.raises(ConfigError, match="63"):
        shadow_schema(longest, "123456789")


def test_rebuild_configuration_keeps_the_live_one_unless_told() -> None:
    live = RealmConfig(vocabulary=("ally_of",), embedder="hashing:64")
    base = ReplayOptions("acme", "b", "d")
    assert rebuild_config(base, live) == live
    assert rebuild_config(base, None) == base.default_config
    changed = rebuild_config(
        ReplayOptions("acme", "b", "d", embedder="hashing:32", extractor="llm"), live
    )
    assert (changed.vocabulary, changed.embedder, changed.extractor) == (
        ("ally_of",),
        "hashing:32",
        "llm",
    )
    with pytest.raises(ConfigError):
        rebuild_config(ReplayOptions("acme", "b", "d", embedder="cosine:3"), live)


Side = tuple[dict[str, Any], dict[str, Any]]


def _rel(status: str, by: str | None = None, rid: str = "7") -> Side:
    value = {"status": status, "superseded_by": "A enemy_of B" if by else None, "weight": 1}
    ref = {
        "id": rid,
        "subject": "A",
        "predicate": "ally_of",
        "object": "B",
        "negated": False,
        "valid_from": None,
        "valid_to": None,
        "superseded_by": by,
    }
    return value, ref


KEY = ("default", "a", "ally_of", "b", "false")


@pytest.mark.parametrize(
    ("old", "new", "kinds"),
    [
        (None, "current", ["relation_added"]),
        (None, "superseded", ["relation_added", "relation_superseded"]),
        ("current", None, ["relation_retracted"]),
        ("current", "retracted", ["relation_retracted"]),
        ("superseded", "current", ["relation_restored"]),
        ("current", "superseded", ["relation_superseded"]),
        ("retracted", None, []),
    ],
)
def test_relation_state_differences_become_the_writers_change_kinds(
    old: str | None, new: str | None, kinds: list[str]
) -> None:
    left = _rel(old, rid="3") if old else (None, None)
    right = _rel(new, "9" if new == "superseded" else None) if new else (None, None)
    d = Difference("relation", KEY, left[0], right[0], left[1], right[1])
    changes = feed_changes([d])
    assert [k for k, _, _ in changes] == kinds
    for kind, space, payload in changes:
        assert space == "default"
        assert payload["relation"]["id"] == ("7" if new else "3")
        if kind == "relation_superseded":
            assert payload["superseded_by"] == "9"


def test_a_rebuild_that_supersedes_by_another_rule_says_so_on_the_feed() -> None:
    left, left_ref = _rel("superseded", "9")
    right, right_ref = _rel("superseded", "9")
    left["superseded_via"] = left_ref["superseded_via"] = "exclusive_group"
    right["superseded_via"] = right_ref["superseded_via"] = "functional"
    d = Difference("relation", KEY, left, right, left_ref, right_ref)
    assert feed_changes([d]) == [
        (
            "relation_superseded",
            "default",
            {
                "relation": {k: right_ref.get(k) for k in RELATION_REF_KEYS},
                "superseded_by": "9",
                "superseded_via": "functional",
            },
        )
    ]
    same = Difference("relation", KEY, right, dict(right), right_ref, right_ref)
    assert feed_changes([same]) == []


RELATION_REF_KEYS = (
    "id",
    "subject_id",
    "object_id",
    "subject",
    "predicate",
    "object",
    "negated",
    "valid_from",
    "valid_to",
)


def test_relation_attributes_are_not_feed_changes_entity_attributes_are() -> None:
    weight = Difference(
        "relation",
        KEY,
        {"status": "current", "superseded_by": None, "weight": 1},
        {"status": "current", "superseded_by": None, "weight": 2},
        _rel("current")[1],
        _rel("current")[1],
    )
    entity = Difference(
        "entity",
        ("default", "a"),
        {"dormant": False, "description": "x"},
        {"dormant": False, "description": "y"},
        {"id": "1", "name": "A", "type": "Person"},
        {"id": "2", "name": "A", "type": "Person", "description": "y", "aliases": []},
    )
    full = {"id": "2", "name": "A", "type": "Person", "description": "y", "aliases": []}
    assert feed_changes([weight, entity]) == [("entity_updated", "default", {"entity": full})]


def test_entity_and_document_differences() -> None:
    ref = {"id": "5", "name": "Ada", "type": "Person"}
    added = Difference("entity", ("default", "ada"), None, {"dormant": False}, None, ref)
    gone = Difference("entity", ("default", "ada"), {"dormant": False}, None, ref, None)
    revived = Difference(
        "entity", ("default", "ada"), {"dormant": True}, {"dormant": False}, ref, ref
    )
    assert [k for k, _, _ in feed_changes([added, gone, revived])] == [
        "entity_added",
        "entity_dormant",
        "entity_revived",
    ]
    doc = {"status": "indexed", "content_hash": "sha256:1", "chunk_count": 1, "error": None}
    failed = {**doc, "status": "failed", "error": "no chunk yielded valid structure"}
    changes = feed_changes(
        [
            Difference("document", ("default", "a.md"), doc, failed),
            Difference("document", ("default", "b.md"), failed, doc),
            Difference("document", ("default", "c.md"), doc, {**doc, "chunk_count": 2}),
        ]
    )
    assert changes == [
        ("document_failed", "default", {"doc_key": "a.md", "error": failed["error"]}),
        ("document_replaced", "default", {"doc_key": "b.md"}),
    ]


def test_differences_read_as_one_line_each() -> None:
    only_b = Difference(
        "relation", KEY, None, {"status": "current", "subject": "A", "object": "B", "weight": 1}
    )
    changed = Difference(
        "document", ("default", "a.md"), {"status": "indexed"}, {"status": "failed"}
    )
    assert format_difference(only_b, "old", "new") == (
        "+ relation default: A ally_of B  (only in new: status='current', weight=1)"
    )
    assert format_difference(changed) == ("~ document default/a.md  (status: 'indexed' → 'failed')")


def test_progress_line_shows_records_realm_records_and_eta() -> None:
    out = io.StringIO()
    line = ProgressLine("acme", stream=out)
    line.update(ReplayProgress("loading", 500, 2000, 120, 100, 5.0))
    text = out.getvalue()
    assert "500/2,000 records read" in text and "120 of the realm" in text
    assert "100 applied" in text and "ETA 0:00:15" in text


def test_until_needs_an_offset() -> None:
    assert parse_until("2026-12-02T10:00:00Z").utcoffset() is not None
    with pytest.raises(ConfigError, match="offset"):
        parse_until("2026-12-02T10:00:00")
    with pytest.raises(ConfigError):
        parse_until("yesterday")
