"""LLMExtractor against the scripted server, plus the pure parts: parsing, merging, the
cache key, the prompt and its JSON Schema."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from tidegraph.indexer.extraction.interfaces import (
    Chunk,
    DocumentContext,
    ExtractionFailed,
    Extractor,
)
from tidegraph.indexer.extraction.llm import (
    CachingExtractor,
    InvalidOutput,
    LLMExtractor,
    cache_key,
    merge_outputs,
    parse_extraction,
)
from tidegraph.indexer.extraction.prompts import (
    EXTRACTION_SCHEMA,
    PROMPT_VERSION,
    VAGUE_CONNECTORS,
    extraction_messages,
    gleaning_messages,
)
from tidegraph.indexer.models.client import LLMClient
from tidegraph.indexer.models.errors import LLMEndpointMisconfigured, LLMUnavailable
from tidegraph.schemas.extraction import CandidateEntity, CandidateRelation, ExtractionOutput

from llm_server import Fault, ScriptedLLMServer

MakeClient = Callable[..., LLMClient]
CONTEXT = DocumentContext(title="Corpus", source="fixtures")


def corpus_chunk(fixtures_dir: Path, name: str) -> Chunk:
    text = (fixtures_dir / "corpus" / f"{name}.md").read_text(encoding="utf-8")
    return Chunk(ordinal=0, text=text)


def scripted(fixtures_dir: Path, name: str, part: str = "output") -> ExtractionOutput:
    raw = json.loads((fixtures_dir / "extractions" / f"{name}.json").read_text("utf-8"))
    return ExtractionOutput.model_validate(raw[part])


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def realm(unique_name: Callable[[str], str]) -> str:
    return unique_name("r")


@pytest.fixture
def make_extractor(make_llm_client: MakeClient, realm: str) -> Callable[..., LLMExtractor]:
    def make(client: LLMClient | None = None, **kwargs: object) -> LLMExtractor:
        return LLMExtractor(client or make_llm_client(), realm=realm, **kwargs)  # type: ignore[arg-type]

    return make


# -- against the server ----------------------------------------------------------------


async def test_extracts_the_scripted_output_with_structured_output(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
    realm: str,
) -> None:
    extractor = make_extractor()
    checked: Extractor = extractor
    assert checked.id == f"llm:scripted-chat:{PROMPT_VERSION}"
    result = await extractor.extract(
        corpus_chunk(llm_fixtures_dir, "01-mara-ellison-early-life"), CONTEXT
    )
    assert result == scripted(llm_fixtures_dir, "01-mara-ellison-early-life")
    # first pass + one gleaning pass that found nothing
    assert llm_server.calls["chat"] == 2 and llm_server.gleaning_calls == 1
    first = llm_server.requests[0][1]
    assert first["response_format"]["type"] == "json_schema"
    assert first["response_format"]["json_schema"]["schema"] == EXTRACTION_SCHEMA
    assert first["temperature"] == 0
    kind = {"realm": realm, "kind": "chat"}
    assert sample("tidegraph_model_calls_total", outcome="ok", **kind) == 2
    assert sample("tidegraph_model_completion_tokens_total", **kind) > 0


async def test_gleaning_merges_what_was_missed(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    chunk = corpus_chunk(llm_fixtures_dir, "03-kestrel-design")
    result = await make_extractor().extract(chunk, CONTEXT)
    names = [e.name for e in result.entities]
    assert names == ["Mara Ellison", "Kestrel", "Tobias Rook", "Wrenfield Shipyard"]
    triples = [(r.subject, r.predicate, r.object) for r in result.relations]
    assert ("Wrenfield Shipyard", "built", "Kestrel") in triples
    assert len(triples) == 3
    # the gleaning request carried what the first pass found
    glean_prompt = llm_server.requests[1][1]["messages"][-1]["content"]
    assert "<already_extracted>" in glean_prompt and '"designs"' in glean_prompt
    assert llm_server.gleaning_calls == 1


async def test_more_gleaning_passes_stop_when_nothing_is_missed(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    chunk = corpus_chunk(llm_fixtures_dir, "03-kestrel-design")
    result = await make_extractor(gleaning=3).extract(chunk, CONTEXT)
    # gleaning pass 1 adds the Wrenfield relation; pass 2 repeats it, adding nothing
    assert llm_server.gleaning_calls == 2
    assert len(result.relations) == 3


async def test_duplicates_in_an_answer_are_merged(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
) -> None:
    entity = {"name": "Ada", "type": "Person", "description": "", "aliases": ["A. L."]}
    relation = {"subject": "Ada", "predicate": "knew", "object": "Ada2"}
    llm_server.enqueue(
        Fault.reply(
            json.dumps(
                {
                    "entities": [entity, {**entity, "name": "ada", "aliases": ["Lovelace"]}],
                    "relations": [relation, relation],
                }
            )
        )
    )
    result = await make_extractor(gleaning=2).extract(Chunk(ordinal=0, text="x"), CONTEXT)
    assert [(e.name, e.aliases) for e in result.entities] == [("Ada", ["A. L.", "Lovelace"])]
    assert len(result.relations) == 1
    assert llm_server.gleaning_calls == 1  # the empty gleaning answer ends gleaning


async def test_gleaning_off_makes_one_call(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    chunk = corpus_chunk(llm_fixtures_dir, "03-kestrel-design")
    result = await make_extractor(gleaning=0).extract(chunk, CONTEXT)
    assert result == scripted(llm_fixtures_dir, "03-kestrel-design")
    assert llm_server.calls["chat"] == 1


async def test_failed_gleaning_keeps_the_first_pass(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.enqueue(Fault.ok(), Fault.malformed())
    chunk = corpus_chunk(llm_fixtures_dir, "03-kestrel-design")
    result = await make_extractor().extract(chunk, CONTEXT)
    assert result == scripted(llm_fixtures_dir, "03-kestrel-design")
    assert llm_server.calls["chat"] == 2  # a gleaning pass gets one attempt


async def test_rejected_gleaning_keeps_the_first_pass(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.enqueue(Fault.ok(), Fault.http(413))
    chunk = corpus_chunk(llm_fixtures_dir, "03-kestrel-design")
    result = await make_extractor().extract(chunk, CONTEXT)
    assert result == scripted(llm_fixtures_dir, "03-kestrel-design")


async def test_outage_during_gleaning_propagates_as_transient(
    make_extractor: Callable[..., LLMExtractor],
    make_llm_client: MakeClient,
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.enqueue(Fault.ok(), *(Fault.http(503) for _ in range(50)))
    client = make_llm_client(deadline=0.3)
    chunk = corpus_chunk(llm_fixtures_dir, "03-kestrel-design")
    with pytest.raises(LLMUnavailable) as caught:
        await make_extractor(client).extract(chunk, CONTEXT)
    assert caught.value.retriable


async def test_malformed_output_is_retried_then_fails_the_chunk(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
    realm: str,
) -> None:
    llm_server.enqueue(Fault.malformed(), Fault.truncated(), Fault.reply("no JSON here"))
    chunk = corpus_chunk(llm_fixtures_dir, "01-mara-ellison-early-life")
    with pytest.raises(ExtractionFailed) as caught:
        await make_extractor(output_attempts=3).extract(chunk, CONTEXT)
    assert "after 3 attempt(s)" in caught.value.reason
    assert not caught.value.retriable
    assert llm_server.calls["chat"] == 3
    labels = {"realm": realm, "kind": "chat", "error_class": "invalid_output"}
    assert sample("tidegraph_model_failures_total", **labels) == 3


async def test_truncated_output_then_a_good_one_succeeds(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.enqueue(Fault.truncated())
    chunk = corpus_chunk(llm_fixtures_dir, "01-mara-ellison-early-life")
    result = await make_extractor(gleaning=0).extract(chunk, CONTEXT)
    assert result == scripted(llm_fixtures_dir, "01-mara-ellison-early-life")
    assert llm_server.calls["chat"] == 2


async def test_time_queued_for_a_slot_does_not_use_up_the_retry_budget(
    make_extractor: Callable[..., LLMExtractor],
    make_llm_client: MakeClient,
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.latency = 0.15
    llm_server.enqueue(Fault.ok(), Fault.ok(), Fault.ok(), Fault.malformed())
    extractor = make_extractor(make_llm_client(max_in_flight=1, deadline=0.4), gleaning=0)
    names = ["01-mara-ellison-early-life", "04-kestrel-voyages", "06-vale-denial", "10-ada-quill"]
    # the last chunk waits ~0.45 s for the slot, longer than its deadline, then gets a
    # malformed answer: it must still have its retry
    results = await asyncio.gather(
        *(extractor.extract(corpus_chunk(llm_fixtures_dir, n), CONTEXT) for n in names)
    )
    assert results[3] == scripted(llm_fixtures_dir, "10-ada-quill")
    assert llm_server.calls["chat"] == 5


async def test_undecodable_body_counts_as_a_failed_attempt(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.enqueue(Fault.raw_body(b'{"choices": [{"mes'))
    chunk = corpus_chunk(llm_fixtures_dir, "01-mara-ellison-early-life")
    result = await make_extractor(gleaning=0).extract(chunk, CONTEXT)
    assert result.entities


async def test_json_schema_refused_falls_back_to_tolerant_parsing(
    make_extractor: Callable[..., LLMExtractor],
    make_llm_client: MakeClient,
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.reject_json_schema = True
    llm_server.content_template = "Sure! Here is the graph:\n```json\n{content}\n```\nDone {"
    client = make_llm_client()
    extractor = make_extractor(client, gleaning=0)
    chunk = corpus_chunk(llm_fixtures_dir, "06-vale-denial")
    result = await extractor.extract(chunk, CONTEXT)
    assert result == scripted(llm_fixtures_dir, "06-vale-denial")
    assert result.relations[0].negated
    assert not client.json_schema_supported("scripted-chat")
    # remembered for the endpoint: the next chunk goes straight to plain JSON
    await extractor.extract(corpus_chunk(llm_fixtures_dir, "04-kestrel-voyages"), CONTEXT)
    formats = [body.get("response_format") for _, body in llm_server.requests]
    assert [f is not None for f in formats] == [True, False, False]


async def test_a_400_that_is_not_about_the_schema_fails_the_chunk(
    make_extractor: Callable[..., LLMExtractor],
    make_llm_client: MakeClient,
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.fail_next(2, 400)
    client = make_llm_client()
    chunk = corpus_chunk(llm_fixtures_dir, "01-mara-ellison-early-life")
    with pytest.raises(ExtractionFailed, match="rejected"):
        await make_extractor(client).extract(chunk, CONTEXT)
    assert client.json_schema_supported("scripted-chat")
    assert llm_server.calls["chat"] == 2


async def test_misconfigured_endpoint_propagates(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.fail_next(1, 401)
    chunk = corpus_chunk(llm_fixtures_dir, "01-mara-ellison-early-life")
    with pytest.raises(LLMEndpointMisconfigured):
        await make_extractor().extract(chunk, CONTEXT)


async def test_outage_in_first_pass_is_transient_within_the_deadline(
    make_extractor: Callable[..., LLMExtractor],
    make_llm_client: MakeClient,
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    llm_server.outage(30)
    chunk = corpus_chunk(llm_fixtures_dir, "01-mara-ellison-early-life")
    with pytest.raises(LLMUnavailable):
        await make_extractor(make_llm_client(deadline=0.3)).extract(chunk, CONTEXT)


async def test_context_and_vocabulary_reach_the_prompt(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
) -> None:
    context = DocumentContext(
        title="The founding",
        source="fs",
        known_names=("Mara Ellison", "Port Alder"),
        vocabulary=("founded", "friend_of"),
    )
    chunk = corpus_chunk(llm_fixtures_dir, "02-wrenfield-founding")
    await make_extractor(gleaning=0).extract(chunk, context)
    prompt = llm_server.requests[0][1]["messages"][-1]["content"]
    assert "title: The founding" in prompt and "source: fs" in prompt
    assert "- Mara Ellison\n- Port Alder" in prompt
    assert "<vocabulary>" in prompt and "- founded\n- friend_of" in prompt
    assert chunk.text in prompt


async def test_caching_extractor_answers_hits_without_a_call(
    make_extractor: Callable[..., LLMExtractor],
    llm_server: ScriptedLLMServer,
    llm_fixtures_dir: Path,
    realm: str,
) -> None:
    class Memory:
        def __init__(self) -> None:
            self.data: dict[str, ExtractionOutput] = {}

        async def get(self, key: str) -> ExtractionOutput | None:
            return self.data.get(key)

        async def put(self, key: str, output: ExtractionOutput) -> None:
            self.data[key] = output

    cached = CachingExtractor(make_extractor(gleaning=0), Memory())
    chunk = corpus_chunk(llm_fixtures_dir, "01-mara-ellison-early-life")
    first = await cached.extract(chunk, CONTEXT)
    second = await cached.extract(chunk, CONTEXT)
    assert first == second and llm_server.calls["chat"] == 1
    assert sample("tidegraph_extraction_cache_hits_total", realm=realm) == 1
    assert sample("tidegraph_extraction_cache_misses_total", realm=realm) == 1
    await cached.extract(chunk, replace(CONTEXT, known_names=("Mara Ellison",)))
    assert llm_server.calls["chat"] == 2


# -- parsing ---------------------------------------------------------------------------

GOOD = '{"entities": [{"name": "Ada", "type": "Person"}], "relations": []}'


@pytest.mark.parametrize(
    "text",
    [
        GOOD,
        f"```json\n{GOOD}\n```",
        f"Here you are: {GOOD} -- hope this helps {{",
        f"Some {{braces}} in prose first, then {GOOD}",
        f"{GOOD}\n\n{{'junk': true}}",
    ],
)
def test_tolerant_parse(text: str) -> None:
    assert parse_extraction(text) == ExtractionOutput(
        entities=[CandidateEntity(name="Ada", type="Person")]
    )


def test_nulls_mean_defaults_and_missing_lists_are_empty() -> None:
    out = parse_extraction(
        '{"entities": [{"name": "Ada", "type": null, "aliases": null, "description": null}],'
        ' "relations": null}'
    )
    assert out.entities[0].type == "Concept" and out.entities[0].aliases == []
    assert out.relations == []
    assert parse_extraction("{}") == ExtractionOutput()


@given(
    st.lists(
        st.text(alphabet=st.sampled_from("Ada \0Lovelace1843"), max_size=12), min_size=9, max_size=9
    )
)
def test_no_text_of_the_output_keeps_a_nul(texts: list[str]) -> None:
    # PostgreSQL cannot store U+0000: a model saying one must not stop a document's write.
    name, typ, desc, alias, s, p, o, vf, vt = texts
    out = parse_extraction(
        json.dumps(
            {
                "entities": [
                    {"name": name or "x", "type": typ, "description": desc, "aliases": [alias]}
                ],
                "relations": [
                    {
                        "subject": s or "x",
                        "predicate": p or "x",
                        "object": o or "x",
                        "description": desc,
                        "valid_from": vf,
                        "valid_to": vt,
                    }
                ],
            }
        )
    )
    dumped = out.model_dump()
    texts_out = [v for part in dumped.values() for item in part for v in item.values()]
    assert not any("\0" in t for t in texts_out if isinstance(t, str))
    assert "\0" not in "".join(dumped["entities"][0]["aliases"])
    assert out.entities[0].name == (name or "x").replace("\0", "")
    assert out.relations[0].valid_to == vt.replace("\0", "")


def test_invalid_items_are_dropped_like_gated_records() -> None:
    out = parse_extraction(
        '{"entities": [{"name": "Ada"}, {"type": "Person"}, "Babbage"],'
        ' "relations": [{"subject": "Ada", "predicate": "knew"}, '
        '{"subject": "Ada", "predicate": "worked_with", "object": "Babbage"}]}'
    )
    assert [e.name for e in out.entities] == ["Ada"]
    assert [r.object for r in out.relations] == ["Babbage"]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no json at all",
        '{"entities": [{"name": "Ada", "type": "Per',
        "[1, 2, 3]",
        '{"entities": "Ada"}',
        '{"entities": [{"type": "Person"}]}',
    ],
)
def test_unusable_answers_are_invalid(text: str) -> None:
    with pytest.raises(InvalidOutput):
        parse_extraction(text)


names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=20)
entities = st.builds(CandidateEntity, name=names, type=names, aliases=st.lists(names, max_size=3))
relations = st.builds(
    CandidateRelation,
    subject=names,
    predicate=names,
    object=names,
    negated=st.booleans(),
    confidence=st.floats(0, 1),
    valid_from=st.none() | names,
)
outputs = st.builds(
    ExtractionOutput,
    entities=st.lists(entities, max_size=4),
    relations=st.lists(relations, max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(outputs, st.text(alphabet=st.characters(exclude_characters="{"), max_size=30))
def test_round_trip_through_prose(output: ExtractionOutput, prose: str) -> None:
    text = f"{prose}\n```json\n{output.model_dump_json()}\n```\n{prose}"
    assert parse_extraction(text) == output


# -- merging ---------------------------------------------------------------------------


def test_merge_dedupes_entities_by_name_and_relations_by_triple_and_negation() -> None:
    first = ExtractionOutput(
        entities=[CandidateEntity(name="Charles Babbage", type="Concept", aliases=["Babbage"])],
        relations=[
            CandidateRelation(subject="Ada", predicate="worked_with", object="Charles Babbage")
        ],
    )
    extra = ExtractionOutput(
        entities=[
            CandidateEntity(
                name="charles babbage",
                type="Person",
                description="Mathematician",
                aliases=["C. Babbage", "Babbage"],
            ),
            CandidateEntity(name="Ada"),
        ],
        relations=[
            CandidateRelation(subject="ada", predicate="Worked_With", object="charles babbage"),
            CandidateRelation(
                subject="Ada", predicate="worked_with", object="Charles Babbage", negated=True
            ),
        ],
    )
    merged = merge_outputs(first, extra)
    babbage = merged.entities[0]
    assert babbage.name == "Charles Babbage" and babbage.type == "Person"
    assert babbage.description == "Mathematician"
    assert babbage.aliases == ["Babbage", "C. Babbage"]
    assert [e.name for e in merged.entities] == ["Charles Babbage", "Ada"]
    assert [(r.subject, r.negated) for r in merged.relations] == [("Ada", False), ("Ada", True)]


# -- cache key -------------------------------------------------------------------------


def test_cache_key_changes_with_every_input() -> None:
    ctx = DocumentContext(title="T", source="s", known_names=("A", "B"), vocabulary=("v",))
    params = {"temperature": 0.0, "gleaning": 1, "max_tokens": None}
    base = cache_key("text", ctx, "m", "p1", params)
    assert len(base) == 64 and base == cache_key(
        "text", ctx, "m", "p1", dict(reversed(params.items()))
    )
    variants = [
        cache_key("text!", ctx, "m", "p1", params),
        cache_key("text", replace(ctx, title="U"), "m", "p1", params),
        cache_key("text", replace(ctx, source="t"), "m", "p1", params),
        cache_key("text", replace(ctx, known_names=("B", "A")), "m", "p1", params),
        cache_key("text", replace(ctx, vocabulary=()), "m", "p1", params),
        cache_key("text", ctx, "m2", "p1", params),
        cache_key("text", ctx, "m", "p2", params),
        cache_key("text", ctx, "m", "p1", {**params, "gleaning": 0}),
        cache_key("text", ctx, "m", "p1", {**params, "temperature": 0.5}),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_extractor_cache_key_includes_its_parameters(make_llm_client: MakeClient) -> None:
    client = make_llm_client()
    chunk = Chunk(ordinal=0, text="x")
    one = LLMExtractor(client, realm="r", gleaning=1).cache_key(chunk, CONTEXT)
    two = LLMExtractor(client, realm="r", gleaning=2).cache_key(chunk, CONTEXT)
    other_model = LLMExtractor(client, realm="r", model="m2").cache_key(chunk, CONTEXT)
    assert len({one, two, other_model}) == 3
    assert one == LLMExtractor(client, realm="other", gleaning=1).cache_key(chunk, CONTEXT)


# -- prompt and schema -----------------------------------------------------------------


def test_prompt_carries_the_rules() -> None:
    system = extraction_messages("x", CONTEXT)[0]["content"]
    assert isinstance(system, str)
    for connector in VAGUE_CONNECTORS:
        assert connector in system
    for phrase in ("aliases", "negated", "near each other", "another document", "null"):
        assert phrase in system
    user = extraction_messages("the chunk", DocumentContext())[1]["content"]
    assert isinstance(user, str)
    assert "<chunk>\nthe chunk\n</chunk>" in user
    assert "<vocabulary>" not in user and "<known_entities>" not in user
    found = ExtractionOutput(entities=[CandidateEntity(name="Ada")])
    glean = gleaning_messages("the chunk", DocumentContext(), found)[1]["content"]
    assert isinstance(glean, str)
    assert "<already_extracted>" in glean and '"Ada"' in glean and "missing" in glean


def test_schema_accepts_every_scripted_output_and_matches_the_model(
    llm_fixtures_dir: Path,
) -> None:
    validator = jsonschema.Draft202012Validator(EXTRACTION_SCHEMA)
    for path in sorted((llm_fixtures_dir / "extractions").rglob("*.json")):
        raw = json.loads(path.read_text("utf-8"))
        for part in ("output", "glean"):
            validator.validate(raw[part])
    items = EXTRACTION_SCHEMA["properties"]
    entity_props = set(items["entities"]["items"]["properties"])
    relation_props = set(items["relations"]["items"]["properties"])
    assert entity_props == set(CandidateEntity.model_fields)
    assert relation_props == set(CandidateRelation.model_fields)
