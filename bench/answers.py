"""Answer recall for single-entity questions and evidence recall for questions that need
several hops, measured through ``query_data``.

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

The evidence-chain corpus (:func:`make_chain_corpus`) asks along paths: the evidence of
"In which country is the university where S studied located?" is two relations, S's
``studied_at`` and the university's ``located_in``; recall@10 and @25 are the share of a
question's evidence among the first 10 and 25 relations of the answer, per kind of question.
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


# ------------------------------------------------------------ evidence chains


@dataclass(frozen=True)
class ChainQuestion:
    """A question whose evidence is a set of relations, possibly several hops from the
    entity it names."""

    text: str
    evidence: frozenset[Triple]
    kind: str
    """``2-hop`` (the question names both links' predicates), ``2-hop, 1st unnamed`` (it
    names the second link's only), ``2-hop, 2nd unnamed`` (the first link's, and the far
    end's kind), ``3-hop``, ``time-scoped``, ``paraphrased`` or ``1-hop``."""
    body: tuple[tuple[str, Any], ...] = ()
    """Request fields beyond the query (``as_of``, ``hops``)."""


def make_chain_corpus(
    syllables: Sequence[str], seed: int = 36
) -> tuple[list[AnswerDoc], list[ChainQuestion]]:
    """A realm of scholars, labs, universities, foundations and journals, and questions
    whose evidence is a chain of relations.

    200 scholars (first and last names drawn from small pools, so names share words) each
    studied at a university, belong to a lab, were born in a country, wrote one to three
    papers and collaborated with two to four others; each lab is part of a university and
    funded by a foundation; universities are located in countries, foundations based in
    one and founded by a patron; each paper appeared in a journal, each journal was edited
    by three scholars in succession. Questions name one entity and ask along a chain:
    two hops ("In which country is the university where S studied located?", "Which labs
    are funded by the foundation that P founded?"), three ("Who edited the journal that
    published the paper S wrote?"), time-scoped one-hop questions with ``as_of``,
    paraphrased ones whose words name no predicate, and direct one-hop ones."""
    rng = random.Random(seed)
    words = _names(rng, 260, syllables, "")
    firsts, lasts = words[:24], words[24:104]
    countries = words[104:112]
    universities = [f"{w} University" for w in words[112:128]]
    labs = [f"{w} Lab" for w in words[128:158]]
    foundations = [f"{w} Foundation" for w in words[158:168]]
    journals = [f"{w} Review" for w in words[168:180]]
    patrons = [f"{a} {b}" for a, b in zip(words[180:190], words[190:200], strict=True)]
    papers = [
        f"On {a} {b}" for a, b in zip(words[200:260], rng.sample(words[200:260], 60), strict=True)
    ]
    papers += [f"Notes on {a}" for a in words[200:260]]
    scholars: list[str] = []
    while len(scholars) < 200:
        name = f"{rng.choice(firsts)} {rng.choice(lasts)}"
        if name not in scholars:
            scholars.append(name)
    kinds = {
        **dict.fromkeys(scholars + patrons, "Person"),
        **dict.fromkeys(countries, "Country"),
        **dict.fromkeys(universities, "University"),
        **dict.fromkeys(labs + foundations, "Organization"),
        **dict.fromkeys(journals, "Periodical"),
        **dict.fromkeys(papers, "Work"),
    }
    dated: dict[Triple, tuple[str | None, str | None]] = {}
    located = {u: rng.choice(countries) for u in universities}
    part_of = {lab: rng.choice(universities) for lab in labs}
    funded = {lab: rng.choice(foundations) for lab in labs}
    based = {f: rng.choice(countries) for f in foundations}
    founder = dict(zip(foundations, patrons, strict=True))
    venue = {p: rng.choice(journals) for p in papers}
    editors: dict[str, list[tuple[str, int, int]]] = {}
    for j in journals:
        start = rng.randrange(1990, 2000)
        editors[j] = []
        for e in rng.sample(scholars, 3):
            span = rng.randrange(4, 9)
            editors[j].append((e, start, start + span - 1))
            start += span
    studied = {s: rng.choice(universities) for s in scholars}
    member = {s: rng.choice(labs) for s in scholars}
    born = {s: rng.choice(countries) for s in scholars}
    unwritten = rng.sample(papers, len(papers))
    wrote = {s: [unwritten.pop() for _ in range(rng.randint(1, 3))] for s in scholars[:40]}
    for s in scholars[40:]:
        wrote[s] = [unwritten.pop()] if unwritten and rng.random() < 0.3 else []
    triples: list[Triple] = []
    triples += [(u, "located_in", c) for u, c in located.items()]
    triples += [(lab, "part_of", u) for lab, u in part_of.items()]
    triples += [(lab, "funded_by", f) for lab, f in funded.items()]
    triples += [(f, "based_in", c) for f, c in based.items()]
    triples += [(f, "founded_by", p) for f, p in founder.items()]
    triples += [(p, "published_in", j) for p, j in venue.items()]
    for j, terms in editors.items():
        for e, first, last in terms:
            dated[(j, "edited_by", e)] = (str(first), str(last))
            triples.append((j, "edited_by", e))
    for s in scholars:
        triples += [(s, "studied_at", studied[s]), (s, "member_of", member[s])]
        triples += [(s, "born_in", born[s])] + [(s, "wrote", p) for p in wrote[s]]
        peers = rng.sample([x for x in scholars if x != s], rng.randint(2, 4))
        triples += [(s, "collaborated_with", x) for x in peers]
    triples = list(dict.fromkeys(triples))
    questions = _chain_questions(
        rng,
        scholars,
        patrons,
        located,
        part_of,
        funded,
        based,
        founder,
        venue,
        editors,
        studied,
        member,
        wrote,
    )
    rng.shuffle(triples)
    docs = []
    n_docs = 150
    for d in range(n_docs):
        rels = triples[d::n_docs]
        names = list(dict.fromkeys(n for s, _, o in rels for n in (s, o)))
        text = " ".join(f"{s} {p.replace('_', ' ')} {o}." for s, p, o in rels)
        docs.append(
            AnswerDoc(
                f"chains/{d:04d}.md",
                text,
                [(n, kinds[n]) for n in names],
                [(s, p, o, *dated.get((s, p, o), (None, None))) for s, p, o in rels],
            )
        )
    return docs, questions


def _chain_questions(
    rng: random.Random,
    scholars: list[str],
    patrons: list[str],
    located: dict[str, str],
    part_of: dict[str, str],
    funded: dict[str, str],
    based: dict[str, str],
    founder: dict[str, str],
    venue: dict[str, str],
    editors: dict[str, list[tuple[str, int, int]]],
    studied: dict[str, str],
    member: dict[str, str],
    wrote: dict[str, list[str]],
) -> list[ChainQuestion]:
    """Ten to twenty questions of each shape, about entities drawn at random."""
    out: list[ChainQuestion] = []
    authors = [s for s in scholars if wrote[s]]
    hops3 = (("hops", 3),)
    for s in rng.sample(scholars, 20):
        u = studied[s]
        out.append(
            ChainQuestion(
                f"In which country is the university where {s} studied located?",
                frozenset({(s, "studied_at", u), (u, "located_in", located[u])}),
                "2-hop",
            )
        )
    for s in rng.sample(scholars, 20):
        lab = member[s]
        out.append(
            ChainQuestion(
                f"Which foundation funds the lab that {s} is a member of?",
                frozenset({(s, "member_of", lab), (lab, "funded_by", funded[lab])}),
                "2-hop",
            )
        )
    for s in rng.sample(authors, 20):
        chain = {(s, "wrote", p) for p in wrote[s]} | {
            (p, "published_in", venue[p]) for p in wrote[s]
        }
        out.append(
            ChainQuestion(
                f"Which journals published the papers {s} wrote?", frozenset(chain), "2-hop"
            )
        )
    for p in rng.sample(patrons, 10):
        f = next(f for f, x in founder.items() if x == p)
        chain = {(f, "founded_by", p)} | {
            (lab, "funded_by", f) for lab, x in funded.items() if x == f
        }
        out.append(
            ChainQuestion(
                f"Which labs are funded by the foundation {p} founded?", frozenset(chain), "2-hop"
            )
        )
    for s in rng.sample(scholars, 20):
        lab = member[s]
        out.append(
            ChainQuestion(
                f"Which foundation funds the lab where {s} works?",
                frozenset({(s, "member_of", lab), (lab, "funded_by", funded[lab])}),
                "2-hop, 1st unnamed",
            )
        )
    for s in rng.sample(scholars, 20):
        u = studied[s]
        out.append(
            ChainQuestion(
                f"Which country is the university {s} studied at in?",
                frozenset({(s, "studied_at", u), (u, "located_in", located[u])}),
                "2-hop, 2nd unnamed",
            )
        )
    for s in rng.sample(scholars, 20):
        lab = member[s]
        f = funded[lab]
        chain = {(s, "member_of", lab), (lab, "funded_by", f), (f, "based_in", based[f])}
        out.append(
            ChainQuestion(
                f"In which country is the foundation based that funds the lab of {s}?",
                frozenset(chain),
                "3-hop",
                hops3,
            )
        )
    for s in rng.sample(authors, 20):
        chain = {(s, "wrote", p) for p in wrote[s]}
        for p in wrote[s]:
            chain.add((p, "published_in", venue[p]))
            chain |= {(venue[p], "edited_by", e) for e, _, _ in editors[venue[p]]}
        out.append(
            ChainQuestion(
                f"Who edited the journals that published the papers {s} wrote?",
                frozenset(chain),
                "3-hop",
                hops3,
            )
        )
    for j in rng.sample(list(editors), 12):
        e, first, last = rng.choice(editors[j])
        year = rng.randint(first, last)
        out.append(
            ChainQuestion(
                f"Who edited {j} in {year}?",
                frozenset({(j, "edited_by", e)}),
                "time-scoped",
                (("as_of", str(year)),),
            )
        )
    for s in rng.sample(scholars, 20):
        out.append(
            ChainQuestion(
                rng.choice((f"Where did {s} get a degree?", f"Which school did {s} attend?")),
                frozenset({(s, "studied_at", studied[s])}),
                "paraphrased",
            )
        )
    for s in rng.sample(scholars, 20):
        out.append(
            ChainQuestion(
                f"Which lab is {s} a member of?",
                frozenset({(s, "member_of", member[s])}),
                "1-hop",
            )
        )
    return out


def make_issue_corpus(
    syllables: Sequence[str], seed: int = 37
) -> tuple[list[AnswerDoc], list[ChainQuestion]]:
    """A held-out check in the shape the evidence chains were first measured on, never
    tuned against: 20 organisations, 10 cities, 160 people; each person works for an
    organisation, lives in a city and knows someone; each organisation is headquartered
    in a city and led by three people in succession. Questions: "Who led O in Y?" (with
    ``as_of``), "Who is employed at O?" (paraphrased: evidence all of O's ``works_for``),
    "In which city is the company that P works for headquartered?" (two hops)."""
    rng = random.Random(seed)
    words = _names(rng, 190, syllables, "")
    orgs = [f"{w} Group" for w in words[:20]]
    cities = words[20:30]
    people = [f"{a} {b}" for a, b in zip(words[30:110], words[110:190], strict=True)]
    people += [f"{b} {a}" for a, b in zip(words[30:110], words[110:190], strict=True)]
    works = {p: rng.choice(orgs) for p in people}
    hq = {o: rng.choice(cities) for o in orgs}
    triples: list[Triple] = [(o, "headquartered_in", c) for o, c in hq.items()]
    dated: dict[Triple, tuple[str | None, str | None]] = {}
    leaders: dict[str, list[tuple[str, int, int]]] = {}
    for o in orgs:
        start, leaders[o] = rng.randrange(1990, 2000), []
        for p in rng.sample(people, 3):
            span = rng.randrange(3, 8)
            leaders[o].append((p, start, start + span - 1))
            dated[(o, "led_by", p)] = (str(start), str(start + span - 1))
            triples.append((o, "led_by", p))
            start += span
    for p in people:
        triples += [(p, "works_for", works[p]), (p, "lives_in", rng.choice(cities))]
        triples.append((p, "knows", rng.choice([x for x in people if x != p])))
    triples = list(dict.fromkeys(triples))
    questions: list[ChainQuestion] = []
    for o in rng.sample(orgs, 10):
        p, first, last = rng.choice(leaders[o])
        year = rng.randint(first, last)
        questions.append(
            ChainQuestion(
                f"Who led {o} in {year}?",
                frozenset({(o, "led_by", p)}),
                "time-scoped",
                (("as_of", str(year)),),
            )
        )
    for o in rng.sample(orgs, 10):
        staff = frozenset((p, "works_for", o) for p in people if works[p] == o)
        questions.append(ChainQuestion(f"Who is employed at {o}?", staff, "paraphrased"))
    for p in rng.sample(people, 40):
        o = works[p]
        questions.append(
            ChainQuestion(
                f"In which city is the company that {p} works for headquartered?",
                frozenset({(p, "works_for", o), (o, "headquartered_in", hq[o])}),
                "2-hop",
            )
        )
    kinds = {**dict.fromkeys(people, "Person"), **dict.fromkeys(orgs, "Organization")}
    kinds |= dict.fromkeys(cities, "City")
    rng.shuffle(triples)
    docs = []
    for d in range(100):
        rels = triples[d::100]
        names = list(dict.fromkeys(n for s, _, o in rels for n in (s, o)))
        docs.append(
            AnswerDoc(
                f"held-out/{d:04d}.md",
                " ".join(f"{s} {p.replace('_', ' ')} {o}." for s, p, o in rels),
                [(n, kinds[n]) for n in names],
                [(s, p, o, *dated.get((s, p, o), (None, None))) for s, p, o in rels],
            )
        )
    return docs, questions


@dataclass(frozen=True)
class ChainFigures:
    mode: str
    recall: dict[str, tuple[float, float]]
    """Mean evidence recall at 10 and at 25 relations, by question kind."""


CUTS = (10, 25)


async def chain_recall(
    client: httpx.AsyncClient,
    realm: str,
    questions: Sequence[ChainQuestion],
    mode: str,
    **body: Any,
) -> ChainFigures:
    """Mean evidence recall@10 and @25 of ``questions`` through ``query_data`` in ``mode``:
    the share of a question's evidence relations among the first 10 (25) relations of the
    answer, out of at most 10 (25)."""
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for q in questions:
        r = await client.post(
            f"/v1/realms/{realm}/query_data",
            json={"query": q.text, "mode": mode, "relation_top_k": SLOTS, **dict(q.body), **body},
        )
        r.raise_for_status()
        got = [(x["subject"], x["predicate"], x["object"]) for x in r.json()["relations"]]
        cells = tuple(len(q.evidence & set(got[:k])) / min(len(q.evidence), k) for k in CUTS)
        by_kind.setdefault(q.kind, []).append(cells)  # type: ignore[arg-type]
    recall = {
        kind: (statistics.mean(c[0] for c in cells), statistics.mean(c[1] for c in cells))
        for kind, cells in by_kind.items()
    }
    return ChainFigures(mode, recall)
