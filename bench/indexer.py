"""Indexer throughput, freshness, no-op rate and memory on the offline extractor.

Streams 5,000 documents of about 9 KB (5 chunks each at the default chunk size, about four
entities and four relations per chunk) through a real `tidegraph indexer` process, with
broker and database on this machine, hashing embeddings of 384 dimensions. Prints:

- documents/s, chunks/s and relations/s applied (backlog drained from a cold start), and
  the CPU the indexer process and PostgreSQL spent per document meanwhile (``cpu``);
- publish-to-applied latency p50/p99 for documents published at a quarter of that rate;
- no-op throughput when all 5,000 are re-sent unchanged (published while the indexer is
  held with SIGSTOP, then drained);
- the indexer's peak RSS.

``--functional`` creates the realms first with ``works_at`` and ``married_to`` declared
functional in the subject, so every write also loads and resolves their functional scopes
(the corpus moves people between organisations); compare with a run without it.

``--model-latency S`` puts a model endpoint in the path: the realms extract with the
``llm`` extractor (a first pass and one gleaning pass per chunk, in order within a
document) against the scripted OpenAI-compatible server in its own process, which answers
each chunk after ``S`` seconds with what the offline extractor finds in it, so the graph
written is the same. The endpoint allows ``--model-in-flight`` calls at once, so the ideal
is ``in-flight / S`` calls/s; the run prints the rate reached as a share of it (the model,
not tidegraph, should be the bottleneck: at least 80%). ``--size 1400`` gives one-chunk
documents.

Services: ``TIDEGRAPH_KAFKA_BOOTSTRAP`` / ``TIDEGRAPH_PG_DSN`` when set, else the ones
``tidegraph up`` runs (started if needed). Run: ``.venv/bin/python bench/indexer.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
from backlog import document, publish, scripted_answers
from cpu import postgres_cpu, postmaster_pid, process_cpu
from progress import wait_applied
from scripted import ScriptedServer

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.infra import services
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.schemas.topics import topic_specs
from tidegraph.store.realms import create_realm, ensure_control

REPO = Path(__file__).resolve().parents[1]


def _rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _freshness(
    dsn: str,
    bootstrap: str,
    group: str,
    topic: str,
    realms: list[str],
    fresh: list[DocumentVersion],
    applied_before: int,
    rate: float,
) -> None:
    """Publish ``fresh`` at ``rate`` documents/s and print publish-to-applied p50/p99."""
    sent = await publish(bootstrap, topic, fresh, rate=rate)
    await wait_applied(dsn, group, topic, applied_before + len(fresh))
    latencies: list[float] = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for realm in realms:
            cur = await conn.execute(
                f"SELECT doc_key, extract(epoch FROM applied_at) FROM realm_{realm}.documents"  # noqa: S608
                " WHERE doc_key = ANY(%s)",
                (list(sent),),
            )
            for key, applied in await cur.fetchall():
                latencies.append((float(applied) - sent[key]) * 1000)
    print(
        f"publish-to-applied at {rate:.0f} documents/s: "
        f"p50 {statistics.median(latencies):.1f} ms, p99 {_pct(latencies, 0.99):.1f} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=5000)
    parser.add_argument(
        "--fresh", type=int, default=400, help="documents for the latency run (0: no latency run)"
    )
    parser.add_argument(
        "--catch-up-run", type=int, default=16, help="the indexer's --catch-up-run (0: off)"
    )
    parser.add_argument(
        "--functional",
        action="store_true",
        help="create the realms with works_at and married_to functional in the subject",
    )
    parser.add_argument("--size", type=int, default=9000, help="characters per document")
    parser.add_argument(
        "--model-latency",
        type=float,
        default=None,
        help="extract through the scripted model endpoint, this many seconds per call",
    )
    parser.add_argument(
        "--model-in-flight", type=int, default=16, help="calls the endpoint allows at once"
    )
    parser.add_argument("--concurrency", type=int, default=None, help="the indexer's --concurrency")
    args = parser.parse_args()

    bootstrap, dsn = services.given_or_up()
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    realms = [f"bench{uuid.uuid4().hex[:8]}" for _ in range(4)]
    group = f"bench-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.documents"
    await ensure_topic_specs(bootstrap, topic_specs(prefix, partitions=4))
    extractor = "rules" if args.model_latency is None else "llm"
    if args.functional:
        config = RealmConfig(
            embedder="hashing:384",
            extractor=extractor,
            functional_predicates={"works_at": "subject", "married_to": "subject"},
        )
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await ensure_control(conn)
            for realm in realms:
                await create_realm(conn, realm, config)
    rng = random.Random(42)
    docs = [document(rng, realms[i % len(realms)], i, args.size) for i in range(args.documents)]
    fresh = [
        document(rng, realms[i % len(realms)], args.documents + i, args.size)
        for i in range(args.fresh)
    ]
    size = sum(len(d.content or "") for d in docs)
    print(f"corpus: {len(docs)} documents, {size / len(docs) / 1000:.1f} KB each on average")

    env = dict(
        os.environ,
        TIDEGRAPH_KAFKA_BOOTSTRAP=bootstrap,
        TIDEGRAPH_PG_DSN=dsn,
        TIDEGRAPH_TOPIC_PREFIX=prefix,
        TIDEGRAPH_EMBEDDER="hashing:384",
        TIDEGRAPH_EXTRACTOR=extractor,
    )
    model: ScriptedServer | None = None
    if args.model_latency is not None:
        model = ScriptedServer(args.model_latency, scripted_answers(docs + fresh))
        env.update(
            TIDEGRAPH_LLM_BASE_URL=model.base_url,
            TIDEGRAPH_LLM_MODEL="bench-chat",
            OPENAI_API_KEY="bench",
            TIDEGRAPH_LLM_MAX_IN_FLIGHT=str(args.model_in_flight),
        )
        print(
            f"model: scripted endpoint, {args.model_latency * 1000:.0f} ms per call, "
            f"{args.model_in_flight} calls in flight"
        )
    await publish(bootstrap, topic, docs)
    postmaster = await postmaster_pid(dsn)
    pg_before = postgres_cpu(postmaster)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidegraph.infra.cli",
            "indexer",
            "--group",
            group,
            "--log-level",
            "WARNING",
            "--catch-up-run",
            str(args.catch_up_run),
            *(["--concurrency", str(args.concurrency)] if args.concurrency else []),
        ],
        env=env,
        cwd=REPO,
    )
    try:
        elapsed = await wait_applied(dsn, group, topic, len(docs))
        indexer_cpu, pg_cpu = process_cpu(proc.pid), postgres_cpu(postmaster) - pg_before
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            chunks = relations = 0
            first, last = float("inf"), 0.0
            for realm in realms:
                cur = await conn.execute(f"SELECT count(*) FROM realm_{realm}.chunks")  # noqa: S608
                chunks += (await cur.fetchone() or (0,))[0]
                cur = await conn.execute(f"SELECT count(*) FROM realm_{realm}.relation_sources")  # noqa: S608
                relations += (await cur.fetchone() or (0,))[0]
                cur = await conn.execute(
                    "SELECT extract(epoch FROM min(applied_at)),"
                    f" extract(epoch FROM max(applied_at)) FROM realm_{realm}.documents"  # noqa: S608
                )
                row = await cur.fetchone()
                assert row is not None
                first, last = min(first, float(row[0])), max(last, float(row[1]))
        rate = len(docs) / elapsed
        steady = (len(docs) - 1) / (last - first)
        print(
            f"applied: {rate:.0f} documents/s, {chunks / elapsed:.0f} chunks/s, "
            f"{relations / elapsed:.0f} relations/s ({elapsed:.1f} s for {len(docs)} docs, "
            f"{chunks / len(docs):.1f} chunks and {relations / chunks:.1f} relation "
            "contributions per chunk); from the first document applied to the last "
            f"{steady:.1f} documents/s ({last - first:.1f} s; the rest is the indexer starting "
            "and preparing its first documents)"
        )
        if postmaster is not None:
            per_doc = 1000 / len(docs)
            print(
                f"CPU while draining: indexer {indexer_cpu * per_doc:.1f} ms/document, "
                f"PostgreSQL {pg_cpu * per_doc:.1f} ms/document "
                f"({indexer_cpu / (indexer_cpu + pg_cpu):.0%} : "
                f"{pg_cpu / (indexer_cpu + pg_cpu):.0%})"
            )

        if model is not None:
            stats = model.stats()
            calls = stats["calls"].get("chat", 0)
            ideal = args.model_in_flight / args.model_latency / (calls / len(docs))
            print(
                f"model-bound: {calls} calls ({calls / len(docs):.1f} a document, at most "
                f"{stats['max_concurrent']} at once, {stats['unmatched_chunks']} unscripted); "
                f"ideal {ideal:.1f} documents/s, reached {rate / ideal:.0%} over the whole "
                "drain (target 80%)"
            )

        if fresh:
            await _freshness(dsn, bootstrap, group, topic, realms, fresh, len(docs), rate / 4)
        else:
            print("publish-to-applied: not measured (--fresh 0)")

        # The indexer is held while the re-sends are published, so the figure is its own
        # rate, not the publisher's (well inside the group's session timeout).
        proc.send_signal(signal.SIGSTOP)
        try:
            await publish(bootstrap, topic, docs)
        finally:
            proc.send_signal(signal.SIGCONT)
        noop = await wait_applied(dsn, group, topic, 2 * len(docs) + len(fresh))
        print(
            f"no-op re-sends: {len(docs) / noop:.0f} documents/s "
            f"({len(docs)} unchanged documents drained in {noop:.2f} s)"
        )
        print(f"indexer peak RSS: {_rss_peak_mb(proc.pid):.0f} MB")
    finally:
        proc.terminate()
        proc.wait(30)
        if model is not None:
            model.stop()


if __name__ == "__main__":
    asyncio.run(main())
