"""The synthetic backlog the indexer benchmarks publish: documents of a given size about
people and organisations (a fact a paragraph, padded with filler sentences), the producer
that publishes them, and the scripted model's answers for their chunks."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer

from tidegraph.indexer.extraction.chunking import build_context, chunk_document
from tidegraph.indexer.extraction.pipeline import PipelineConfig
from tidegraph.indexer.extraction.rules import RulesExtractor
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.kafka_security import kafka_client_options

FIRST = [
    "Ada",
    "Charles",
    "Mary",
    "Michael",
    "Grace",
    "Alan",
    "Emmy",
    "Niels",
    "Lise",
    "Marie",
    "Henri",
    "Sofia",
    "Paul",
    "Rosalind",
    "James",
    "Dorothy",
]
LAST = [
    "Lovelace",
    "Babbage",
    "Somerville",
    "Faraday",
    "Hopper",
    "Turing",
    "Noether",
    "Bohr",
    "Meitner",
    "Curie",
    "Poincare",
    "Kovalevskaya",
    "Dirac",
    "Franklin",
    "Maxwell",
    "Hodgkin",
]
ORGS = [
    "Royal Society",
    "Analytical Society",
    "Cambridge University",
    "Harvard University",
    "Bell Laboratories",
    "Institut Pasteur",
    "Berlin Academy",
    "Copenhagen Institute",
]
VERBS = ["worked with", "corresponded with", "studied with", "married", "mentored"]
FILLER = [
    "The correspondence of the period records long discussions of method and instruments.",
    "Much of the surviving material concerns the careful checking of tables by hand.",
    "Letters from these years show how slowly results travelled between the societies.",
    "Several of the manuscripts were only catalogued a century later by archivists.",
    "Contemporary reviews were mixed, and some of the work was ignored for decades.",
    "The notebooks mix calculations with household accounts and travel arrangements.",
    "Funding came from private subscriptions more often than from any government.",
]


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def document(rng: random.Random, realm: str, i: int, size: int) -> DocumentVersion:
    paragraphs: list[str] = []
    total = 0
    while total < size:
        a, b = _person(rng), _person(rng)
        while b == a:
            b = _person(rng)
        kind = rng.random()
        if kind < 0.5:
            fact = f"{a} {rng.choice(VERBS)} {b}."
        elif kind < 0.8:
            fact = f"{a} joined the {rng.choice(ORGS)} in {rng.randint(1800, 1990)}."
        else:
            fact = f"{a} is an ally of {b}."
        para = " ".join([fact, *rng.sample(FILLER, 3)])
        paragraphs.append(para)
        total += len(para) + 2
    text = "\n\n".join(paragraphs)
    return DocumentVersion(
        realm=realm,
        doc_key=f"doc-{i:05d}.md",
        op="upsert",
        content=text,
        content_hash=content_hash(text),
        title=f"Document {i}",
        order_key=f"{i:06d}",
        event_time=datetime.now(UTC),
    )


async def publish(
    bootstrap: str,
    topic: str,
    docs: list[DocumentVersion],
    rate: float | None = None,
    partitions: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """Publish in order; with ``rate``, paced; with ``partitions``, each realm to the
    partition it names (else where its key hashes). Returns doc_key → wall time just
    before send."""
    producer = AIOKafkaProducer(
        **kafka_client_options(),
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        compression_type="lz4",
        linger_ms=5,
        max_request_size=16 * 1024 * 1024,
    )
    await producer.start()
    sent: dict[str, float] = {}
    try:
        futures = []
        started = time.perf_counter()
        for n, doc in enumerate(docs):
            if rate:
                delay = started + n / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            sent[doc.doc_key] = time.time()
            partition = None if partitions is None else partitions[doc.realm]
            futures.append(
                await producer.send(
                    topic, doc.to_json(), key=doc.realm.encode(), partition=partition
                )
            )
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent


def scripted_answers(docs: list[DocumentVersion]) -> list[dict[str, object]]:
    """One fixture per chunk, matched by the chunk's whole text: what the offline
    extractor finds in it, given the names of the document's earlier chunks."""
    config, rules = PipelineConfig(), RulesExtractor()
    fixtures: list[dict[str, object]] = []
    for doc in docs:
        known: dict[str, None] = {}
        for chunk in chunk_document(doc.content or "", config.chunk_chars, config.overlap_chars):
            context = build_context(doc.title, doc.source, tuple(known), cap=config.context_names)
            output = rules.extract_text(chunk.text, context)
            known.update(dict.fromkeys(e.name for e in output.entities))
            fixtures.append({"match": chunk.text, "output": output.model_dump(mode="json")})
    return fixtures
