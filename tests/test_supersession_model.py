"""The residue the declared rules cannot see, decided by the model's answers (paper §7.4):
one subject, one predicate (neither functional nor symmetric), two objects — compared with
a brute-force model written from the rule's statement, for every arrival order."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegraph.indexer.extraction.contradiction_prompt import (
    SYSTEM_MARK,
    answer_key,
    contradiction_messages,
    parse_contradiction,
)
from tidegraph.indexer.graph.supersession import (
    Assertion,
    Mechanism,
    Question,
    Residue,
    Supersession,
    Unanswered,
    question,
    residue_questions,
    resolve_supersession,
)
from tidegraph.schemas.realm_config import FunctionalSide

from llm_server import CONTRADICTION_MARK

GROUPS = [{"ally_of", "enemy_of"}]
FUNCTIONAL: dict[str, FunctionalSide] = {"born_in": "subject"}
SYMMETRIC = frozenset({"married_to"})


def _a(id: str, s: str, p: str, o: str, order_key: str, *, negated: bool = False) -> Assertion:
    return Assertion(id, s, o, p, negated, order_key, f"{s}\x00{o}", f"{s} {p} {o}")


def test_a_yes_supersedes_the_earlier_by_order_and_a_no_keeps_both() -> None:
    paris = _a("paris", "Ada", "lives_in", "Paris", "2019")
    berlin = _a("berlin", "Ada", "lives_in", "Berlin", "2021")
    asked = question(paris.text, berlin.text)
    yes = Residue({asked: True}, SYMMETRIC)
    assert resolve_supersession([berlin, paris], GROUPS, FUNCTIONAL, yes) == {
        "paris": Supersession("berlin", "model"),
        "berlin": None,
    }
    no = Residue({asked: False}, SYMMETRIC)
    assert resolve_supersession([paris, berlin], GROUPS, FUNCTIONAL, no) == {
        "paris": None,
        "berlin": None,
    }
    # A realm that does not ask the model sees no conflict at all.
    assert resolve_supersession([paris, berlin], GROUPS, FUNCTIONAL) == {
        "paris": None,
        "berlin": None,
    }


def test_an_unanswered_question_is_raised_not_guessed() -> None:
    paris = _a("paris", "Ada", "lives_in", "Paris", "2019")
    berlin = _a("berlin", "Ada", "lives_in", "Berlin", "2021")
    with pytest.raises(Unanswered) as raised:
        resolve_supersession([paris, berlin], GROUPS, FUNCTIONAL, Residue({}, SYMMETRIC))
    assert raised.value.questions == (question(paris.text, berlin.text),)


def test_what_is_never_asked() -> None:
    live = [
        _a("born1", "Ada", "born_in", "London", "2019"),  # functional: its own rule
        _a("born2", "Ada", "born_in", "Paris", "2020"),
        _a("m1", "Ada", "married_to", "Bob", "2019"),  # symmetric: no subject side
        _a("m2", "Ada", "married_to", "Carl", "2020"),
        _a("deny", "Ada", "lives_in", "Rome", "2021", negated=True),  # a denial
        _a("live", "Ada", "lives_in", "Oslo", "2018"),
        _a("other", "Eve", "lives_in", "Rome", "2018"),  # another subject
        _a("ally", "Ada", "ally_of", "Bob", "2018"),  # another predicate
    ]
    ids = {a.id for a in live}
    assert residue_questions(live, FUNCTIONAL, SYMMETRIC, ids) == set()
    result = resolve_supersession(live, GROUPS, FUNCTIONAL, Residue({}, SYMMETRIC))
    assert result["born1"] == Supersession("born2", "functional")
    assert result["m1"] is None and result["m2"] is None and result["live"] is None


def test_questions_are_unordered_and_keys_stable() -> None:
    assert question("b", "a") == question("a", "b") == ("a", "b")
    assert answer_key(("a", "b")) == answer_key(question("b", "a"))
    assert answer_key(("a", "b")) != answer_key(("a", "c"))
    assert len(answer_key(("a", "b"))) == 64


def test_prompt_layout_and_answers() -> None:
    messages = contradiction_messages(("Ada lives in Berlin", "Ada lives in Paris"))
    system, user = (str(m.get("content")) for m in messages)
    assert system.startswith(SYSTEM_MARK) and SYSTEM_MARK == CONTRADICTION_MARK
    assert user == "<first>Ada lives in Berlin</first>\n<second>Ada lives in Paris</second>"
    assert parse_contradiction({"contradicts": True}) is True
    assert parse_contradiction({"contradicts": False}) is False
    for bad in ({"contradicts": "yes"}, {}, ["contradicts"], {"contradicts": 1}):
        with pytest.raises(ValueError):
            parse_contradiction(bad)


# --- property: the rule against a brute-force model ----------------------------------

_OBJECTS = ["Paris", "Berlin", "Rome", "Oslo"]
_PREDICATES = ["lives_in", "speaks", "born_in", "married_to", "ally_of", "enemy_of"]


def _world(seed: int) -> tuple[list[Assertion], dict[Question, bool]]:
    """Up to 12 live relations of two subjects, one per identity, orders that may tie,
    and a random answer to every question that could be asked."""
    rng = random.Random(seed)
    rows: dict[tuple[str, str, str, bool], str] = {}
    for _ in range(rng.randint(0, 12)):
        key = (
            rng.choice(["Ada", "Eve"]),
            rng.choice(_PREDICATES),
            rng.choice(_OBJECTS),
            rng.random() < 0.2,
        )
        rows[key] = rng.choice(["2019", "2020", "2021"])
    live = [
        _a(f"r{i}", s, p, o, key, negated=n) for i, ((s, p, o, n), key) in enumerate(rows.items())
    ]
    answers = {
        question(a.text, b.text): rng.random() < 0.5 for a, b in itertools.combinations(live, 2)
    }
    return live, answers


def _brute_conflict(a: Assertion, b: Assertion, answers: dict[Question, bool]) -> Mechanism | None:
    """Every rule as the module states it, for two different relations."""
    if (a.subject, a.object) == (b.subject, b.object):
        if a.predicate == b.predicate:
            return "negation" if a.negated != b.negated else None
        if a.negated or b.negated:
            return None
        shared = any(a.predicate in g and b.predicate in g for g in GROUPS)
        return "exclusive_group" if shared else None
    if a.predicate != b.predicate or a.negated or b.negated:
        return None
    if a.predicate in FUNCTIONAL:
        return "functional" if a.subject == b.subject else None  # born_in: by subject
    if a.predicate in SYMMETRIC or a.subject != b.subject:
        return None
    return "model" if answers[question(a.text, b.text)] else None


@settings(max_examples=300)
@given(st.integers(0, 2**32).map(_world), st.randoms(use_true_random=False))
def test_residue_matches_a_brute_force_model_in_every_arrival_order(
    world: tuple[list[Assertion], dict[Question, bool]], rng: random.Random
) -> None:
    live, answers = world
    needed = residue_questions(live, FUNCTIONAL, SYMMETRIC, {a.id for a in live})
    brute_needed = {
        question(a.text, b.text)
        for a, b in itertools.combinations(live, 2)
        if a.predicate == b.predicate
        and a.subject == b.subject
        and a.object != b.object
        and not (a.negated or b.negated)
        and a.predicate not in FUNCTIONAL
        and a.predicate not in SYMMETRIC
    }
    assert needed == brute_needed
    residue = Residue({q: answers[q] for q in needed}, SYMMETRIC)  # only what was asked
    result = resolve_supersession(live, GROUPS, FUNCTIONAL, residue)
    for _ in range(2):
        shuffled = list(live)
        rng.shuffle(shuffled)
        assert resolve_supersession(shuffled, GROUPS, FUNCTIONAL, residue) == result

    def rank(a: Assertion) -> tuple[str, str, bool, str, str]:
        return (a.order_key, a.predicate, a.negated, a.names, a.id)

    for a in live:  # superseded by the earliest later relation it conflicts with
        later = [
            (rank(b), b.id, mechanism)
            for b in live
            if rank(b) > rank(a) and (mechanism := _brute_conflict(a, b, answers))
        ]
        expected = Supersession(min(later)[1], min(later)[2]) if later else None
        assert result[a.id] == expected


def test_decided_restricts_what_is_asked_and_answered() -> None:
    a = _a("a", "Ada", "lives_in", "Paris", "2019")
    b = _a("b", "Ada", "lives_in", "Berlin", "2021")
    c = _a("c", "Eve", "speaks", "French", "2019")  # context only: its rivals not loaded
    d = _a("d", "Eve", "speaks", "German", "2020")
    assert residue_questions([a, b, c, d], FUNCTIONAL, SYMMETRIC, {"a", "b"}) == {
        question(a.text, b.text)
    }
    residue = Residue({question(a.text, b.text): True}, SYMMETRIC)
    assert resolve_supersession([a, b, c, d], GROUPS, FUNCTIONAL, residue, {"a", "b"}) == {
        "a": Supersession("b", "model"),
        "b": None,
    }
