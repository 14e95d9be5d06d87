"""The validation gates of paper Table 2."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.graph.gates import (
    DEFAULT_CONFIDENCE_FLOOR,
    Gate,
    GateConfig,
    apply_gates,
    check_name,
)
from tidegraph.schemas.extraction import CandidateEntity, CandidateRelation, ExtractionOutput

DEFAULT = GateConfig()


@pytest.mark.parametrize(
    ("name", "gate"),
    [
        ("", Gate.EMPTY_NAME),
        ("   ", Gate.EMPTY_NAME),
        ("x" * 201, Gate.OVER_LONG_NAME),
        ("he", Gate.PRONOMINAL_NAME),
        ("They", Gate.PRONOMINAL_NAME),
        ("it", Gate.PRONOMINAL_NAME),
        ("this", Gate.PRONOMINAL_NAME),
        ("his father", Gate.PRONOMINAL_NAME),
        ("Her second husband", Gate.PRONOMINAL_NAME),
        ("the company", Gate.PRONOMINAL_NAME),
        ("the young man", Gate.PRONOMINAL_NAME),
        ("this company", Gate.PRONOMINAL_NAME),
        ("$18.4 billion", Gate.BARE_QUANTITY),
        ("2.5%", Gate.BARE_QUANTITY),
        ("$1,326", Gate.BARE_QUANTITY),
        ("42", Gate.BARE_QUANTITY),
        ("EUR 3m", Gate.BARE_QUANTITY),
        ("$3M", Gate.BARE_QUANTITY),
        ("(1,326)", Gate.BARE_QUANTITY),
        ("-0.4 percentage points", Gate.BARE_QUANTITY),
        ("1984", Gate.BARE_QUANTITY),  # a bare year is a period, not a vertex
        ("Ada Lovelace and Charles Babbage", Gate.CONJUNCTIVE_NAME),
        ("Ludwig van Beethoven, Johann Sebastian Bach, and Franz Liszt", Gate.CONJUNCTIVE_NAME),
        ("Émile Zola & Gustave Flaubert", Gate.CONJUNCTIVE_NAME),
    ],
)
def test_name_gates_reject(name: str, gate: Gate) -> None:
    failed = check_name(name, DEFAULT)
    assert failed is not None
    assert failed[0] == gate


@pytest.mark.parametrize(
    "name",
    [
        "Charles Babbage",
        "x" * 200,
        "US",  # an acronym, not the pronoun
        "IT",
        "The Company",
        "My Fair Lady",
        "the internet",
        "3M",  # a company, not three million
        "Boeing 737",
        "Procter and Gamble",  # one-word conjuncts: one named thing
        "Pride and Prejudice",
        "War and Peace",
        "Harry Potter and the Philosopher's Stone",  # a lowercase word: a title
        "Johnson & Johnson",
        "Babbage's father",  # the possessive gate is off by default
        "Ampère’s force law",
    ],
)
def test_name_gates_pass(name: str) -> None:
    assert check_name(name, DEFAULT) is None


def test_possessive_gate_is_opt_in() -> None:
    strict = GateConfig(reject_possessive=True)
    for name in ("Babbage's father", "Ampère’s force law", "the Smiths' lawyer"):
        failed = check_name(name, strict)
        assert failed is not None
        assert failed[0] == Gate.POSSESSIVE_NAME
    assert check_name("Babbage's Analytical Engine", strict) is None


def _run(
    entities: list[CandidateEntity],
    relations: list[CandidateRelation],
    config: GateConfig = DEFAULT,
) -> tuple[list[CandidateEntity], list[CandidateRelation], dict[str, Gate]]:
    result = apply_gates(ExtractionOutput(entities=entities, relations=relations), config)
    gates: dict[str, Gate] = {}
    for r in result.rejections:
        record = r.record
        key = record.name if isinstance(record, CandidateEntity) else record.predicate
        gates[r.alias or key] = r.gate
    return list(result.entities), list(result.relations), gates


def _rel(subject: str, predicate: str, obj: str, **kw: object) -> CandidateRelation:
    return CandidateRelation.model_validate(
        {"subject": subject, "predicate": predicate, "object": obj, **kw}
    )


@pytest.mark.parametrize(
    "predicate",
    ["relates_to", "associated_with", "see_also", "related_to", "connected_to", "linked_to",
     "is_related_to", "has_relation", "involves", "Relates To", "was associated with", "",
     "!!!"],
)  # fmt: skip
def test_vague_predicates_are_rejected(predicate: str) -> None:
    entities = [CandidateEntity(name="Ada"), CandidateEntity(name="Babbage")]
    _, relations, gates = _run(entities, [_rel("Ada", predicate, "Babbage")])
    assert relations == []
    assert gates == {predicate: Gate.VAGUE_PREDICATE}


def test_accepted_records_are_canonical() -> None:
    entities, relations, gates = _run(
        [
            CandidateEntity(
                name="  Ada   Lovelace ", type="", aliases=["Ada", "ada lovelace", "Ada"]
            )
        ],
        [
            _rel(
                "Ada Lovelace",
                "Has Never Worked With",
                " Charles  Babbage",
                valid_from="May 1833",
                valid_to="later",
                description=" Denied. ",
            )
        ],
    )
    assert gates == {}
    assert entities == [
        CandidateEntity(name="Ada Lovelace", type="Concept", aliases=["Ada"]),
        CandidateEntity(name="Charles Babbage", type="Concept"),  # a stub for the endpoint
    ]
    assert relations == [
        _rel(
            "Ada Lovelace",
            "worked_with",
            "Charles Babbage",
            negated=True,
            valid_from="1833-05",
            valid_to=None,
            description="Denied.",
        )
    ]


def test_rejected_entities_orphan_their_relations() -> None:
    entities, relations, gates = _run(
        [
            CandidateEntity(name="Ada Lovelace", aliases=["she", "Ada"]),
            CandidateEntity(name="his father"),
            CandidateEntity(name="$18.4 billion"),
        ],
        [
            _rel("his father", "married_to", "Ada Lovelace"),
            _rel("Ada Lovelace", "earned", "$18.4 billion"),
            _rel("He", "worked_with", "Ada"),  # never listed as an entity: still a pronoun
            _rel("Ada", "wrote", "Notes"),
        ],
    )
    assert gates == {
        "she": Gate.PRONOMINAL_NAME,  # only the alias is dropped
        "his father": Gate.PRONOMINAL_NAME,
        "$18.4 billion": Gate.BARE_QUANTITY,
        "married_to": Gate.ORPHANED_ENDPOINT,
        "earned": Gate.ORPHANED_ENDPOINT,
        "worked_with": Gate.ORPHANED_ENDPOINT,
    }
    assert [e.name for e in entities] == ["Ada Lovelace", "Notes"]
    assert entities[0].aliases == ["Ada"]
    assert [(r.subject, r.predicate, r.object) for r in relations] == [("Ada", "wrote", "Notes")]


def test_self_loops_by_name_and_by_alias() -> None:
    _, relations, gates = _run(
        [CandidateEntity(name="Charles Babbage", aliases=["Babbage"])],
        [
            _rel("Babbage", "worked_with", "babbage"),
            _rel("Babbage", "influenced", "Charles Babbage"),
            _rel("Babbage", "designed", "Difference Engine"),
        ],
    )
    assert gates == {"worked_with": Gate.SELF_LOOP, "influenced": Gate.SELF_LOOP}
    assert [r.predicate for r in relations] == ["designed"]


def test_confidence_floor() -> None:
    assert DEFAULT_CONFIDENCE_FLOOR == 0.3
    relations = [
        _rel("A B", "designed", "C D", confidence=0.29),
        _rel("A B", "wrote", "C D", confidence=0.3),
        _rel("A B", "founded", "C D", confidence=float("nan")),
    ]
    _, accepted, gates = _run([], relations)
    assert [r.predicate for r in accepted] == ["wrote"]
    assert gates == {"designed": Gate.CONFIDENCE_FLOOR, "founded": Gate.CONFIDENCE_FLOOR}
    _, accepted, _ = _run([], relations[:2], GateConfig(confidence_floor=0.0))
    assert len(accepted) == 2


def test_custom_vague_list_and_name_length() -> None:
    config = GateConfig(vague_predicates=frozenset({"mentions"}), max_name_length=5)
    _, accepted, gates = _run(
        [], [_rel("Ada", "mentioned", "Bob"), _rel("Ada", "relates_to", "Bob")], config
    )
    assert gates == {"mentioned": Gate.VAGUE_PREDICATE}
    assert [r.predicate for r in accepted] == ["relates_to"]
    assert check_name("Babbage", config) == (Gate.OVER_LONG_NAME, "name is 7 characters, over 5")


_NAMES = st.sampled_from(
    ["Ada", "ada", "Charles Babbage", "Babbage", "he", "the company", "42", "",
     "Ada Lovelace and Charles Babbage", "Analytical Engine"]
)  # fmt: skip
_ENTITIES = st.builds(
    lambda n, a: CandidateEntity(name=n, aliases=a), _NAMES, st.lists(_NAMES, max_size=3)
)
_RELATIONS = st.builds(
    lambda s, p, o, c: _rel(s, p, o, confidence=c),
    _NAMES,
    st.sampled_from(["worked_with", "relates_to", "never_designed", "is_ally_of"]),
    _NAMES,
    st.sampled_from([0.1, 0.9]),
)


@given(st.lists(_ENTITIES, max_size=5), st.lists(_RELATIONS, max_size=6))
def test_gate_invariants(entities: list[CandidateEntity], rels: list[CandidateRelation]) -> None:
    result = apply_gates(ExtractionOutput(entities=entities, relations=rels))
    refused = [r for r in result.rejections if isinstance(r.record, CandidateRelation)]
    assert len(result.relations) + len(refused) == len(rels)
    forms = {f.lower() for e in result.entities for f in (e.name, *e.aliases)}
    for relation in result.relations:
        assert relation.subject.lower() in forms and relation.object.lower() in forms
        assert relation.subject.lower() != relation.object.lower()
        assert relation.confidence >= DEFAULT_CONFIDENCE_FLOOR
    for entity in result.entities:
        assert check_name(entity.name, DEFAULT) is None
        assert all(check_name(a, DEFAULT) is None for a in entity.aliases)
    assert apply_gates(ExtractionOutput(entities=entities, relations=rels)) == result
