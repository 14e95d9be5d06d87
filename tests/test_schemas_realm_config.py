"""Realm configuration: the contract's file form, embedder ids, presets."""

from __future__ import annotations

import orjson
import pytest

from tidegraph.schemas.errors import RecordValidationError
from tidegraph.schemas.realm_config import (
    DEFAULT_REALM_CONFIG,
    PRESET_NAMES,
    EmbedderSpec,
    PresetName,
    RealmConfig,
    parse_embedder,
    preset,
)

CONTRACT_EXAMPLE = {
    "vocabulary": ["worked_with", "designed", "ally_of", "enemy_of"],
    "predicate_aliases": {"collaborated_with": "worked_with"},
    "exclusive_groups": [["friend_of", "enemy_of", "rival_of", "ally_of", "opponent_of"]],
    "extractor": "llm",
    "embedder": "llm:text-embedding-3-small:1536",
}


def test_contract_example_parses_and_round_trips() -> None:
    config = RealmConfig.from_json(orjson.dumps(CONTRACT_EXAMPLE))
    assert config.embedder_spec == EmbedderSpec("llm", "text-embedding-3-small", 1536)
    assert config.groups_of("rival_of") == (
        frozenset({"friend_of", "enemy_of", "rival_of", "ally_of", "opponent_of"}),
    )
    assert RealmConfig.from_json(config.to_json()) == config


def test_default_is_rules_and_hashing_384() -> None:
    assert DEFAULT_REALM_CONFIG.extractor == "rules"
    assert DEFAULT_REALM_CONFIG.embedder_spec == EmbedderSpec("hashing", None, 384)
    assert RealmConfig.from_json(b"{}") == DEFAULT_REALM_CONFIG


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("hashing:384", EmbedderSpec("hashing", None, 384)),
        ("llm:text-embedding-3-small:1536", EmbedderSpec("llm", "text-embedding-3-small", 1536)),
        ("llm:ollama/nomic:latest:768", EmbedderSpec("llm", "ollama/nomic:latest", 768)),
    ],
)
def test_embedder_ids_parse(text: str, spec: EmbedderSpec) -> None:
    assert parse_embedder(text) == spec
    assert str(spec) == text


@pytest.mark.parametrize(
    "text", ["hashing", "hashing:", "hashing:0", "hashing:x", "llm:1536", "llm::8", "bert:384",
             "hashing:99999", "hashing:٣"]
)  # fmt: skip
def test_bad_embedder_ids_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="embedder"):
        parse_embedder(text)
    with pytest.raises(RecordValidationError, match="embedder"):
        RealmConfig.from_json(orjson.dumps({"embedder": text}))


@pytest.mark.parametrize(
    "obj",
    [
        {"extractor": "gpt"},
        {"vocabulary": ["Worked With"]},
        {"vocabulary": ["a", "a"]},
        {"predicate_aliases": {"a": "b", "b": "c"}},
        {"exclusive_groups": [["only_one"]]},
        {"vocabularies": []},
    ],
)
def test_invalid_configs_rejected(obj: dict[str, object]) -> None:
    with pytest.raises(RecordValidationError):
        RealmConfig.from_json(orjson.dumps(obj))


def test_narrative_preset_has_the_relationship_group() -> None:
    groups = preset("narrative").exclusive_groups
    assert frozenset({"friend_of", "enemy_of", "rival_of", "ally_of", "opponent_of"}) in groups


def test_finance_preset_follows_the_paper() -> None:
    config = preset("finance")
    assert len(config.vocabulary) == 32 and len(config.exclusive_groups) == 8
    assert frozenset({"generates_cash_flow", "consumes_cash"}) in config.exclusive_groups
    assert frozenset({"grounds", "certifies"}) in config.exclusive_groups
    assert frozenset({"increases_revenue", "reduces_revenue"}) in config.exclusive_groups


def test_biography_preset_follows_the_paper() -> None:
    config = preset("biography")
    assert len(config.vocabulary) == 35
    assert frozenset({"works_at", "left"}) in config.exclusive_groups
    assert frozenset({"married_to", "divorced_from"}) in config.exclusive_groups
    assert config.predicate_aliases["collaborated_with"] == "worked_with"


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_presets_are_self_consistent(name: PresetName) -> None:
    config = preset(name, extractor="llm", embedder="llm:m:8")
    vocab = set(config.vocabulary)
    assert all(target in vocab for target in config.predicate_aliases.values())
    assert not vocab & set(config.predicate_aliases)
    assert all(group <= vocab for group in config.exclusive_groups)
    assert config.functional_predicates and set(config.functional_predicates) <= vocab
    assert config.extractor == "llm" and config.embedder == "llm:m:8"


def test_differences_name_each_setting_and_ignore_order() -> None:
    a = RealmConfig(
        vocabulary=("ally_of", "enemy_of"), exclusive_groups=(frozenset({"ally_of", "enemy_of"}),)
    )
    b = RealmConfig(
        vocabulary=("enemy_of", "ally_of"), exclusive_groups=(frozenset({"enemy_of", "ally_of"}),)
    )
    assert a.differences(b) == []
    c = RealmConfig(vocabulary=("ally_of", "rival_of"), embedder="hashing:256")
    found = a.differences(c)
    assert found == [
        "vocabulary adds rival_of and drops enemy_of",
        "exclusive_groups drops [ally_of,enemy_of]",
        "embedder 'hashing:384' → 'hashing:256'",
    ]
    # symmetric predicates decide how relations are stored: a difference like any other
    d = RealmConfig(symmetric_predicates=frozenset({"ally_of"}))
    assert RealmConfig().differences(d) == ["symmetric_predicates adds ally_of"]


def test_functional_predicates_name_a_side_are_pinned_and_never_symmetric() -> None:
    config = RealmConfig(functional_predicates={"lives_in": "subject", "ceo_of": "object"})
    assert RealmConfig.from_json(config.to_json()) == config
    with pytest.raises(RecordValidationError, match="subject"):
        RealmConfig.from_json(b'{"functional_predicates": {"lives_in": "both"}}')
    with pytest.raises(RecordValidationError, match="normalised predicate"):
        RealmConfig.from_json(b'{"functional_predicates": {"Lives In": "subject"}}')
    with pytest.raises(RecordValidationError, match="symmetric predicate cannot be functional"):
        RealmConfig.from_json(
            b'{"functional_predicates": {"married_to": "subject"},'
            b' "symmetric_predicates": ["married_to"]}'
        )
    moved = RealmConfig(functional_predicates={"lives_in": "object"})
    assert config.differences(moved) == [
        "functional_predicates adds lives_in:object and drops ceo_of:object lives_in:subject"
    ]
