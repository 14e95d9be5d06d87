"""A document that yields no structure says why in words a user can act on: what the rules
extractor reads and how to switch to a model, which gate refused what, which verbs are
outside the realm's vocabulary."""

from __future__ import annotations

from datetime import UTC, datetime

from tidegraph.indexer.extraction.pipeline import Pipeline, why_nothing
from tidegraph.indexer.graph.gates import GATE_HINTS, Gate
from tidegraph.infra.composition import ModelRegistry
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import RealmInfo


async def _failure(text: str) -> str | None:
    registry = ModelRegistry()
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
    info = RealmInfo("acme", "realm_acme", "hashing:16", 16, "rules:1", RealmConfig())
    doc = DocumentVersion(
        realm="acme",
        space="default",
        doc_key="a.md",
        op="upsert",
        content=text,
        content_hash=content_hash(text),
        event_time=datetime.now(UTC),
    )
    return (await pipeline.prepare(doc, info)).failure


async def test_rules_extractor_failure_says_what_it_reads_and_how_to_switch() -> None:
    failure = await _failure("it was raining all day and nobody came.")
    assert failure is not None
    assert failure.startswith("no chunk yielded valid structure: the rules extractor found no")
    assert "'worked with'" in failure and "README" in failure
    assert "`tidegraph replay --realm REALM --extractor llm`" in failure
    assert await _failure("Ada Lovelace worked with Charles Babbage.") is None


def test_gates_and_vocabulary_are_named() -> None:
    assert set(GATE_HINTS) == set(Gate)  # every gate can explain itself
    why = why_nothing([Gate.CONFIDENCE_FLOOR, Gate.VAGUE_PREDICATE], {"worked_with"}, "llm:m")
    assert "its verbs (worked_with) are not in the realm's vocabulary" in why
    assert "predicate_aliases" in why
    assert GATE_HINTS[Gate.CONFIDENCE_FLOOR] in why and "hedged" in why
    assert GATE_HINTS[Gate.VAGUE_PREDICATE] in why
    assert "rules extractor" not in why
    assert why_nothing([], set(), "llm:m") == (
        "the model (llm:m) returned no entity or relation for this text"
    )
    rules = why_nothing([Gate.PRONOMINAL_NAME], set(), "rules:1")
    assert rules.startswith(GATE_HINTS[Gate.PRONOMINAL_NAME])
    assert "--extractor llm" in rules
