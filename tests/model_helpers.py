"""Run the indexer on the model path, and read what it stored by names.

The model path is the production composition: a :class:`ModelRegistry` with an
``LLMClient`` (the scripted server of ``tests/llm_server.py``) and a connection pool, so
extraction goes through ``CachingExtractor(LLMExtractor, PgExtractionCache)`` into the
realm's own ``extraction_cache`` table, and embeddings through ``LLMEmbedder``. The
fixture corpus of ``tests/fixtures/llm`` is loaded from its manifest.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import REGISTRY
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.consumer.indexer import Indexer
from tidegraph.indexer.extraction.pipeline import Pipeline, PipelineConfig
from tidegraph.indexer.extraction.prepared import PreparedDocument
from tidegraph.indexer.models.client import LLMClient
from tidegraph.infra.composition import ModelRegistry
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store.realms import RealmInfo

from indexer_helpers import Topics, indexer_config, upsert

# -- the fixture corpus ----------------------------------------------------------------


@dataclass(frozen=True)
class CorpusDocument:
    """One document of ``tests/fixtures/llm/manifest.json``."""

    doc_key: str
    """Key the document is published under."""
    content: str
    """The document's text."""
    title: str
    """Its title (part of the extraction context)."""
    order_key: str
    """Document order (publication year)."""
    match: str
    """The scripted server's match string for it: ``server.calls_for(match)`` counts it."""

    @property
    def short(self) -> str:
        """``01`` … ``12``: how the corpus README names documents."""
        return short_key(self.doc_key)


@dataclass(frozen=True)
class Corpus:
    """The manifest: realm configuration, the documents, and the changed version(s)."""

    realm_config: RealmConfig
    documents: tuple[CorpusDocument, ...]
    changed: tuple[CorpusDocument, ...]

    def records(
        self, realm: str, docs: Sequence[CorpusDocument] | None = None
    ) -> list[DocumentVersion]:
        """Upserts of ``docs`` (default: the corpus) into ``realm``, in the given order."""
        return [
            upsert(realm, d.doc_key, d.content, order_key=d.order_key, title=d.title)
            for d in (self.documents if docs is None else docs)
        ]

    def with_changes(self) -> list[CorpusDocument]:
        """The corpus with each changed document in place of its original."""
        changed = {d.doc_key: d for d in self.changed}
        return [changed.get(d.doc_key, d) for d in self.documents]


def short_key(doc_key: str) -> str:
    """``corpus/01-….md`` → ``01``; other keys unchanged."""
    name = Path(doc_key).name
    return name[:2] if name[:2].isdigit() else doc_key


def load_corpus(fixtures_dir: Path) -> Corpus:
    manifest = json.loads((fixtures_dir / "manifest.json").read_text(encoding="utf-8"))
    config = RealmConfig.from_json((fixtures_dir / manifest["realm_config"]).read_bytes())

    def doc(entry: dict[str, Any]) -> CorpusDocument:
        extraction = json.loads((fixtures_dir / entry["extraction"]).read_text("utf-8"))
        return CorpusDocument(
            doc_key=entry["doc_key"],
            content=(fixtures_dir / entry["file"]).read_text(encoding="utf-8"),
            title=entry["title"],
            order_key=entry["order_key"],
            match=extraction["match"],
        )

    return Corpus(
        config,
        tuple(doc(e) for e in manifest["documents"]),
        tuple(doc(e) for e in manifest.get("changed", [])),
    )


# -- the indexer on the model path -----------------------------------------------------


@dataclass(frozen=True)
class PrepareAttempt:
    """One run of the prepare phase for one record, as the indexer saw it."""

    doc_key: str
    started: float
    """``time.monotonic()`` when it started."""
    seconds: float
    """How long it took, success or failure."""
    error: BaseException | None
    """What it raised (the indexer pauses the partition on it), ``None`` on success."""
    cancelled: bool = False
    """Cancelled because a record before it failed (it is prepared again on the retry)."""


@dataclass
class ModelIndexer:
    """A running indexer, its registry, and a log of every prepare attempt."""

    indexer: Indexer
    registry: ModelRegistry
    attempts: list[PrepareAttempt] = field(default_factory=list)

    def failures(self) -> list[PrepareAttempt]:
        return [a for a in self.attempts if a.error is not None and not a.cancelled]


@asynccontextmanager
async def running_model_indexer(
    topics: Topics,
    pg_dsn: str,
    group: str,
    *,
    llm: LLMClient | None,
    default_realm: RealmConfig,
    gleaning: int = 1,
    pipeline_config: PipelineConfig | None = None,
    **overrides: Any,
) -> AsyncIterator[ModelIndexer]:
    """The indexer composed as ``tidegraph indexer`` composes it, with ``llm`` as the
    model endpoint (``None``: no endpoint configured). ``overrides`` go to ``IndexerConfig``."""
    config = indexer_config(topics, pg_dsn, group, default_realm=default_realm, **overrides)
    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        pg_dsn,
        min_size=1,
        max_size=config.pool_size,
        open=False,
        kwargs={"autocommit": True},
    )
    registry = ModelRegistry(pool=pool, llm=llm, gleaning=gleaning)
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for, pipeline_config)
    attempts: list[PrepareAttempt] = []

    async def prepare(record: DocumentVersion, info: RealmInfo) -> PreparedDocument:
        started = time.monotonic()
        try:
            doc = await pipeline.prepare(record, info)
        except asyncio.CancelledError as exc:
            attempts.append(
                PrepareAttempt(record.doc_key, started, time.monotonic() - started, exc, True)
            )
            raise
        except BaseException as exc:
            attempts.append(
                PrepareAttempt(record.doc_key, started, time.monotonic() - started, exc)
            )
            raise
        attempts.append(PrepareAttempt(record.doc_key, started, time.monotonic() - started, None))
        return doc

    indexer = Indexer(config, prepare, registry.embedder_for, pool, judge_for=registry.judge_for)
    task = asyncio.create_task(indexer.run())
    try:
        yield ModelIndexer(indexer, registry, attempts)
    finally:
        indexer.stop()
        await asyncio.wait_for(task, 60)


# -- reading the graph back by names ---------------------------------------------------


@dataclass(frozen=True)
class StoredEntity:
    type: str
    aliases: frozenset[str]
    description: str
    dormant: bool


@dataclass(frozen=True)
class StoredRelation:
    valid_from: str | None
    valid_to: str | None
    weight: int
    docs: frozenset[str]
    """Short keys (``01`` …) of the documents contributing to it now."""
    status: str
    """``current``, ``superseded`` or ``retracted``."""
    superseded_by: tuple[str, str, str] | None
    """(subject, predicate, object) of the relation that superseded it."""


Triple = tuple[str, str, str, bool]
"""(subject, predicate, object, negated), by names."""


@dataclass(frozen=True)
class StoredGraph:
    """A realm's graph by names, with document keys shortened to ``01`` …"""

    documents: dict[str, str]
    """short key → status."""
    entities: dict[str, StoredEntity]
    relations: dict[Triple, StoredRelation]
    mentions: dict[str, frozenset[str]]
    """entity name → short keys of the documents whose live chunks mention it."""
    live_chunks: dict[str, int]
    """short key → live chunk count."""


async def stored_graph(pg_dsn: str, realm: str) -> StoredGraph:
    s = sql.Identifier(f"realm_{realm}")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:

        async def rows(query: sql.Composed) -> list[tuple[Any, ...]]:
            cur = await conn.execute(query)
            return [tuple(r) for r in await cur.fetchall()]

        documents = {
            short_key(k): status
            for k, status in await rows(
                sql.SQL("SELECT doc_key, status FROM {}.documents").format(s)
            )
        }
        entities = {
            name: StoredEntity(typ, frozenset(aliases), desc, bool(dormant))
            for name, typ, aliases, desc, dormant in await rows(
                sql.SQL(
                    "SELECT name, type, aliases, description, dormant_since IS NOT NULL"
                    " FROM {}.entities WHERE merged_into IS NULL"  # merged: kept as history
                ).format(s)
            )
        }
        relations: dict[Triple, StoredRelation] = {}
        for subj, pred, obj, neg, vf, vt, weight, status, docs, sup_s, sup_p, sup_o in await rows(
            sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.negated, r.valid_from, r.valid_to,"
                " r.weight, r.status,"
                " coalesce((SELECT array_agg(DISTINCT rs.doc_key) FROM {s}.relation_sources rs"
                "           WHERE rs.relation_id = r.id), '{{}}'),"
                " xs.name, x.predicate, xo.name"
                " FROM {s}.relations r"
                " JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id"
                " LEFT JOIN {s}.relations x ON x.id = r.superseded_by"
                " LEFT JOIN {s}.entities xs ON xs.id = x.subject_id"
                " LEFT JOIN {s}.entities xo ON xo.id = x.object_id"
            ).format(s=s)
        ):
            key = (subj, pred, obj, bool(neg))
            assert key not in relations, f"relation {key} stored twice"
            relations[key] = StoredRelation(
                vf,
                vt,
                int(weight),
                frozenset(short_key(d) for d in docs),
                status,
                (sup_s, sup_p, sup_o) if sup_p is not None else None,
            )
        mentions: dict[str, set[str]] = {}
        for name, doc_key in await rows(
            sql.SQL(
                "SELECT DISTINCT e.name, c.doc_key FROM {s}.mentions m"
                " JOIN {s}.entities e ON e.id = m.entity_id"
                " JOIN {s}.chunks c ON c.id = m.chunk_id"
                " WHERE c.t_expired IS NULL AND m.t_expired IS NULL"
            ).format(s=s)
        ):
            mentions.setdefault(name, set()).add(short_key(doc_key))
        live_chunks = {
            short_key(k): int(n)
            for k, n in await rows(
                sql.SQL(
                    "SELECT doc_key, count(*) FROM {}.chunks WHERE t_expired IS NULL"
                    " GROUP BY doc_key"
                ).format(s)
            )
        }
    return StoredGraph(
        documents,
        entities,
        relations,
        {name: frozenset(docs) for name, docs in mentions.items()},
        live_chunks,
    )


async def realm_counts(pg_dsn: str, realm: str) -> dict[str, int]:
    """Rows per table of a realm (what "nothing was written" is checked against)."""
    s = sql.Identifier(f"realm_{realm}")
    out: dict[str, int] = {}
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for table in (
            "documents",
            "chunks",
            "entities",
            "relations",
            "mentions",
            "outbox",
            "extraction_cache",
        ):
            cur = await conn.execute(
                sql.SQL("SELECT count(*) FROM {}.{}").format(s, sql.Identifier(table))
            )
            row = await cur.fetchone()
            out[table] = int(row[0]) if row else 0
    return out


async def realm_embedder(pg_dsn: str, realm: str) -> str:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT embedder FROM {}.meta").format(sql.Identifier(f"realm_{realm}"))
        )
        row = await cur.fetchone()
        assert row is not None
        return str(row[0])


# -- observation -----------------------------------------------------------------------


def sample(name: str, **labels: str) -> float:
    """A sample of the default Prometheus registry (0 when never recorded)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def dead_letter_count(topics: Topics) -> int:
    """Records in the DLQ topic, whichever partition."""
    consumer = AIOKafkaConsumer(**kafka_client_options(), bootstrap_servers=topics.bootstrap)
    await consumer.start()
    try:
        await consumer.topics()  # fetches metadata for every topic
        partitions = consumer.partitions_for_topic(topics.dlq) or set()
        tps = [TopicPartition(topics.dlq, p) for p in partitions]
        if not tps:
            return 0
        begin = await consumer.beginning_offsets(tps)
        end = await consumer.end_offsets(tps)
        return sum(end[tp] - begin[tp] for tp in tps)
    finally:
        await consumer.stop()
