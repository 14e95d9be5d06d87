"""Entity resolution within a space: name, then alias, merged order-independently (§4.6)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegraph.indexer.graph.resolution import (
    EntityRecord,
    Resolution,
    merge_records,
    resolve_chunk,
    surface_forms,
)
from tidegraph.schemas.extraction import CandidateEntity


class Store:
    """An in-memory space: lowercased surface form → record, as the database would answer."""

    def __init__(self) -> None:
        self.by_form: dict[str, EntityRecord] = {}

    def apply(self, resolution: Resolution) -> None:
        for resolved in resolution.entities:
            stale = [resolved.existing] if resolved.existing else []
            for record in (*stale, *resolved.absorbed):
                for form in record.forms:
                    assert self.by_form.pop(form) == record
            for form in resolved.record.forms:
                assert form not in self.by_form, "a surface form must name one record"
                self.by_form[form] = resolved.record

    def resolve(self, candidates: list[CandidateEntity]) -> Resolution:
        resolution = resolve_chunk(candidates, self.by_form)
        self.apply(resolution)
        return resolution

    @property
    def records(self) -> set[EntityRecord]:
        return set(self.by_form.values())


def test_shorter_name_upgrades_and_is_demoted_to_alias() -> None:
    store = Store()
    store.resolve([CandidateEntity(name="Babbage", type="Person", description="Mathematician.")])
    res = store.resolve([CandidateEntity(name="Charles Babbage", aliases=["Babbage"])])
    (only,) = res.entities
    assert only.existing == EntityRecord("Babbage", "Person", "Mathematician.")
    assert only.record == EntityRecord("Charles Babbage", "Person", "Mathematician.", ("Babbage",))
    assert only.changed
    # and never the reverse
    res = store.resolve([CandidateEntity(name="Babbage", description="Inventor of engines.")])
    assert res.entities[0].record == EntityRecord(
        "Charles Babbage", "Person", "Inventor of engines.", ("Babbage",)
    )
    assert res.canonical("babbage") == "Charles Babbage"


def test_concept_stub_never_strips_a_specific_type() -> None:
    store = Store()
    store.resolve([CandidateEntity(name="Analytical Engine", type="Product", description="A.")])
    res = store.resolve([CandidateEntity(name="analytical engine", type="Concept")])
    assert res.entities[0].record == EntityRecord("Analytical Engine", "Product", "A.")
    assert not res.entities[0].changed


def test_alias_matches_in_both_directions() -> None:
    store = Store()
    store.resolve([CandidateEntity(name="Ada Lovelace", aliases=["Lovelace"])])
    res = store.resolve([CandidateEntity(name="lovelace")])
    assert res.entities[0].record == EntityRecord("Ada Lovelace", aliases=("Lovelace",))
    # a longer form arriving as a name does become canonical: the paper's rule
    res = store.resolve([CandidateEntity(name="Augusta Ada King", aliases=["Ada Lovelace"])])
    assert res.entities[0].record.name == "Augusta Ada King"
    store = Store()
    store.resolve([CandidateEntity(name="Lovelace")])
    res = store.resolve([CandidateEntity(name="Ada King", aliases=["Lovelace"])])
    # the new name hit the stored one through its alias; equal lengths, "ada king" sorts first
    assert res.entities[0].existing == EntityRecord("Lovelace")
    assert res.entities[0].record == EntityRecord("Ada King", aliases=("Lovelace",))


def test_a_bridging_candidate_merges_two_stored_records() -> None:
    store = Store()
    store.resolve([CandidateEntity(name="Babbage", type="Person")])
    store.resolve([CandidateEntity(name="Charles Babbage", description="Polymath.")])
    res = store.resolve(
        [CandidateEntity(name="C. Babbage", aliases=["Babbage", "Charles Babbage"])]
    )
    (only,) = res.entities
    assert only.existing == EntityRecord("Charles Babbage", description="Polymath.")
    assert only.absorbed == (EntityRecord("Babbage", "Person"),)
    assert store.records == {
        EntityRecord("Charles Babbage", "Person", "Polymath.", ("Babbage", "C. Babbage"))
    }


def test_candidates_of_one_chunk_merge_with_each_other() -> None:
    res = resolve_chunk(
        [
            CandidateEntity(name="Ada", aliases=["Ada Lovelace"]),
            CandidateEntity(name="Ada Lovelace", type="Person"),
            CandidateEntity(name="Difference Engine"),
        ],
        {},
    )
    assert [r.record.name for r in res.entities] == ["Ada Lovelace", "Difference Engine"]
    assert res.same_entity("ada", "ADA LOVELACE")
    assert not res.same_entity("Ada", "Difference Engine")
    with pytest.raises(KeyError):
        res.canonical("Babbage")


def test_spelling_and_ties() -> None:
    merged = merge_records(
        [
            EntityRecord("charles babbage"),
            EntityRecord("CHARLES BABBAGE", aliases=("C. BABBAGE", "c. babbage", "C. Babbage")),
            EntityRecord("Ada Byron"),
        ]
    )
    assert merged.name == "CHARLES BABBAGE"  # both all one case: code-point order decides
    assert merged.aliases == ("Ada Byron", "C. Babbage")
    # a better spelling seen only as an alias still wins its form
    merged = merge_records(
        [EntityRecord("charles babbage"), EntityRecord("X", aliases=("Charles Babbage",))]
    )
    assert merged.name == "Charles Babbage"
    # equal lengths: the lexicographically first lowercased form is canonical
    assert merge_records([EntityRecord("Bob"), EntityRecord("Ann")]).name == "Ann"
    assert merge_records([EntityRecord("X", "Person"), EntityRecord("X", "Organization")]).type == (
        "Organization"
    )
    assert merge_records(
        [EntityRecord("X", description="bb"), EntityRecord("X", description="ab")]
    ) == (EntityRecord("X", description="ab"))


def test_record_normalisation() -> None:
    record = EntityRecord(" Ada  Lovelace ", "", " d ", ("ada lovelace", "Ada", "ADA", " "))
    assert record == EntityRecord("Ada Lovelace", "Concept", "d", ("Ada",))
    assert record.forms == frozenset({"ada lovelace", "ada"})
    assert surface_forms(CandidateEntity(name="Ada", aliases=["A. L."])) == {"ada", "a. l."}
    with pytest.raises(ValueError, match="non-empty"):
        EntityRecord("  ")


_FORMS = ["Babbage", "Charles Babbage", "C. Babbage", "charles babbage", "Ada", "Ada Lovelace",
          "Lovelace", "Countess", "Engine", "Analytical Engine"]  # fmt: skip
_KINDS = ["Concept", "Person", "Product", "Organization"]
_DESCRIPTIONS = ["", "x", "short", "a longer one", "a longer two"]


def _candidates(seed: int) -> list[CandidateEntity]:
    """Up to ten candidates over a small pool of forms, so that most of them collide."""
    rng = random.Random(seed)
    return [
        CandidateEntity(
            name=rng.choice(_FORMS),
            type=rng.choice(_KINDS),
            description=rng.choice(_DESCRIPTIONS),
            aliases=rng.sample(_FORMS, k=rng.randint(0, 2)),
        )
        for _ in range(rng.randint(0, 10))
    ]


_CANDIDATE_LISTS = st.integers(0, 2**32).map(_candidates)


def _final(candidates: list[CandidateEntity], batch: int) -> set[EntityRecord]:
    store = Store()
    for i in range(0, len(candidates), batch):
        store.resolve(candidates[i : i + batch])
    return store.records


@settings(max_examples=100)
@given(_CANDIDATE_LISTS, st.randoms(use_true_random=False))
def test_outcome_does_not_depend_on_arrival_order(
    candidates: list[CandidateEntity], rng: random.Random
) -> None:
    expected = _final(candidates, batch=len(candidates) or 1)  # one chunk with everything
    for _ in range(3):
        shuffled = list(candidates)
        rng.shuffle(shuffled)
        assert _final(shuffled, batch=1) == expected
        assert _final(shuffled, batch=rng.randint(1, 4)) == expected


@given(_CANDIDATE_LISTS.filter(bool), st.randoms(use_true_random=False))
def test_merge_is_commutative_and_associative(
    candidates: list[CandidateEntity], rng: random.Random
) -> None:
    records = [EntityRecord.from_candidate(c) for c in candidates]
    whole = merge_records(records)
    shuffled = list(records)
    rng.shuffle(shuffled)
    cut = rng.randint(1, len(shuffled))
    left = merge_records(shuffled[:cut])
    grouped = merge_records([left, *shuffled[cut:]])
    assert grouped == whole
    assert merge_records([whole, whole]) == whole
