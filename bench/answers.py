"""Answer recall@25 for single-entity questions, measured through ``query_data``.

The corpus has the shape of the issue's side-by-side comparison: 300 documents, names
recurring across documents, and hub entities whose answering triples are a minority of
their relations. Twelve companies each acquire 5–16 others and are acquired by one or two;
twelve people each mentor 4–12 others and were mentored by one or two. Every hub also has
30–50 other relations (owns, supplies, partners with, competes with, funded; advised,
worked with, wrote, studied at), scattered over the documents with filler relations
between other names, so a walk capped per entity and newest-first reaches only part of
them.

Questions ask for one predicate in one direction — "Which companies did H acquire?",
"Who acquired H?", "Who did P mentor?", "Who mentored P?" — and the answering triples are
those of the corpus with the hub in the asked role. recall@25 is the share of them among
the first 25 relations of the answer (of at most 25 when more answer); "first right" is
the share of questions whose first relation answers them.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

N_DOCS = 300
SLOTS = 25

Triple = tuple[str, str, str]


@dataclass(frozen=True)
class Question:
    text: str
    answers: frozenset[Triple]
    kind: str
    """``subject`` (the hub acts) or ``object`` (the hub is acted on)."""


@dataclass(frozen=True)
class AnswerDoc:
    key: str
    text: str
    entities: list[tuple[str, str]]
    relations: list[tuple[str, str, str, str | None, str | None]]


def _names(rng: random.Random, n: int, syllables: Sequence[str], suffix: str) -> list[str]:
    out: dict[str, None] = {}
    while len(out) < n:
        word = "".join(rng.choice(syllables) for _ in range(rng.choice((2, 3)))).capitalize()
        out.setdefault(f"{word} {suffix}" if suffix else word, None)
    return list(out)


def make_answer_corpus(
    syllables: Sequence[str], seed: int = 15
) -> tuple[list[AnswerDoc], list[Question]]:
    """The corpus (300 documents) and its single-entity questions."""
    rng = random.Random(seed)
    companies = _names(rng, 160, syllables, "Holdings")
    people = [
        f"{a} {b}"
        for a, b in zip(
            _names(rng, 160, syllables, ""), _names(rng, 160, syllables, ""), strict=True
        )
    ]
    places = _names(rng, 40, syllables, "City")
    works = _names(rng, 60, syllables, "Treatise")
    company_hubs, person_hubs = companies[:12], people[:12]
    others_c, others_p = companies[12:], people[12:]
    triples: list[Triple] = []
    questions: list[Question] = []
    for hub in company_hubs:
        acquired = [(hub, "acquired", c) for c in rng.sample(others_c, rng.randint(5, 16))]
        by = [(c, "acquired", hub) for c in rng.sample(others_c, rng.randint(1, 2))]
        noise = [
            (hub, rng.choice(("owns", "supplies", "partners_with", "competes_with")), c)
            for c in rng.sample(others_c, rng.randint(25, 40))
        ] + [(p, "funded", hub) for p in rng.sample(others_p, rng.randint(5, 10))]
        triples += acquired + by + noise
        questions.append(
            Question(f"Which companies did {hub} acquire?", frozenset(acquired), "subject")
        )
        questions.append(Question(f"Who acquired {hub}?", frozenset(by), "object"))
    for hub in person_hubs:
        mentored = [(hub, "mentored", p) for p in rng.sample(others_p, rng.randint(4, 12))]
        by = [(p, "mentored", hub) for p in rng.sample(others_p, rng.randint(1, 2))]
        noise = (
            [(hub, "advised", c) for c in rng.sample(others_c, rng.randint(8, 14))]
            + [(hub, "worked_with", p) for p in rng.sample(others_p, rng.randint(10, 18))]
            + [(hub, "wrote", w) for w in rng.sample(works, rng.randint(3, 8))]
            + [(hub, "studied_at", c) for c in rng.sample(places, rng.randint(1, 3))]
        )
        triples += mentored + by + noise
        questions.append(Question(f"Who did {hub} mentor?", frozenset(mentored), "subject"))
        questions.append(Question(f"Who mentored {hub}?", frozenset(by), "object"))
    for _ in range(900):  # filler between other names, so names recur in many documents
        s, o = rng.sample(others_p + others_c, 2)
        triples.append((s, rng.choice(("worked_with", "advised", "owns", "mentored")), o))
    triples = list(dict.fromkeys(triples))
    rng.shuffle(triples)
    kinds = {**dict.fromkeys(companies, "Organization"), **dict.fromkeys(people, "Person")}
    kinds |= {**dict.fromkeys(places, "Place"), **dict.fromkeys(works, "Work")}
    docs = []
    for d in range(N_DOCS):
        rels = triples[d::N_DOCS]
        names = list(dict.fromkeys(n for s, _, o in rels for n in (s, o)))
        text = " ".join(f"{s} {p.replace('_', ' ')} {o}." for s, p, o in rels)
        docs.append(
            AnswerDoc(
                f"answers/{d:04d}.md",
                text,
                [(n, kinds[n]) for n in names],
                [(s, p, o, None, None) for s, p, o in rels],
            )
        )
    return docs, questions


@dataclass(frozen=True)
class RecallFigures:
    mode: str
    recall: dict[str, float]
    """Mean recall@25 by question kind (``subject``, ``object``, ``all``)."""
    first_right: float
    """Share of questions whose first relation answers them."""


async def answer_recall(
    client: httpx.AsyncClient,
    realm: str,
    questions: Sequence[Question],
    mode: str,
    **body: Any,
) -> RecallFigures:
    """Mean recall@25 of ``questions`` through ``query_data`` in ``mode``."""
    by_kind: dict[str, list[float]] = {"subject": [], "object": []}
    first = 0
    for q in questions:
        r = await client.post(
            f"/v1/realms/{realm}/query_data",
            json={"query": q.text, "mode": mode, "relation_top_k": SLOTS, **body},
        )
        r.raise_for_status()
        got = [(x["subject"], x["predicate"], x["object"]) for x in r.json()["relations"]]
        found = len(q.answers & set(got[:SLOTS]))
        by_kind[q.kind].append(found / min(len(q.answers), SLOTS))
        first += bool(got) and got[0] in q.answers
    every = [x for xs in by_kind.values() for x in xs]
    recall = {k: statistics.mean(v) for k, v in by_kind.items() if v}
    recall["all"] = statistics.mean(every)
    return RecallFigures(mode, recall, first / len(questions))
