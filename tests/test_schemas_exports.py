"""The public surface of tidegraph.schemas is pinned: changing it is a deliberate act."""

from __future__ import annotations

import tidegraph.schemas

EXPECTED = [
    "ANY_SPACE",
    "CHANGE_SCHEMA",
    "DEFAULT_REALM_CONFIG",
    "DEFAULT_SPACE",
    "DOCUMENT_SCHEMA",
    "REALM_PATTERN",
    "SPACE_PATTERN",
    "VERSION",
    "ChangeKind",
    "ConfigError",
    "ContractError",
    "DocumentVersion",
    "EmbedderSpec",
    "EntityRef",
    "GraphChange",
    "InvalidNameError",
    "Problem",
    "RealmConfig",
    "RecordValidationError",
    "RelationRef",
    "Settings",
    "TidegraphError",
    "TopicMissing",
    "TopicSpec",
    "TransientError",
    "change_id",
    "compare_source_versions",
    "content_hash",
    "load_settings",
    "parse_embedder",
    "partition_for_key",
    "preset",
    "problems_from",
    "realm_partition",
    "render_facts",
    "topic_partitions",
    "topic_specs",
    "validate_realm",
    "validate_space",
]


def test_all_is_pinned() -> None:
    assert tidegraph.schemas.__all__ == EXPECTED


def test_every_export_exists_and_is_public() -> None:
    for name in tidegraph.schemas.__all__:
        member = getattr(tidegraph.schemas, name)
        module = getattr(member, "__module__", "tidegraph.schemas")
        assert module.startswith("tidegraph.schemas"), (name, module)
