"""Evidence recall of personalized PageRank (HippoRAG's ranking) on the evidence-chain
corpus, beside ``query_data``'s evidence chains, on the same realm and questions.

HippoRAG ranks by where random walks that restart at the question's named entities
settle: PageRank over the realm's graph (entities as nodes, the relations ``as_of``
admits as undirected edges), personalized uniformly on the entities the question names
(matched as ``query_data`` matches names), restart probability 0.5, 40 iterations. A
relation scores the sum of its ends' mass. Two variants:

* ``ppr``: the walk as HippoRAG has it, every edge alike;
* ``ppr+terms``: an edge whose predicate names a question term (the predicate focus's
  English-stem match, decided by PostgreSQL) weighs ``--term-weight`` (10) times more, so
  the walk follows what the question names — the question steering the flow, as PathRAG
  keeps the paths resources flow along.

Run: ``.venv/bin/python bench/ppr.py`` (services as ``bench/query.py`` finds them).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import uuid
from collections import defaultdict

import httpx
import psycopg
from answers import CUTS, SLOTS, ChainQuestion, chain_recall, make_chain_corpus
from psycopg import sql
from query import DIM, SYL, Doc, _drop, load_writer

from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.infra import services
from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.query_service.focus import question_focus
from tidegraph.query_service.keywords import lexical_keywords, websearch_text
from tidegraph.query_service.retrieval import _name_candidates
from tidegraph.schemas.names import name_key
from tidegraph.schemas.periods import covered

Edge = tuple[int, str, str, str, str | None, str | None]
"""(id, subject, predicate, object, valid_from, valid_to)."""


def ppr(
    edges: list[tuple[str, str, float]], seeds: list[str], restart: float = 0.5
) -> dict[str, float]:
    """Personalized PageRank over undirected weighted ``edges``, restarting at ``seeds``."""
    out_weight: dict[str, float] = defaultdict(float)
    nbrs: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for a, b, w in edges:
        nbrs[a].append((b, w))
        nbrs[b].append((a, w))
        out_weight[a] += w
        out_weight[b] += w
    start = {s: 1.0 / len(seeds) for s in seeds}
    mass = dict(start)
    for _ in range(40):
        nxt: dict[str, float] = defaultdict(float)
        for s, m in start.items():
            nxt[s] += restart * m
        for node, m in mass.items():
            if not nbrs[node]:
                nxt[node] += (1 - restart) * m  # a dead end keeps its mass
                continue
            for other, w in nbrs[node]:
                nxt[other] += (1 - restart) * m * w / out_weight[node]
        mass = nxt
    return mass


def _admitted(e: Edge, as_of: str | None) -> bool:
    if as_of is None:
        return True
    first, last = covered(as_of)
    return (e[4] is None or covered(e[4])[0] <= last) and (
        e[5] is None or covered(e[5])[1] >= first
    )


async def _graph(dsn: str, realm: str) -> tuple[list[Edge], set[str]]:
    s = sql.Identifier(f"realm_{realm}")
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        rows = await (
            await conn.execute(
                sql.SQL(
                    "SELECT r.id, es.name, r.predicate, eo.name, r.valid_from, r.valid_to"
                    " FROM {s}.relations r JOIN {s}.entities es ON es.id = r.subject_id"
                    " JOIN {s}.entities eo ON eo.id = r.object_id WHERE r.status = 'current'"
                ).format(s=s)
            )
        ).fetchall()
        names = await (
            await conn.execute(sql.SQL("SELECT name FROM {}.entities").format(s))
        ).fetchall()
    edges: list[Edge] = [(int(i), s_, p, o, vf, vt) for i, s_, p, o, vf, vt in rows]
    return edges, {str(n[0]) for n in names}


async def _names_terms(dsn: str, predicates: set[str], terms: set[str]) -> set[tuple[str, str]]:
    """(predicate, term) pairs where the predicate names the term, by PostgreSQL's stemmer."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        rows = await (
            await conn.execute(
                "SELECT p, t FROM unnest(%s::text[]) p, unnest(%s::text[]) t"
                " WHERE to_tsvector('english', replace(p, '_', ' '))"
                " @@ websearch_to_tsquery('english', t)",
                (sorted(predicates), [websearch_text((t,)) for t in sorted(terms)]),
            )
        ).fetchall()
    by_text = {websearch_text((t,)): t for t in terms}
    return {(p, by_text[t]) for p, t in rows}


def _recall(q: ChainQuestion, ranked: list[tuple[str, str, str]]) -> tuple[float, ...]:
    return tuple(len(q.evidence & set(ranked[:k])) / min(len(q.evidence), k) for k in CUTS)


async def main(args: argparse.Namespace) -> None:
    _, dsn = services.given_or_up()
    made, questions = make_chain_corpus(SYL)
    realm = f"bp_{uuid.uuid4().hex[:8]}"
    await load_writer(dsn, realm, [Doc(d.key, d.text, d.entities, d.relations) for d in made])
    try:
        edges, entity_names = await _graph(dsn, realm)
        keys = {name_key(n): n for n in entity_names}
        focus = {
            q.text: question_focus(q.text, _name_candidates(q.text, lexical_keywords(q.text)))
            for q in questions
        }
        all_terms = {t for f in focus.values() for t in f.terms}
        naming = await _names_terms(dsn, {e[2] for e in edges}, all_terms)
        cells: dict[str, dict[str, list[tuple[float, ...]]]] = {"ppr": {}, "ppr+terms": {}}
        for q in questions:
            f = focus[q.text]
            seeds = [keys[k] for k in f.roles if k in keys]
            body = dict(q.body)
            admitted = [e for e in edges if _admitted(e, body.get("as_of"))]
            for variant, weight in (("ppr", 1.0), ("ppr+terms", args.term_weight)):
                w = {
                    e[0]: weight if any((e[2], t) in naming for t in f.terms) else 1.0
                    for e in admitted
                }
                mass = ppr([(e[1], e[3], w[e[0]]) for e in admitted], seeds or ["?"])
                order = sorted(
                    admitted, key=lambda e: (-(mass.get(e[1], 0) + mass.get(e[3], 0)), e[0])
                )
                ranked = [(e[1], e[2], e[3]) for e in order[:SLOTS]]
                cells[variant].setdefault(q.kind, []).append(_recall(q, ranked))
        pool = make_pool(dsn, min_size=1, max_size=2)
        await pool.open(wait=True)
        try:
            app = create_app(
                QuerySettings(), Deps(pool=pool, embedders=lambda r, p: HashingEmbedder(DIM))
            )
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://b"
            ) as c:
                served = await chain_recall(c, realm, questions, "mix")
        finally:
            await pool.close()
        kinds = list(dict.fromkeys(q.kind for q in questions))
        print(f"evidence recall@{'/@'.join(map(str, CUTS))} on {len(questions)} questions")
        print(f"  {'ranking':<12}" + "".join(f"{k:>20}" for k in kinds))
        for variant, by_kind in cells.items():
            means = {k: [statistics.mean(c[i] for c in by_kind[k]) for i in (0, 1)] for k in kinds}
            print(f"  {variant:<12}" + "".join(_cell(*means[k]) for k in kinds))
        row = "".join(_cell(*served.recall[k]) for k in kinds)
        print(f"  {'query_data':<12}{row}   (mix: evidence chains)")
    finally:
        await _drop(dsn, realm)


def _cell(at10: float, at25: float) -> str:
    return f"{f'{at10:.2f} / {at25:.2f}':>20}"


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--term-weight", type=float, default=10.0)
    asyncio.run(main(p.parse_args()))


if __name__ == "__main__":
    cli()
