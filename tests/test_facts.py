"""Facts supplied on a record: their hash, their passage, and preparation without a model.

The facts go through the same gates and vocabulary as an extractor's output; what is refused
is named in the document's status. The pipeline here runs a realm pinned to the model
extractor with no model endpoint configured: preparing a record with facts must not even
build the extractor.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given
from test_schemas_documents import _facts as facts_strategy  # type: ignore[import-not-found]

from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.infra.composition import ModelRegistry
from tidegraph.schemas.documents import DocumentVersion, with_facts_passage
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.extraction import ExtractionOutput
from tidegraph.schemas.facts import render_facts, version_hash
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import RealmInfo

FACTS: dict[str, Any] = {
    "entities": [
        {"name": "Ada Quill", "type": "Person", "description": "Engineer", "aliases": ["Ada"]},
        {"name": "Wrenfield", "type": "Company"},
    ],
    "relations": [
        {"subject": "Ada Quill", "predicate": "works at", "object": "Wrenfield",
         "valid_from": "2019-03-01"},
    ],
}  # fmt: skip
MODEL_REALM = RealmInfo("acme", "realm_acme", "hashing:16", 16, "llm", RealmConfig())


def _facts(obj: dict[str, Any]) -> ExtractionOutput:
    return ExtractionOutput.model_validate(obj)


def test_version_hash_is_the_content_hash_without_facts() -> None:
    h = content_hash("x")
    assert version_hash(h, None) == h
    assert DocumentVersion.for_upsert("acme", "k", "x").version_hash == h
    assert DocumentVersion.for_delete("acme", "k").version_hash is None


def test_version_hash_covers_the_facts_by_meaning() -> None:
    h = content_hash("x")
    base = version_hash(h, _facts(FACTS))
    assert base != h and base.startswith("sha256:") and len(base) == 71
    # Defaults written out or left implicit are the same facts.
    explicit = {
        **FACTS,
        "entities": [*FACTS["entities"][:1], {**FACTS["entities"][1], "type": "Company",
                                               "description": "", "aliases": []}],
    }  # fmt: skip
    assert version_hash(h, _facts(explicit)) == base
    # Any change of meaning is another version; so is another content.
    ended = {**FACTS, "relations": [{**FACTS["relations"][0], "valid_to": "2024-01-31"}]}
    assert version_hash(h, _facts(ended)) != base
    assert version_hash(content_hash("y"), _facts(FACTS)) != base
    assert version_hash(h, ExtractionOutput()) not in (h, base)


@given(facts_strategy, facts_strategy)
def test_version_hash_is_equal_exactly_when_the_facts_are(
    a: ExtractionOutput, b: ExtractionOutput
) -> None:
    h = content_hash("x")
    # Sent sparse (defaults left out) or in full, the same facts hash the same.
    sparse = ExtractionOutput.model_validate(orjson.loads(a.model_dump_json(exclude_defaults=True)))
    assert version_hash(h, sparse) == version_hash(h, a)
    # Pydantic's own equality is the reference for "the same facts".
    assert (version_hash(h, a) == version_hash(h, b)) == (a == b)


def test_rendered_passage_states_every_fact() -> None:
    text = render_facts(_facts(FACTS))
    assert text == (
        "Ada Quill (Person): Engineer. Also known as Ada.\n"
        "Wrenfield (Company).\n"
        "Ada Quill works at Wrenfield (from 2019-03-01)."
    )
    denial = {"subject": "A B", "predicate": "worked_with", "object": "C D", "negated": True}
    negated = {"relations": [{**denial, "valid_to": "1990", "description": "denied"}]}
    assert render_facts(_facts(negated)) == "A B not worked with C D (to 1990): denied."


def test_a_record_without_content_gets_the_passage() -> None:
    obj = {"doc_key": "k", "facts": FACTS}
    assert with_facts_passage(obj)["content"] == render_facts(_facts(FACTS))
    given = {"doc_key": "k", "facts": FACTS, "content": "prose"}
    assert with_facts_passage(given) is given
    broken = {"doc_key": "k", "facts": {"entities": "nope"}}
    assert with_facts_passage(broken) is broken  # validation reports it
    doc = DocumentVersion.for_facts("acme", "k", FACTS)
    assert doc.content == render_facts(_facts(FACTS)) and doc.hash_matches()
    assert DocumentVersion.from_json(doc.to_json()) == doc


async def _prepare(
    facts: dict[str, Any], content: str | None = None, info: RealmInfo = MODEL_REALM
) -> Any:
    registry = ModelRegistry()  # no model endpoint: building the model extractor fails
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
    doc = DocumentVersion.for_facts(
        "acme", "k", facts, content=content, event_time=datetime.now(UTC)
    )
    return doc, await pipeline.prepare(doc, info)


async def test_facts_are_prepared_without_an_extractor() -> None:
    registry = ModelRegistry()
    with pytest.raises(ConfigError):
        registry.extractor_for(MODEL_REALM)  # what preparing by extraction would meet
    doc, prepared = await _prepare(FACTS)
    assert prepared.failure is None and prepared.notice is None
    assert prepared.content_hash == doc.version_hash != doc.content_hash
    [chunk] = prepared.chunks
    assert chunk.text == doc.content
    assert [(e.name, e.type, e.aliases) for e in chunk.entities] == [
        ("Ada Quill", "Person", ("Ada",)),
        ("Wrenfield", "Company", ()),
    ]
    [r] = chunk.relations
    # Normalised like model output: predicate form, validity dates.
    assert (r.subject, r.predicate, r.object, r.valid_from, r.valid_to) == (
        "Ada Quill", "works_at", "Wrenfield", "2019-03-01", None,
    )  # fmt: skip


async def test_facts_hang_on_the_first_chunk_of_long_prose() -> None:
    prose = "Nothing here names anyone at all. " * 200
    _, prepared = await _prepare(FACTS, content=prose)
    assert len(prepared.chunks) > 1
    first, *rest = prepared.chunks
    assert first.relations and first.entities
    assert all(not c.entities and not c.relations and c.error is None for c in rest)


async def test_refused_facts_are_named_and_the_rest_indexed() -> None:
    facts = {
        "entities": [*FACTS["entities"], {"name": "he", "type": "Person"}],
        "relations": [
            *FACTS["relations"],
            {"subject": "Ada Quill", "predicate": "is related to", "object": "Wrenfield"},
            {"subject": "he", "predicate": "founded", "object": "Wrenfield"},
        ],
    }
    _, prepared = await _prepare(facts)
    assert prepared.failure is None
    notice = prepared.notice
    assert notice is not None and notice.startswith("refused facts: ")
    assert "'he (Person)' refused by pronominal_name" in notice
    assert "'Ada Quill is related to Wrenfield' refused by vague_predicate" in notice
    assert "'he founded Wrenfield' refused by orphaned_endpoint" in notice
    assert [r.predicate for r in prepared.chunks[0].relations] == ["works_at"]


async def test_facts_snap_onto_the_vocabulary_like_model_output() -> None:
    config = RealmConfig(vocabulary=["works_at"], predicate_aliases={"employed_by": "works_at"})
    info = RealmInfo("acme", "realm_acme", "hashing:16", 16, "llm", config)
    facts = {
        "relations": [
            {"subject": "Ada Quill", "predicate": "employed by", "object": "Wrenfield"},
            {"subject": "Ada Quill", "predicate": "admires", "object": "Wrenfield"},
        ]
    }
    _, prepared = await _prepare(facts, info=info)
    # An alias snaps onto its term; the long tail stays open, as for a model's output.
    assert [r.predicate for r in prepared.chunks[0].relations] == ["works_at", "admires"]
    assert prepared.notice is None


async def test_facts_all_refused_or_empty_fail_the_document() -> None:
    _, prepared = await _prepare({"entities": [{"name": "they"}]})
    assert prepared.failure is not None and "its facts were all refused" in prepared.failure
    assert "pronominal_name" in prepared.failure
    _, empty = await _prepare({}, content="A passage naming nobody.")
    assert empty.failure is not None and "its facts state nothing" in empty.failure


async def test_facts_with_empty_content_hang_on_their_own_passage() -> None:
    _, prepared = await _prepare(FACTS, content="")
    [chunk] = prepared.chunks
    assert chunk.text == render_facts(_facts(FACTS)) and len(chunk.relations) == 1
