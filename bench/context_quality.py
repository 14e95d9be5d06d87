"""What extracting a document's chunks side by side costs in answers.

The answer-recall corpus (``bench/answers.py``: hub companies and people, single-entity
questions) written as 30 long documents of several chunks each, the way people write: a
person is named in full the first time a document mentions them, by the last name after
that (when no other person of the document shares it), with filler sentences between the
facts. Every chunk goes through the real pipeline and the ``llm`` extractor (a first pass
and one gleaning pass) against the scripted endpoint answering with what the offline
rules extractor reads in the chunk *given the known names of the prompt*: like a model, it
writes "Lovelace" as "Ada Lovelace" only when the context names her. The prepared
documents are written by the indexer's write transaction into a fresh realm, and the
questions asked through ``query_data``.

Prints the chunks and model calls, the realm's entities against the corpus's names and how
many are one-word short forms left unresolved, the answering triples stated in the realm,
and answer recall@25 and "first right" in ``local`` and ``mix``. Run it with each
checkout's code to compare (``PYTHONPATH`` set to the checkout's package folders), and
``--lookahead 0`` for this checkout's strict threading (each chunk sees the names of all
chunks before it).

Services: ``TIDEGRAPH_PG_DSN`` when set, else the PostgreSQL ``tidegraph up`` runs.
Run: ``.venv/bin/python bench/context_quality.py [--lookahead N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
from answers import answer_recall, make_answer_corpus
from query import DIM, SYL, T0, _drop
from scripted import ScriptedServer

from tidegraph.indexer.extraction.llm import LLMExtractor
from tidegraph.indexer.extraction.pipeline import Pipeline, PipelineConfig
from tidegraph.indexer.models.client import LLMClient, LLMSettings
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.indexer.write.units import RecordUnit, Settlement
from tidegraph.indexer.write.writer import UNKNOWN, Version, apply_version
from tidegraph.infra import services
from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import positions, realm_positions
from tidegraph.store.realms import RealmInfo, create_realm, ensure_control

DOCUMENTS = 30
FILLER = [
    "The minutes of that year say little more about it.",
    "Contemporary accounts differ on the details, as they often do.",
    "Several letters about the matter survive in the archive of the period.",
    "Nobody at the time thought the arrangement unusual.",
    "The terms were settled quickly and without much comment in the press.",
    "A later history of the firm gives the episode a single paragraph.",
]
Triple = tuple[str, str, str]


def _mention(name: str, people: set[str], named: set[str], surnames: dict[str, int]) -> str:
    """A person's full name the first time, the last name after (when it is theirs alone)."""
    if name not in people:
        return name
    if name in named and surnames[name.split()[-1]] == 1:
        return name.split()[-1]
    named.add(name)
    return name


def corpus() -> tuple[list[DocumentVersion], list[Any], set[str]]:
    """The documents, the questions, and the corpus's entity names."""
    made, questions = make_answer_corpus(SYL)
    triples: list[Triple] = [(s, p, o) for d in made for s, p, o, _, _ in d.relations]
    people = {n for d in made for n, kind in d.entities if kind == "Person"}
    names = {n for d in made for n, _ in d.entities}
    rng = random.Random(35)
    docs = []
    for k in range(DOCUMENTS):
        own = triples[k::DOCUMENTS]
        in_doc = {n for s, _, o in own for n in (s, o) if n in people}
        surnames: dict[str, int] = {}
        for n in in_doc:
            surnames[n.split()[-1]] = surnames.get(n.split()[-1], 0) + 1
        named: set[str] = set()
        paragraphs = []
        for start in range(0, len(own), 3):
            sentences = []
            for s, p, o in own[start : start + 3]:
                subject = _mention(s, people, named, surnames)
                obj = _mention(o, people, named, surnames)
                sentences.append(f"{subject} {p.replace('_', ' ')} {obj}.")
                sentences.append(rng.choice(FILLER))
            paragraphs.append(" ".join(sentences))
        text = "\n\n".join(paragraphs)
        docs.append(
            DocumentVersion(
                realm="quality",
                doc_key=f"history/{k:02d}.md",
                op="upsert",
                content=text,
                content_hash=content_hash(text),
                title=f"A history, part {k + 1}",
                order_key=f"{k:04d}",
                event_time=datetime.now(UTC),
            )
        )
    return docs, questions, names


async def _write(dsn: str, info: RealmInfo, prepared: list[Any]) -> None:
    """The prepared documents through the indexer's write transaction, in order."""
    embedder = HashingEmbedder(DIM)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        topic = f"bench.{info.realm}"
        claim, _ = await positions.claim(conn, "bench", topic, 0, 0)
        await realm_positions.ensure(conn, info.schema, info.realm, topic, 0)
        unit = RecordUnit()
        for n, doc in enumerate(prepared):
            version = Version("default", doc.doc_key, doc, None, UNKNOWN, n)
            settlement = Settlement.of_realm(claim, info, n, n + 1)
            async with unit.transaction(conn, info, settlement) as sequencer:
                stamp = await sequencer.draw(conn, T0 + timedelta(seconds=n))
                await apply_version(conn, info, embedder, version, stamp)


async def _realm_figures(dsn: str, info: RealmInfo) -> tuple[set[str], set[Triple]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            f"SELECT name FROM {info.schema}.entities"  # noqa: S608
        )
        entities = {str(r[0]) for r in await cur.fetchall()}
        cur = await conn.execute(
            f"SELECT es.name, r.predicate, eo.name FROM {info.schema}.relations r"  # noqa: S608
            f" JOIN {info.schema}.entities es ON es.id = r.subject_id"
            f" JOIN {info.schema}.entities eo ON eo.id = r.object_id"
        )
        relations = {(str(s), str(p), str(o)) for s, p, o in await cur.fetchall()}
    return entities, relations


async def run(args: argparse.Namespace) -> None:
    _, dsn = services.given_or_up()
    docs, questions, names = corpus()
    server = ScriptedServer(0.0, [], rules=True)
    client = LLMClient(
        LLMSettings(
            base_url=server.base_url,
            api_key="bench",
            model="bench-chat",
            max_in_flight=16,
            deadline=120,
            attempt_timeout=60,
        )
    )
    realm = f"cq_{uuid.uuid4().hex[:8]}"
    extractor = LLMExtractor(client, realm=realm)
    embedder = HashingEmbedder(DIM)
    config = (
        PipelineConfig() if args.lookahead is None else PipelineConfig(lookahead=args.lookahead)
    )
    pipeline = Pipeline(lambda _: extractor, lambda _: embedder, config)
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await ensure_control(conn)
            info = await create_realm(
                conn, realm, RealmConfig(embedder=f"hashing:{DIM}", extractor="llm")
            )
        running = asyncio.Semaphore(8)

        async def prepare(doc: DocumentVersion) -> Any:
            async with running:
                return await pipeline.prepare(doc.model_copy(update={"realm": realm}), info)

        prepared = await asyncio.gather(*(prepare(d) for d in docs))
        await _write(dsn, info, prepared)
        await report(dsn, info, prepared, questions, names, server)
    finally:
        await client.aclose()
        server.stop()
        if not args.keep:
            await _drop(dsn, realm)


async def report(
    dsn: str,
    info: RealmInfo,
    prepared: list[Any],
    questions: list[Any],
    names: set[str],
    server: ScriptedServer,
) -> None:
    chunks = sum(len(d.chunks) for d in prepared)
    print(
        f"corpus: {len(prepared)} documents, {chunks} chunks ({chunks / len(prepared):.1f} a "
        f"document), {server.chat_calls()} model calls; {len(names)} names, "
        f"{sum(len(q.answers) for q in questions)} answering triples"
    )
    entities, relations = await _realm_figures(dsn, info)
    short = sorted(e for e in entities if " " not in e and e not in names)
    answering = set().union(*(q.answers for q in questions))
    print(
        f"realm: {len(entities)} entities ({len(entities & names)} of the corpus's names, "
        f"{len(short)} one-word short forms left apart, e.g. {', '.join(short[:4]) or '-'}); "
        f"answering triples stated: {len(answering & relations)} of {len(answering)}"
    )
    pool = make_pool(dsn, min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        app = create_app(
            QuerySettings(), Deps(pool=pool, embedders=lambda r, p: HashingEmbedder(DIM))
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for mode in ("local", "mix"):
                f = await answer_recall(client, info.realm, questions, mode)
                print(
                    f"  {mode:<6} recall@25 {f.recall['all']:.1%} (subject "
                    f"{f.recall['subject']:.1%}, object {f.recall['object']:.1%}), first "
                    f"right {f.first_right:.1%}",
                    flush=True,
                )
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lookahead", type=int, default=None, help="the pipeline's lookahead (default: its own)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the realm")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
