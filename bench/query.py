"""Query service benchmark: answer recall@25, query_data latency, vector recall,
change-feed throughput, publish-to-visible freshness.

First, answer recall@25 (``bench/answers.py``): a 300-document corpus of hub entities is
loaded through the writer and its single-entity questions ("Which companies did H
acquire?", "Who mentored P?") are asked through ``query_data`` in each relation mode; the
figure is the share of the corpus triples answering a question among its first 25
relations (target: at least 90%), with "first right" the share of questions whose first
relation answers them. Then evidence recall@10 and @25 on a corpus of questions that need
several hops (``make_chain_corpus``): the share of a question's evidence chain among the
first 10 and 25 relations, per mode and kind of question (``--chains-only``: that alone).

For each realm size (entities) and vector shape (``--vectors``: ``hashing-384``, and
``clustered-384`` / ``clustered-1536`` shaped like a real model's, see ``bench/shapes.py``)
it builds a realm, or reuses the one an earlier run built with the same size, shape and
corpus version (``--no-cache`` builds fresh ones; a cached realm whose search index DDL
changed is re-indexed), printing how long building took:

* ``--load writer`` (default up to 20,000 entities): every document goes through the
  indexer's own write transaction (``tidegraph.indexer.write.writer.apply_version``) — the same
  statements, outbox and belief history as live indexing, minus Kafka and extraction.
* ``--load copy`` (default above, and for clustered shapes): bulk binary ``COPY`` of the
  identical graph in the writer's
  layout (chunks, entities, mentions, relations with their rendered text and embeddings,
  provenance, one open belief interval per relation, one outbox commit per document with its
  ``document_indexed`` / ``entity_added`` / ``relation_added`` changes, ``meta.seq``), HNSW
  indexes built after the load as a replay would. It keeps the 100,000 case practical here.

Each document is one chunk naming ten new entities linked in a chain plus one link to an
earlier document's entity (so walks cross documents); a fifth of the relations carry a
stated period. Then, against ``tidegraph serve`` on a loopback port (a separate process,
HTTP/1.1 keep-alive), it prints per mode (mix, local, global, naive) and client count
(1, 4, 8) the p50/p99 latency with the CPU per request of the client, ``tidegraph serve``
and PostgreSQL (``/proc`` of the postmaster and its children; the load average beside it)
and, at one client, the median of each retrieval stage; recall@10 of the HNSW searches
(entities, relations, chunks) against exact search at the service's ``ef_search``; and
the change publisher's throughput draining the realm's whole outbox to a fresh topic.
Finally it publishes documents through Kafka to a real ``tidegraph indexer`` and times
publish-to-visible (Kafka ack → ``GET /documents/{key}`` answers ``indexed``).

Against the server it also prints, per mode that walks, the latency with each retrieval
mechanism of the request on and off (MMR, node distance, ``max_relation_edges``,
decomposition, all of them at once), the settings taking turns per query; with
``--mechanisms-only`` the same table alone, in-process against PostgreSQL only.

Services: ``TIDEGRAPH_PG_DSN`` / ``TIDEGRAPH_KAFKA_BOOTSTRAP`` when set, else the ones
``tidegraph up`` runs (started if needed). Run:
``.venv/bin/python bench/query.py [--sizes 10000,100000] [--vectors ...]
[--latency-shapes ...] [--no-extras] [--answers-only] [--chains-only]
[--mechanisms-only]``. The clustered shapes need numpy (in the dev extra scripts/bootstrap
installs); latency is timed on the shapes of ``--latency-shapes``, whose queries the
service embeds with the realm's hashing embedder.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
from answers import (
    CUTS,
    AnswerDoc,
    ChainQuestion,
    answer_recall,
    chain_recall,
    make_answer_corpus,
    make_chain_corpus,
    make_issue_corpus,
)
from cpu import postgres_cpu, postmaster_pid, process_cpu
from pgvector import Vector
from pgvector.psycopg import register_vector, register_vector_async
from psycopg import sql
from psycopg.types.json import Jsonb
from shapes import Shape, clustered

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.indexer.extraction.prepared import (
    EntityFact,
    PreparedChunk,
    PreparedDocument,
    RelationFact,
)
from tidegraph.indexer.graph.rules import period_bounds, render_entity, render_relation
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.indexer.write.units import RecordUnit, Settlement
from tidegraph.indexer.write.writer import UNKNOWN, Version, apply_version
from tidegraph.infra import services
from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.query_service.keywords import lexical_keywords
from tidegraph.query_service.publisher import ChangePublisher, KafkaChangeSink
from tidegraph.query_service.retrieval import _query_texts
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.names import name_key
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.schemas.topics import changes_topic, topic_specs
from tidegraph.store import positions, realm_positions
from tidegraph.store.ddl import search_index_ddl
from tidegraph.store.realms import create_realm, ensure_control

REPO = Path(__file__).resolve().parents[1]
DIM = 384
PER_DOC = 10
PREDICATES = [
    "worked_with",
    "founded",
    "advised",
    "funded",
    "acquired",
    "designed",
    "studied_at",
    "located_in",
    "supplies",
    "competes_with",
    "partners_with",
    "member_of",
    "wrote",
    "influenced",
    "audits",
    "owns",
]
TYPES = ["Person", "Organization", "Project", "Place", "Product"]
SYL = [
    c + v + e
    for c in (
        "b",
        "c",
        "d",
        "f",
        "g",
        "h",
        "j",
        "k",
        "l",
        "m",
        "n",
        "p",
        "r",
        "s",
        "t",
        "v",
        "w",
        "z",
        "ch",
        "sh",
        "th",
        "br",
        "tr",
        "st",
        "gl",
    )
    for v in ("a", "e", "i", "o", "u", "ai", "ea", "ou")
    for e in ("", "n", "r", "s", "l", "m", "t", "x", "nd", "rk")
]
"""2,000 syllables, so names share few character trigrams, as real names do."""
T0 = datetime(2026, 1, 1, tzinfo=UTC)
CORPUS_VERSION = 2
"""Bump when the corpus or the loaded layout changes: cached realms are keyed by it."""


# ---------------------------------------------------------------------------- corpus


@dataclass(frozen=True)
class Doc:
    key: str
    text: str
    entities: list[tuple[str, str]]
    """(name, type) introduced or named by this document."""
    relations: list[tuple[str, str, str, str | None, str | None]]
    """(subject, predicate, object, valid_from, valid_to)."""


def make_corpus(n_entities: int, seed: int = 7) -> list[Doc]:
    rng = random.Random(seed)
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < n_entities:
        first = "".join(rng.choice(SYL) for _ in range(2)).capitalize()
        last = "".join(rng.choice(SYL) for _ in range(rng.choice((2, 3)))).capitalize()
        name = f"{first} {last}"
        if name not in seen:
            seen.add(name)
            names.append(name)
    docs = []
    for d in range(n_entities // PER_DOC):
        ents = [(names[d * PER_DOC + i], TYPES[(d + i) % len(TYPES)]) for i in range(PER_DOC)]
        rels: list[tuple[str, str, str, str | None, str | None]] = []
        for i in range(PER_DOC - 1):
            rels.append((ents[i][0], rng.choice(PREDICATES), ents[i + 1][0], *_period(rng)))
        if d > 0:
            other = names[rng.randrange(d * PER_DOC)]
            rels.append((ents[0][0], rng.choice(PREDICATES), other, *_period(rng)))
            ents.append((other, "Concept"))
        text = " ".join(f"{s} {p.replace('_', ' ')} {o}." for s, p, o, _, _ in rels)
        docs.append(Doc(f"corpus/{d:06d}.md", text, ents, rels))
    return docs


def _period(rng: random.Random) -> tuple[str | None, str | None]:
    roll = rng.random()
    if roll < 0.1:
        start = rng.randrange(1990, 2015)
        return str(start), str(start + rng.randrange(1, 10))
    if roll < 0.2:
        return f"{rng.randrange(1990, 2024)}-{rng.randrange(1, 13):02d}", None
    return None, None


def make_queries(docs: Sequence[Doc], n: int = 400, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        doc = rng.choice(docs)
        s, p, o, _, _ = rng.choice(doc.relations)
        out.append(
            rng.choice(
                [
                    f"How is {s} connected to {o}?",
                    f"Who {p.replace('_', ' ')} {o}?",
                    f"What do we know about {s}?",
                    f"Which organisations {p.replace('_', ' ')} others, and since when?",
                ]
            )
        )
    return out


# ---------------------------------------------------------------------------- loading


async def load_writer(dsn: str, realm: str, docs: Sequence[Doc]) -> None:
    """Every document through the indexer's write transaction."""
    embedder = HashingEmbedder(DIM)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await ensure_control(conn)
        info = await create_realm(conn, realm, RealmConfig(embedder=f"hashing:{DIM}"))
        topic = f"bench.{realm}"
        claim, _ = await positions.claim(conn, "bench", topic, 0, 0)
        await realm_positions.ensure(conn, info.schema, realm, topic, 0)
        unit = RecordUnit()
        started = time.perf_counter()
        for n, doc in enumerate(docs):
            [vec] = await embedder.embed([doc.text])
            chunk = PreparedChunk(
                0,
                doc.text,
                vec,
                tuple(EntityFact(name, typ, "", ()) for name, typ in doc.entities),
                tuple(
                    RelationFact(s, p, o, False, "", 1.0, vf, vt)
                    for s, p, o, vf, vt in doc.relations
                ),
            )
            prepared = PreparedDocument(
                "default",
                doc.key,
                "sha256:" + f"{n:064x}",
                None,
                f"{n:08d}",
                doc.key,
                "bench",
                {},
                (chunk,),
                {},
            )
            version = Version("default", doc.key, prepared, None, UNKNOWN, n)
            settlement = Settlement.of_realm(claim, info, n, n + 1)
            async with unit.transaction(conn, info, settlement) as sequencer:
                stamp = await sequencer.draw(conn, T0 + timedelta(seconds=n))
                await apply_version(conn, info, embedder, version, stamp)
            if n % 200 == 199:
                rate = (n + 1) / (time.perf_counter() - started)
                print(f"  writer: {n + 1}/{len(docs)} documents ({rate:.0f}/s)", flush=True)


def _vectors(shape: Shape, texts: list[str]) -> list[Vector]:
    if shape.kind == "clustered":
        return [Vector(row) for row in clustered(texts, shape.dim)]
    return [Vector(v) for v in HashingEmbedder(shape.dim).embed_sync(texts)]


def embed_texts(shape: Shape, texts: list[str]) -> list[Vector]:
    """Embeddings of ``texts`` in ``shape``, on every core."""
    step = max(1, len(texts) // 16)
    parts = [texts[i : i + step] for i in range(0, len(texts), step)]
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return [v for part in pool.map(_vectors, [shape] * len(parts), parts) for v in part]


def load_copy(dsn: str, realm: str, docs: Sequence[Doc], shape: Shape) -> None:
    """The same graph in the writer's layout, by binary COPY; vector indexes after the
    load, as a replay builds them."""
    asyncio.run(_create_bare(dsn, realm, shape))
    schema = f"realm_{realm}"
    ent_id: dict[str, int] = {}
    ent_rows = []
    for doc in docs:
        for name, typ in doc.entities:
            if name not in ent_id:
                ent_id[name] = len(ent_id) + 1
                ent_rows.append((ent_id[name], name, typ))
    rel_rows = []
    for d, doc in enumerate(docs):
        for s, p, o, vf, vt in doc.relations:
            rel_rows.append((len(rel_rows) + 1, d, s, p, o, vf, vt))
    t = time.perf_counter()
    ent_vecs = embed_texts(shape, [render_entity(n, "") for _, n, _ in ent_rows])
    rel_vecs = embed_texts(
        shape, [render_relation(s, p, o, False, vf, vt) for _, _, s, p, o, vf, vt in rel_rows]
    )
    chunk_vecs = embed_texts(shape, [d.text for d in docs])
    print(
        f"  embedded {len(ent_vecs) + len(rel_vecs) + len(chunk_vecs)} texts in "
        f"{time.perf_counter() - t:.1f}s",
        flush=True,
    )
    bt = [T0 + timedelta(seconds=d) for d in range(len(docs))]
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)

        def copy(tbl: str, cols: str, rows: Any, types: list[str] | None = None) -> None:
            query = sql.SQL("COPY {}.{} ({}) FROM STDIN{}").format(
                sql.Identifier(schema),
                sql.Identifier(tbl),
                sql.SQL(cols),
                sql.SQL(" (FORMAT BINARY)" if types else ""),
            )
            with conn.cursor().copy(query) as cp:
                if types:
                    cp.set_types(types)
                for row in rows:
                    cp.write_row(row)

        t = time.perf_counter()
        first_doc = {}
        for d, doc in enumerate(docs):
            for name, _ in doc.entities:
                first_doc.setdefault(name, d)
        copy(
            "documents",
            "space, doc_key, status, content_hash, order_key, title, source,"
            " chunk_count, indexed_at",
            (
                (
                    "default",
                    doc.key,
                    "indexed",
                    "sha256:" + f"{d:064x}",
                    f"{d:08d}",
                    doc.key,
                    "bench",
                    1,
                    bt[d],
                )
                for d, doc in enumerate(docs)
            ),
        )
        copy(
            "chunks",
            "id, space, doc_key, ordinal, text, content_hash, embedding, t_created",
            (
                (
                    d + 1,
                    "default",
                    doc.key,
                    0,
                    doc.text,
                    "sha256:" + f"{d:064x}",
                    chunk_vecs[d],
                    bt[d],
                )
                for d, doc in enumerate(docs)
            ),
            ["int8", "text", "text", "int4", "text", "text", "vector", "timestamptz"],
        )
        copy(
            "entities",
            "id, space, name, name_key, type, embedding, created_at",
            (
                (i, "default", n, name_key(n), typ, ent_vecs[i - 1], bt[first_doc[n]])
                for i, n, typ in ent_rows
            ),
            ["int8", "text", "text", "text", "text", "vector", "timestamptz"],
        )
        copy(
            "document_history",
            "space, doc_key, status, content_hash, order_key, title, chunk_count, indexed_at,"
            " t_created",
            (
                ("default", doc.key, "indexed", "sha256:" + f"{d:064x}", f"{d:08d}", doc.key,
                 1, bt[d], bt[d])
                for d, doc in enumerate(docs)
            ),
        )  # fmt: skip
        copy(
            "entity_history",
            "entity_id, name, type, description, aliases, space, name_key, alias_keys, t_created",
            (
                (i, n, typ, "", [], "default", name_key(n), [], bt[first_doc[n]])
                for i, n, typ in ent_rows
            ),
            ["int8", "text", "text", "text", "text[]", "text", "text", "text[]", "timestamptz"],
        )
        copy(
            "mentions",
            "chunk_id, entity_id, t_created",
            ((d + 1, ent_id[n], bt[d]) for d, doc in enumerate(docs) for n, _ in doc.entities),
        )
        copy(
            "relations",
            "id, space, subject_id, predicate, object_id, valid_from, valid_to,"
            " valid_from_d, valid_to_d, weight, order_key, status, t_created, doc_keys,"
            " rendered, embedding",
            (
                (
                    rid,
                    "default",
                    ent_id[s],
                    p,
                    ent_id[o],
                    vf,
                    vt,
                    *period_bounds(vf, vt),
                    1,
                    f"{d:08d}",
                    "current",
                    bt[d],
                    [docs[d].key],
                    render_relation(s, p, o, False, vf, vt),
                    rel_vecs[rid - 1],
                )
                for rid, d, s, p, o, vf, vt in rel_rows
            ),
            [
                "int8",
                "text",
                "int8",
                "text",
                "int8",
                "text",
                "text",
                "date",
                "date",
                "int4",
                "text",
                "text",
                "timestamptz",
                "text[]",
                "text",
                "vector",
            ],  # fmt: skip
        )
        copy(
            "relation_sources",
            "relation_id, chunk_id, doc_key, order_key",
            ((rid, d + 1, docs[d].key, f"{d:08d}") for rid, d, *_ in rel_rows),
        )
        copy(
            "relation_history",
            "relation_id, state, subject_id, object_id, weight, order_key, valid_from,"
            " valid_to, valid_from_d, valid_to_d, doc_keys, t_created",
            (
                (rid, "current", ent_id[s], ent_id[o], 1, f"{d:08d}", vf, vt,
                 *period_bounds(vf, vt), [docs[d].key], bt[d])
                for rid, d, s, p, o, vf, vt in rel_rows
            ),
        )  # fmt: skip
        copy("outbox", "seq, idx, kind, space, belief_time, payload", _outbox(docs, ent_id, bt))
        for tbl in ("chunks", "entities", "relations"):
            conn.execute(
                sql.SQL("SELECT setval(pg_get_serial_sequence({}, 'id'), {})").format(
                    sql.Literal(f"{schema}.{tbl}"),
                    sql.Literal(
                        {
                            "chunks": len(docs),
                            "entities": len(ent_rows),
                            "relations": len(rel_rows),
                        }[tbl]
                    ),
                )
            )
        conn.execute(
            sql.SQL("UPDATE {}.meta SET seq = %s, last_write_at = %s").format(
                sql.Identifier(schema)
            ),
            (len(docs), bt[-1]),
        )
        print(f"  copied in {time.perf_counter() - t:.1f}s", flush=True)
    build_search_indexes(dsn, realm, shape)


def _outbox(docs: Sequence[Doc], ent_id: dict[str, int], bt: list[datetime]) -> Any:
    known: set[str] = set()
    rid = 0
    for d, doc in enumerate(docs):
        items: list[tuple[str, dict[str, Any]]] = [("document_indexed", {"doc_key": doc.key})]
        for name, typ in doc.entities:
            if name not in known:
                known.add(name)
                items.append(
                    (
                        "entity_added",
                        {"entity": {"id": str(ent_id[name]), "name": name, "type": typ}},
                    )
                )
        for s, p, o, vf, vt in doc.relations:
            rid += 1
            items.append(
                (
                    "relation_added",
                    {
                        "relation": {
                            "id": str(rid),
                            "subject": s,
                            "predicate": p,
                            "object": o,
                            "negated": False,
                            "valid_from": vf,
                            "valid_to": vt,
                        }
                    },
                )
            )
        for idx, (kind, payload) in enumerate(items):
            yield (d + 1, idx, kind, "default", bt[d], Jsonb(payload))


async def _create_bare(dsn: str, realm: str, shape: Shape) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await ensure_control(conn)
        await create_realm(
            conn, realm, RealmConfig(embedder=f"hashing:{shape.dim}"), search_indexes=False
        )


def build_search_indexes(dsn: str, realm: str, shape: Shape) -> float:
    """(Re)build the realm's search indexes as the current DDL defines them, with the
    session's maintenance memory as the server sets it; seconds taken. The DDL's text is
    kept as the schema's comment, so a cached realm is re-indexed when it changes."""
    schema = f"realm_{realm}"
    t = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        # An HNSW graph built within maintenance_work_mem is several times faster to build;
        # an external server may have the default 64 MB.
        cur = conn.execute(
            "SELECT setting::bigint * 1024 FROM pg_settings WHERE name = 'maintenance_work_mem'"
        )
        row = cur.fetchone()
        if row is not None and int(row[0]) < 1024**3:
            conn.execute("SET maintenance_work_mem = '1GB'")
        ddl = search_index_ddl(schema, shape.dim).as_string(conn)
        for name in SEARCH_INDEXES:
            conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(schema, name)))
        conn.execute(search_index_ddl(schema, shape.dim))
        conn.execute(
            sql.SQL("COMMENT ON SCHEMA {} IS {}").format(
                sql.Identifier(schema), sql.Literal(_digest(ddl))
            )
        )
    took = time.perf_counter() - t
    print(f"  search indexes (HNSW, full text) built in {took:.1f}s", flush=True)
    return took


SEARCH_INDEXES = (
    "relations_tsv",
    "chunks_embedding",
    "entities_embedding",
    "relations_embedding",
    "communities_embedding",
    "entities_name_words",
    "entity_aliases_words",
)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def cached_realm(size: int, shape: Shape, method: str) -> str:
    """The realm name of a built realm, keyed by what decides its contents."""
    key = _digest(f"{CORPUS_VERSION}/{size}/{shape.name}/{method}")
    return f"bc{size}_{shape.kind[0]}{shape.dim}_{method[0]}{key[:8]}"


async def realm_state(dsn: str, realm: str, docs: int, dim: int) -> str:
    """``missing``, ``partial`` (a load that did not finish), ``stale`` (built with other
    search indexes than the current DDL's) or ``ready``."""
    schema = f"realm_{realm}"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s",
            (schema,),
        )
        row = await cur.fetchone()
        if row is None:
            return "missing"
        cur = await conn.execute(sql.SQL("SELECT seq FROM {}.meta").format(sql.Identifier(schema)))
        seq = await cur.fetchone()
        if seq is None or int(seq[0]) < docs:
            return "partial"
        ddl = search_index_ddl(schema, dim).as_string(conn)
        return "ready" if row[0] == _digest(ddl) else "stale"


# ---------------------------------------------------------------------------- measuring


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_ef(ef: dict[str, int], hashing_relations: int, shape: Shape) -> dict[str, int]:
    """The ``ef_search`` the service uses on a realm of ``shape``: a hashing realm's
    relations get the wider list (``ef_search_hashing_relations``). Every bench realm is
    pinned to the hashing embedder, so a clustered one is served as a model's would be."""
    if shape.kind != "hashing":
        return dict(ef)
    return {**ef, "relations": max(ef["relations"], hashing_relations)}


def start_server(dsn: str, bootstrap: str, ef: dict[str, int], prefix: str) -> tuple[Any, str]:
    """``tidegraph serve`` searching with ``ef`` (as :func:`service_ef` gives it)."""
    port = _free_port()
    env = {
        **os.environ,
        "TIDEGRAPH_PG_DSN": dsn,
        "TIDEGRAPH_KAFKA_BOOTSTRAP": bootstrap,
        "TIDEGRAPH_EF_SEARCH": str(ef["entities"]),
        "TIDEGRAPH_EF_SEARCH_RELATIONS": str(ef["relations"]),
        "TIDEGRAPH_EF_SEARCH_HASHING_RELATIONS": str(ef["relations"]),
        "TIDEGRAPH_EF_SEARCH_CHUNKS": str(ef["chunks"]),
    }
    env.pop("TIDEGRAPH_API_KEYS", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidegraph.infra.cli",
            "serve",
            "--port",
            str(port),
            "--no-publisher",
            "--pool-size",
            "8",
            "--log-level",
            "warning",
            "--topic-prefix",
            prefix,
        ],
        env=env,
        cwd=REPO,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("tidegraph serve did not start")


async def latency(
    url: str,
    realm: str,
    queries: list[str],
    mode: str,
    clients: int,
    requests: int,
    believed: datetime | None = None,
) -> tuple[float, float, float, int]:
    """p50 and p99 in ms, requests/s and requests, for ``requests`` queries over
    ``clients``; a mode named ``<mode>@half`` asks ``as_believed_at`` ``believed``."""
    extra: dict[str, Any] = {}
    if mode.endswith("@half"):
        assert believed is not None
        mode, extra = mode.removesuffix("@half"), {"as_believed_at": believed.isoformat()}
    samples: list[float] = []
    stages: dict[str, list[float]] = {}
    it = iter(range(requests))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:

        async def worker(w: int) -> None:
            for n in it:
                body = {"query": queries[(n * 7 + w) % len(queries)], "mode": mode, **extra}
                t = time.perf_counter()
                r = await client.post(f"/v1/realms/{realm}/query_data", json=body)
                took = (time.perf_counter() - t) * 1000
                samples.append(took)
                if r.status_code != 200:
                    raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
                timings = r.json()["stats"].get("timings_ms", {})
                for stage, ms in timings.items():
                    stages.setdefault(stage, []).append(float(ms))
                if "total" in timings:  # the request's time outside the database search
                    stages.setdefault("outside search", []).append(took - timings["total"])

        for q in queries[:20]:  # warm caches and connections
            await client.post(
                f"/v1/realms/{realm}/query_data", json={"query": q, "mode": mode, **extra}
            )
        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        elapsed = time.perf_counter() - started
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(
        f"    stages at {clients} client(s), p50 / p99 ms: "
        + ", ".join(f"{k} {statistics.median(v):.1f} / {_p99(v):.1f}" for k, v in stages.items()),
        flush=True,
    )
    return statistics.median(samples), p99, len(samples) / elapsed, len(samples)


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


EF_CURVE = (40, 100, 200, 400)


async def recall(
    dsn: str, realm: str, queries: list[str], ef: dict[str, int], shape: Shape
) -> dict[str, list[tuple[int, float, float]]]:
    """recall@10 of each HNSW search, as the service runs it (same query texts, filters,
    iterative scans), against exact search, at several ``ef_search`` widths (the configured
    one included): table → [(ef_search, recall, median ms)]. A hit is any result at a
    distance no greater than the exact 10th (ties are equally correct)."""
    schema = sql.Identifier(f"realm_{realm}")
    out: dict[str, list[tuple[int, float, float]]] = {}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await register_vector_async(conn)
        await conn.execute("SET hnsw.iterative_scan = relaxed_order")
        for tbl, where, text in (
            ("entities", "dormant_since IS NULL AND space = 'default'", "entity"),
            ("relations", "status = 'current' AND space = 'default'", "query"),
            ("chunks", "t_expired IS NULL AND space = 'default'", "query"),
        ):
            vecs = _vectors(
                shape, [_query_texts(q, lexical_keywords(q))[text] for q in queries[:100]]
            )
            truth = []
            for vec in vecs:
                cur = await conn.execute(
                    sql.SQL(
                        "SELECT id, embedding <=> %s AS d FROM {}.{} WHERE {}"
                        " ORDER BY (embedding <=> %s) + 0 LIMIT 10"
                    ).format(schema, sql.Identifier(tbl), sql.SQL(where)),
                    (vec, vec),
                )
                rows = await cur.fetchall()
                truth.append((len(rows), float(rows[-1][1]) + 1e-6 if rows else 0.0))
            out[tbl] = []
            for width in sorted({*EF_CURVE, ef[tbl]}):
                await conn.execute(sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(width)))
                hits = total = 0
                times = []
                for vec, (n, bound) in zip(vecs, truth, strict=True):
                    t = time.perf_counter()
                    cur = await conn.execute(
                        sql.SQL(
                            "SELECT id, embedding <=> %s AS d FROM {}.{} WHERE {}"
                            " ORDER BY embedding <=> %s LIMIT 10"
                        ).format(schema, sql.Identifier(tbl), sql.SQL(where)),
                        (vec, vec),
                    )
                    found = await cur.fetchall()
                    times.append((time.perf_counter() - t) * 1000)
                    hits += sum(1 for _, d in found if float(d) <= bound)
                    total += n
                out[tbl].append((width, hits / total if total else 1.0, statistics.median(times)))
    return out


async def publish_rate(dsn: str, bootstrap: str, realm: str) -> tuple[int, float]:
    """Drain the realm's whole outbox to a fresh topic; (changes, changes/s)."""
    prefix = "bq" + uuid.uuid4().hex[:8]
    topic = changes_topic(prefix, partitions=1)
    await ensure_topic_specs(bootstrap, [topic])
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("DELETE FROM tidegraph.publisher_positions WHERE realm = %s", (realm,))
        cur = await conn.execute(
            sql.SQL("SELECT count(*), max(seq) FROM {}.outbox").format(
                sql.Identifier(f"realm_{realm}")
            )
        )
        row = await cur.fetchone()
        assert row is not None
        count, head = int(row[0]), int(row[1])
        sink = KafkaChangeSink(bootstrap, topic.name)
        await sink.start()
        publisher = ChangePublisher(dsn, sink, realms=[realm], batch_size=5000, poll_interval=0.01)
        started = time.perf_counter()
        task = asyncio.create_task(publisher.run())
        while True:
            cur = await conn.execute(
                "SELECT published_seq FROM tidegraph.publisher_positions WHERE realm = %s", (realm,)
            )
            got = await cur.fetchone()
            if got is not None and int(got[0]) >= head:
                break
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started
        publisher.stop()
        await task
        await sink.stop()
    return count, count / elapsed


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tidegraph.infra.cli", *args], env=env, cwd=REPO)


async def freshness(dsn: str, bootstrap: str, url: str, n: int = 60) -> tuple[float, float]:
    """Kafka ack of a new document → the query API reports it indexed; p50/p99 in ms."""
    prefix = "bf" + uuid.uuid4().hex[:8]
    realm = "bfresh" + uuid.uuid4().hex[:8]
    await ensure_topic_specs(bootstrap, list(topic_specs(prefix, partitions=1)))
    env = {
        **os.environ,
        "TIDEGRAPH_PG_DSN": dsn,
        "TIDEGRAPH_KAFKA_BOOTSTRAP": bootstrap,
        "TIDEGRAPH_EMBEDDER": f"hashing:{DIM}",
        "TIDEGRAPH_EXTRACTOR": "rules",
    }
    indexer = _spawn(
        ["indexer", "--topic-prefix", prefix, "--group", f"g{prefix}", "--log-level", "WARNING"],
        env,
    )
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        **kafka_client_options(),
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=0,
    )
    await producer.start()
    samples: list[float] = []
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            for i in range(n + 5):
                doc = DocumentVersion.for_upsert(
                    realm,
                    f"fresh/{i}.md",
                    f"Ada Lovelace{i} worked with Charles Babbage{i} on the engine {i}. "
                    f"Mary Somerville{i} mentored Ada Lovelace{i} from 1832 to 1835.",
                )
                await producer.send_and_wait(
                    f"{prefix}.documents", doc.to_json(), key=realm.encode()
                )
                acked = time.perf_counter()
                deadline = acked + (60 if i == 0 else 10)
                while time.perf_counter() < deadline:
                    r = await client.get(f"/v1/realms/{realm}/documents/fresh/{i}.md")
                    if r.status_code == 200 and r.json()["status"] == "indexed":
                        break
                    await asyncio.sleep(0.002)
                else:
                    raise RuntimeError(f"document {i} not visible in time")
                if i >= 5:  # the first ones create the realm and warm the indexer
                    samples.append((time.perf_counter() - acked) * 1000)
                await asyncio.sleep(0.05)
    finally:
        await producer.stop()
        indexer.terminate()
        await asyncio.to_thread(indexer.wait, 30)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


# ---------------------------------------------------------------------------- mechanisms

MECHANISMS: dict[str, dict[str, Any]] = {
    "default": {},
    "mmr": {"mmr": True},
    "node_distance": {"node_distance": True},
    "max_relation_edges=10": {"max_relation_edges": 10},
    "decompose": {"decompose": True},
    "all on": {"mmr": True, "node_distance": True, "max_relation_edges": 10, "decompose": True},
}


async def mechanism_latency(
    client: httpx.AsyncClient, realm: str, queries: list[str], mode: str, requests: int
) -> dict[str, tuple[float, float]]:
    """p50 and p99 (ms) of ``query_data`` per mechanism setting, one client, the settings
    taking turns on each query so drift in the machine's load falls on all alike."""
    samples: dict[str, list[float]] = {name: [] for name in MECHANISMS}
    for q in queries[:10]:  # warm caches
        await client.post(f"/v1/realms/{realm}/query_data", json={"query": q, "mode": mode})
    for n in range(requests):
        q = queries[(n * 7) % len(queries)]
        for name, extra in MECHANISMS.items():
            body = {"query": q, "mode": mode, **extra}
            t = time.perf_counter()
            r = await client.post(f"/v1/realms/{realm}/query_data", json=body)
            samples[name].append((time.perf_counter() - t) * 1000)
            if r.status_code != 200:
                raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
    out = {}
    for name, xs in samples.items():
        xs.sort()
        out[name] = (statistics.median(xs), xs[min(len(xs) - 1, int(len(xs) * 0.99))])
    return out


def print_mechanisms(mode: str, figures: dict[str, tuple[float, float]]) -> None:
    base = figures["default"][0]
    print(f"  {mode}: {'setting':<24}{'p50 ms':>9}{'p99 ms':>9}{'p50 vs default':>16}")
    for name, (p50, p99) in figures.items():
        print(f"  {'':<{len(mode) + 2}}{name:<24}{p50:>9.1f}{p99:>9.1f}{p50 / base - 1:>+16.0%}")


async def bench_mechanisms(args: argparse.Namespace, size: int) -> None:
    """Retrieval mechanisms on and off on a writer-loaded realm, through the app in-process
    (ASGI): PostgreSQL only, no Kafka and no server process."""
    realm = args.reuse or f"bm{size}_{uuid.uuid4().hex[:6]}"
    docs = make_corpus(size)
    print(f"\n== mechanisms on and off: {size:,} entities ==", flush=True)
    if not args.reuse:
        await load_writer(args.dsn, realm, docs)
    pool = make_pool(args.dsn, min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        app = create_app(
            QuerySettings(), Deps(pool=pool, embedders=lambda r, p: HashingEmbedder(DIM))
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for mode in args.modes:
                figures = await mechanism_latency(
                    client, realm, make_queries(docs), mode, args.requests
                )
                print_mechanisms(mode, figures)
    finally:
        await pool.close()
        if not args.keep and not args.reuse:
            await _drop(args.dsn, realm)


# ---------------------------------------------------------------------------- answers

ANSWER_MODES = ("local", "mix", "hybrid", "global")


async def bench_answers(args: argparse.Namespace) -> None:
    """Answer recall@25 on the hub corpus, through the app in-process (ASGI)."""
    made, questions = make_answer_corpus(SYL)
    docs = [Doc(d.key, d.text, d.entities, d.relations) for d in made]
    realm = f"ba_{uuid.uuid4().hex[:8]}"
    answers = sum(len(q.answers) for q in questions)
    print(
        f"\n== answer recall@25: {len(docs)} documents, "
        f"{sum(len(d.relations) for d in docs):,} relations, {len(questions)} questions "
        f"({answers} answering triples) ==",
        flush=True,
    )
    async with _loaded(args, realm, docs) as client:
        print(f"  {'mode':<8}{'recall@25':>11}{'  subject':>10}{'  object':>9}{'first right':>13}")
        for mode in ANSWER_MODES:
            f = await answer_recall(client, realm, questions, mode)
            print(
                f"  {mode:<8}{f.recall['all']:>11.1%}{f.recall['subject']:>10.1%}"
                f"{f.recall['object']:>9.1%}{f.first_right:>13.1%}",
                flush=True,
            )
    await bench_chains(args)


CHAIN_MODES = ("mix", "local", "hybrid")


async def bench_chains(args: argparse.Namespace) -> None:
    """Evidence recall@10 and @25 on the evidence-chain corpus, per mode and question kind,
    then on the held-out corpus in the shape the issue first measured."""
    await chain_table(args, "evidence chains", *make_chain_corpus(SYL))
    await chain_table(args, "held-out", *make_issue_corpus(SYL))


async def chain_table(
    args: argparse.Namespace, title: str, made: list[AnswerDoc], questions: list[ChainQuestion]
) -> None:
    docs = [Doc(d.key, d.text, d.entities, d.relations) for d in made]
    realm = f"bc_{uuid.uuid4().hex[:8]}"
    kinds = list(dict.fromkeys(q.kind for q in questions))
    print(
        f"\n== {title}, evidence recall@{'/@'.join(map(str, CUTS))}: {len(docs)} documents, "
        f"{sum(len(d.relations) for d in docs):,} relations, {len(questions)} questions "
        f"({', '.join(f'{sum(q.kind == k for q in questions)} {k}' for k in kinds)}) ==",
        flush=True,
    )
    async with _loaded(args, realm, docs) as client:
        print(f"  {'mode':<8}" + "".join(f"{k:>20}" for k in kinds))
        for mode in CHAIN_MODES:
            f = await chain_recall(client, realm, questions, mode)
            cells = "".join(f"{f'{f.recall[k][0]:.2f} / {f.recall[k][1]:.2f}':>20}" for k in kinds)
            print(f"  {mode:<8}{cells}", flush=True)


@asynccontextmanager
async def _loaded(
    args: argparse.Namespace, realm: str, docs: list[Doc]
) -> AsyncIterator[httpx.AsyncClient]:
    """``docs`` written into ``realm``, and a client of the query app over it in-process
    (ASGI); the realm is dropped afterwards unless ``--keep``."""
    await load_writer(args.dsn, realm, docs)
    pool = make_pool(args.dsn, min_size=1, max_size=2)
    await pool.open(wait=True)
    try:
        app = create_app(
            QuerySettings(), Deps(pool=pool, embedders=lambda r, p: HashingEmbedder(DIM))
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            yield client
    finally:
        await pool.close()
        if not args.keep:
            await _drop(args.dsn, realm)


async def _drop(dsn: str, realm: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(f"realm_{realm}"))
        )
        await conn.execute("DELETE FROM tidegraph.realms WHERE realm = %s", (realm,))
        await conn.execute("DELETE FROM tidegraph.publisher_positions WHERE realm = %s", (realm,))


# ---------------------------------------------------------------------------- main


async def build_realm(args: argparse.Namespace, size: int, shape: Shape, docs: list[Doc]) -> str:
    """A loaded realm of ``size`` entities in ``shape``: a cached one when it exists and is
    complete (re-indexed when the search index DDL changed), else built now."""
    if args.reuse:
        return str(args.reuse)
    method = args.load or ("writer" if size <= 20_000 and shape.kind == "hashing" else "copy")
    if method == "writer" and shape.kind != "hashing":
        raise SystemExit("the writer path embeds with the realm's embedder: hashing only")
    realm = (
        cached_realm(size, shape, method)
        if args.cache
        else f"bq{size}_{shape.kind[0]}{shape.dim}_{uuid.uuid4().hex[:6]}"
    )
    state = await realm_state(args.dsn, realm, len(docs), shape.dim)
    print(f"  realm {realm} ({method}): {state}", flush=True)
    if state == "ready":
        return realm
    if state == "stale":
        await asyncio.to_thread(build_search_indexes, args.dsn, realm, shape)
        return realm
    if state == "partial":
        await _drop(args.dsn, realm)
    t = time.perf_counter()
    if method == "writer":
        await load_writer(args.dsn, realm, docs)
        await asyncio.to_thread(build_search_indexes, args.dsn, realm, shape)
    else:
        await asyncio.to_thread(load_copy, args.dsn, realm, docs, shape)
    async with await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as conn:
        for tbl in ("relations", "entities", "chunks", "mentions", "relation_sources"):
            await conn.execute(
                sql.SQL("VACUUM ANALYZE {}.{}").format(
                    sql.Identifier(f"realm_{realm}"), sql.Identifier(tbl)
                )
            )
    print(f"  built in {time.perf_counter() - t:.1f}s (load, indexes, analyze)", flush=True)
    return realm


async def bench_size(args: argparse.Namespace, size: int) -> None:
    dsn, bootstrap = args.dsn, args.bootstrap
    docs = make_corpus(size)
    queries = make_queries(docs)
    print(
        f"\n== {size:,} entities, {len(docs):,} documents, "
        f"{sum(len(d.relations) for d in docs):,} relations ==",
        flush=True,
    )
    for shape in args.vectors:
        print(f" -- vectors: {shape.name}", flush=True)
        realm = await build_realm(args, size, shape, docs)
        ef = service_ef(args.ef, args.ef_hashing_relations, shape)
        rec = await recall(dsn, realm, queries, ef, shape)
        print(
            "  recall@10 vs exact search, by hnsw.ef_search (median ms per search);"
            " * = the service's setting",
            flush=True,
        )
        for tbl, curve in rec.items():
            cells = "  ".join(
                f"{'*' if w == ef[tbl] else ' '}{w:>3}: {r:.3f} ({ms:.1f} ms)" for w, r, ms in curve
            )
            print(f"    {tbl:<10}{cells}", flush=True)
        if shape.name in args.latency_shapes:
            half = T0 + timedelta(seconds=len(docs) // 2)
            await serve_and_measure(
                args, size, realm, queries, ef, first=shape == args.vectors[0], half=half
            )
        if not args.cache and not args.keep and not args.reuse:
            await _drop(dsn, realm)
    del bootstrap


async def serve_and_measure(
    args: argparse.Namespace,
    size: int,
    realm: str,
    queries: list[str],
    ef: dict[str, int],
    *,
    first: bool,
    half: datetime,
) -> None:
    """Latency per mode and client count against ``tidegraph serve``, with the CPU each
    side spent (``<mode>@half``: as believed at ``half``, when half the documents were);
    then the mechanisms, freshness and the change feed (first shape only)."""
    dsn, bootstrap = args.dsn, args.bootstrap
    proc, url = start_server(dsn, bootstrap, ef, "bq")
    try:
        postmaster = await postmaster_pid(dsn)
        print(
            f"  {'mode':<8}{'clients':>8}{'p50 ms':>10}{'p99 ms':>10}{'req/s':>10}"
            f"   CPU ms per request: {'client':>7}{'serve':>7}{'postgres':>9}   load"
        )
        for mode in args.modes:
            for clients in args.clients:
                before = cpu_split(proc.pid, postmaster)
                requests = args.requests * max(1, clients // 2)
                p50, p99, rps, n = await latency(url, realm, queries, mode, clients, requests, half)
                after = cpu_split(proc.pid, postmaster)
                ms = [(a - b) * 1000 / n for a, b in zip(after, before, strict=True)]
                print(
                    f"  {mode:<8}{clients:>8}{p50:>10.1f}{p99:>10.1f}{rps:>10.0f}"
                    f"   {'':>19}{ms[0]:>7.1f}{ms[1]:>7.1f}{ms[2]:>9.1f}"
                    f"   {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        if not first or not args.extras:
            return
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            print("  retrieval mechanisms, one client, each setting in turn per query:")
            for mode in args.modes:
                if mode in ("mix", "local", "hybrid"):  # never an @half mode
                    figures = await mechanism_latency(client, realm, queries, mode, args.requests)
                    print_mechanisms(mode, figures)
        if args.freshness and size == args.sizes[0]:
            f50, f99 = await freshness(dsn, bootstrap, url)
            print(f"  freshness publish-to-visible: p50 {f50:.1f} ms, p99 {f99:.1f} ms", flush=True)
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)
    if first and args.extras:
        count, rate = await publish_rate(dsn, bootstrap, realm)
        print(f"  change feed: {count:,} changes published at {rate:,.0f} changes/s", flush=True)


def cpu_split(server: int, postmaster: int | None) -> tuple[float, float, float]:
    """CPU seconds so far of this process (the HTTP client), of ``tidegraph serve`` and of
    PostgreSQL (``cpu.postgres_cpu``)."""
    t = os.times()
    return t.user + t.system, process_cpu(server), postgres_cpu(postmaster)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument(
        "--modes",
        default="mix,local,global,naive,mix@half",
        help="retrieval modes timed; <mode>@half asks as_believed_at the instant half the"
        " documents were written",
    )
    p.add_argument("--clients", default="1,4,8")
    p.add_argument("--requests", type=int, default=200, help="per cell (× clients/2)")
    defaults = QuerySettings()
    p.add_argument("--ef-entities", type=int, default=defaults.ef_search)
    p.add_argument("--ef-relations", type=int, default=defaults.ef_search_relations)
    p.add_argument("--ef-chunks", type=int, default=defaults.ef_search_chunks)
    p.add_argument("--ef-hashing-relations", type=int, default=defaults.ef_search_hashing_relations)
    p.add_argument("--load", choices=["writer", "copy"], help="force one loading path")
    p.add_argument("--no-freshness", dest="freshness", action="store_false")
    p.add_argument("--keep", action="store_true", help="keep the bench realms")
    p.add_argument(
        "--vectors",
        default="hashing-384,clustered-384,clustered-1536",
        help="vector shapes: hashing-N (the hashing embedder) and clustered-N (a mixture of"
        " Gaussians shaped like a model's; see bench/shapes.py)",
    )
    p.add_argument(
        "--latency-shapes",
        default="hashing-384,clustered-384",
        help="shapes whose realms are also served and timed (queries are embedded by the"
        " realm's hashing embedder at its dimension)",
    )
    p.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="build fresh realms (dropped afterwards) instead of keeping built ones keyed by"
        " size, shape and corpus version",
    )
    p.add_argument(
        "--no-extras",
        dest="extras",
        action="store_false",
        help="latency only: no mechanisms table, freshness or change feed",
    )
    p.add_argument("--reuse", help="measure an already loaded realm (one size only)")
    p.add_argument(
        "--answers-only",
        action="store_true",
        help="answer recall@25 and evidence-chain recall only",
    )
    p.add_argument("--chains-only", action="store_true", help="evidence-chain recall only")
    p.add_argument("--no-answers", dest="answers", action="store_false")
    p.add_argument(
        "--mechanisms-only",
        action="store_true",
        help="latency with each retrieval mechanism on and off, in-process, PostgreSQL only",
    )
    args = p.parse_args()
    args.ef = {
        "entities": args.ef_entities,
        "relations": args.ef_relations,
        "chunks": args.ef_chunks,
    }
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.vectors = [Shape.parse(v) for v in args.vectors.split(",")]
    args.latency_shapes = set(args.latency_shapes.split(","))
    args.modes = args.modes.split(",")
    args.clients = [int(c) for c in args.clients.split(",")]
    args.bootstrap, args.dsn = services.given_or_up()
    print(
        f"query benchmark: vectors {', '.join(v.name for v in args.vectors)}, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start"
    )
    if args.mechanisms_only:
        for size in args.sizes:
            asyncio.run(bench_mechanisms(args, size))
        return
    if args.chains_only:
        asyncio.run(bench_chains(args))
        return
    if args.answers or args.answers_only:
        asyncio.run(bench_answers(args))
    if args.answers_only:
        return
    for size in args.sizes:
        asyncio.run(bench_size(args, size))


if __name__ == "__main__":
    main()
