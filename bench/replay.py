"""Replay throughput against live indexing, and how long a swap holds the live realm.

One realm of 5,000 documents (about 1.8 KB, one chunk each) is indexed by a real
`tidegraph indexer` process with the model extractor, answered by a local
OpenAI-compatible endpoint with a fixed latency per call (``--latency``; it answers with
what the rule-based extractor finds in the chunk, and nothing on gleaning passes).
Embeddings are the offline hashing embedder (384 dimensions), so every model call is an
extraction call. Then `tidegraph replay` rebuilds the realm with the extraction cache
warm, while the indexer keeps running and a trickle of new documents keeps arriving, and
swaps it in. Prints:

- live indexing: documents/s applied from a backlog (cold cache: every chunk is extracted);
- replay: records/s and documents/s of the load (bulk: no search indexes or foreign keys,
  batched commits), adding the keys and building the indexes, the total, and the ratio
  to live indexing;
- model calls made by the replay (its own endpoint instance, so the count is its alone);
- the swap: how long the live realm's lock was held, records applied under it, and the
  longest pause between two trickle documents applied by the indexer around the swap.

``--extractor rules`` runs the same comparison with the offline extractor (no cache: the
replay extracts again, so only bulk loading separates the two). ``--fresh-names`` gives
every mention a person never seen before, for a realm of about 25 entities per document
(``--documents 4000`` rebuilds a realm of about 100,000 entities).

Services: ``TIDEGRAPH_KAFKA_BOOTSTRAP`` / ``TIDEGRAPH_PG_DSN`` when set, else the ones
``tidegraph up`` runs. Run: ``.venv/bin/python bench/replay.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
from aiokafka import AIOKafkaProducer
from progress import wait_applied

from tidegraph.connectors.topics import ensure_topic_specs
from tidegraph.indexer.extraction.rules import RulesExtractor
from tidegraph.infra import services
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.topics import topic_specs

REPO = Path(__file__).resolve().parents[1]
GIVEN = [
    "Ada",
    "Bram",
    "Cora",
    "Dirk",
    "Elsa",
    "Finn",
    "Greta",
    "Hugo",
    "Iris",
    "Jonas",
    "Kaja",
    "Lars",
    "Mira",
    "Nils",
    "Olga",
    "Piet",
    "Rosa",
    "Sven",
    "Tilde",
    "Ulf",
]
FAMILY = [
    "Aalto",
    "Berg",
    "Dahl",
    "Ek",
    "Falk",
    "Holm",
    "Lind",
    "Moberg",
    "Nyström",
    "Ohlin",
    "Quist",
    "Rask",
    "Sand",
    "Strand",
    "Törn",
    "Wall",
    "Viklund",
    "Åberg",
]
GUILDS = [
    "Harbour Guild",
    "Ropemakers Union",
    "Northern Survey",
    "Lighthouse Board",
    "Pilot Society",
    "Chart Office",
]
SYLLABLES = [
    "ka",
    "lo",
    "ven",
    "dra",
    "mi",
    "sto",
    "ber",
    "lin",
    "ta",
    "ru",
    "sel",
    "vik",
    "no",
    "ha",
    "gre",
    "pa",
    "dun",
    "fel",
    "os",
    "tir",
]
LINKS = ["worked with", "is an ally of", "is a friend of", "mentored", "is a rival of"]
PROSE = [
    "The ledgers of that season survive only in part, and the pages are water-stained.",
    "Much of what is known comes from letters kept by the harbour master's family.",
    "Later accounts disagree on the dates, and the minutes of the meetings are terse.",
    "The winter was hard on the fleet, and several crews were laid off until spring.",
    "A survey of the coast was under way, and new charts were issued twice that year.",
]


# -- an OpenAI-compatible endpoint answering with the rule-based extractor -------------


def serve_model(latency: float) -> None:
    """Run the endpoint in this process; print its base URL; stop when stdin closes."""
    extractor = RulesExtractor()
    lock = threading.Lock()
    calls = {"chat": 0, "embed": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            with lock:
                self._reply(200, dict(calls))

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            time.sleep(latency)
            if self.path.endswith("/embeddings"):
                with lock:
                    calls["embed"] += 1
                self._reply(400, {"error": {"message": "no embeddings here"}})
                return
            with lock:
                calls["chat"] += 1
            prompt = str(body["messages"][-1]["content"])
            start = prompt.find("<chunk>\n") + len("<chunk>\n")
            chunk = prompt[start : prompt.rfind("\n</chunk>")]
            if "<already_extracted>" in prompt:
                output: dict[str, Any] = {"entities": [], "relations": []}
            else:
                output = extractor.extract_text(chunk).model_dump(mode="json")
            content = json.dumps(output)
            self._reply(
                200,
                {
                    "id": "bench",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", ""),
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "logprobs": None,
                            "message": {"role": "assistant", "content": content},
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(prompt) // 4,
                        "completion_tokens": len(content) // 4,
                        "total_tokens": (len(prompt) + len(content)) // 4,
                    },
                },
            )

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    sys.stdin.read()
    server.shutdown()


class ModelProcess:
    """The endpoint in its own process, so it does not compete for the caller's GIL."""

    def __init__(self, latency: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-model", "--latency", str(latency)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().decode().strip()

    def calls(self) -> dict[str, int]:
        import urllib.request

        with urllib.request.urlopen(self.url + "/stats", timeout=5) as answer:
            result: dict[str, int] = json.loads(answer.read())
            return result

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


# -- corpus, publishing, waiting --------------------------------------------------------


class People:
    """Person names: a cast of 360 met again and again, or someone new every time."""

    def __init__(self, rng: random.Random, *, fresh: bool) -> None:
        self.rng = rng
        self.fresh = fresh
        self.count = 0

    def __call__(self) -> str:
        if not self.fresh:
            return f"{self.rng.choice(GIVEN)} {self.rng.choice(FAMILY)}"
        n, self.count = self.count, self.count + 1
        family = "".join(SYLLABLES[n // 20 // 20**k % 20] for k in range(3)).capitalize()
        return f"{GIVEN[n % 20]} {family}"


def document(
    rng: random.Random, people: People, realm: str, key: str, order: int
) -> DocumentVersion:
    sentences: list[str] = []
    while sum(len(s) + 1 for s in sentences) < 1700:
        a, b = people(), people()
        while b == a:
            b = people()
        if rng.random() < 0.7:
            sentences.append(f"{a} {rng.choice(LINKS)} {b}.")
        else:
            sentences.append(f"{a} joined the {rng.choice(GUILDS)} in {rng.randint(1850, 1910)}.")
        sentences.append(rng.choice(PROSE))
    text = " ".join(sentences)
    return DocumentVersion(
        realm=realm,
        doc_key=key,
        op="upsert",
        content=text,
        content_hash=content_hash(text),
        title=f"Harbour record {key}",
        order_key=f"{order:06d}",
        event_time=datetime.now(UTC),
    )


async def publish(
    bootstrap: str,
    topic: str,
    docs: list[DocumentVersion],
    rate: float | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    producer = AIOKafkaProducer(
        **kafka_client_options(),
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        compression_type="lz4",
        linger_ms=5,
    )
    await producer.start()
    try:
        futures = []
        for n, doc in enumerate(docs):
            if stop is not None and stop.is_set():
                break
            futures.append(await producer.send(topic, doc.to_json(), key=doc.realm.encode()))
            if rate:
                await asyncio.sleep(1 / rate)
                if n % 10 == 0:
                    await asyncio.gather(*futures)
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def live_stall(dsn: str, realm: str, retired: str, committed_at: datetime) -> float:
    """Seconds between the indexer's last write into the old schema and its first write
    into the rebuilt one: how long the swap stalled live indexing (retry backoff included).
    Writes into the new schema before the commit are the replay's catch-up, not the
    indexer's."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            psycopg.sql.SQL("SELECT max(applied_at) FROM {}.documents").format(
                psycopg.sql.Identifier(retired)
            )
        )
        before = (await cur.fetchone() or (None,))[0]
        cur = await conn.execute(
            psycopg.sql.SQL(
                "SELECT min(applied_at) FROM {}.documents WHERE applied_at > %s"
            ).format(psycopg.sql.Identifier(f"realm_{realm}")),
            (committed_at,),
        )
        after = (await cur.fetchone() or (None,))[0]
    if before is None or after is None:
        return float("nan")
    return float((after - before).total_seconds())


# -- the benchmark ----------------------------------------------------------------------


async def run(args: argparse.Namespace) -> None:
    bootstrap, dsn = services.given_or_up()
    tag = uuid.uuid4().hex[:8]
    prefix, realm, group = f"benchr{tag}", f"benchr{tag}", f"benchr-{tag}"
    topic = f"{prefix}.documents"
    await ensure_topic_specs(bootstrap, topic_specs(prefix, partitions=4))
    rng = random.Random(7)
    people = People(rng, fresh=args.fresh_names)
    docs = [document(rng, people, realm, f"doc-{i:05d}.md", i) for i in range(args.documents)]
    print(
        f"corpus: {len(docs)} documents of {sum(len(d.content or '') for d in docs) // len(docs)}"
        f" characters, extractor {args.extractor}"
        + (
            f" (model latency {args.latency * 1000:.0f} ms per call)"
            if args.extractor == "llm"
            else ""
        )
    )

    live_model = ModelProcess(args.latency) if args.extractor == "llm" else None
    replay_model = ModelProcess(args.latency) if args.extractor == "llm" else None
    env = dict(
        os.environ,
        TIDEGRAPH_KAFKA_BOOTSTRAP=bootstrap,
        TIDEGRAPH_PG_DSN=dsn,
        TIDEGRAPH_TOPIC_PREFIX=prefix,
        TIDEGRAPH_EMBEDDER="hashing:384",
        TIDEGRAPH_EXTRACTOR=args.extractor,
        OPENAI_API_KEY="sk-bench",
        TIDEGRAPH_LLM_MODEL="bench-chat",
        TIDEGRAPH_LLM_MAX_IN_FLIGHT=str(args.concurrency),
    )
    if live_model is not None:
        env["TIDEGRAPH_LLM_BASE_URL"] = live_model.url
    indexer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidegraph.infra.cli",
            "indexer",
            "--group",
            group,
            "--concurrency",
            str(args.concurrency),
            "--log-level",
            "WARNING",
        ],
        env=env,
        cwd=REPO,
    )
    try:
        await publish(bootstrap, topic, docs)
        live_seconds = await wait_applied(dsn, group, topic, len(docs))
        live_rate = len(docs) / live_seconds
        print(
            f"live indexing: {live_rate:.1f} documents/s ({live_seconds:.1f} s from a backlog)"
            f"; the realm holds {await graph_size(dsn, realm)}"
        )

        stop = asyncio.Event()
        trickle_docs = [
            document(rng, people, realm, f"new-{i:05d}.md", 100000 + i) for i in range(10**4)
        ]
        trickle = asyncio.create_task(
            publish(bootstrap, topic, trickle_docs, rate=args.trickle, stop=stop)
            if args.trickle > 0
            else asyncio.sleep(0)
        )
        replay_env = dict(env)
        if replay_model is not None:
            replay_env["TIDEGRAPH_LLM_BASE_URL"] = replay_model.url
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tidegraph.infra.cli",
            "replay",
            "--realm",
            realm,
            "--group",
            group,
            "--json",
            "--concurrency",
            str(args.concurrency),
            env=replay_env,
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await proc.communicate()
        await asyncio.sleep(2)  # the trickle goes on a little past the swap
        stop.set()
        await trickle
        if proc.returncode != 0:
            raise RuntimeError(f"replay failed with exit status {proc.returncode}")
        result = json.loads(out)
        load = result["load_seconds"]
        written = result["load_written"]
        print(
            f"replay load: {result['load_records'] / load:.1f} records/s, "
            f"{written / load:.1f} documents/s ({written} documents in {load:.1f} s) — "
            f"{written / load / live_rate:.1f}× live indexing"
        )
        overall = result["written"] / result["total_seconds"]
        print(
            f"replay foreign keys and search indexes: {result['index_seconds']:.1f} s; total "
            f"{result['total_seconds']:.1f} s for {result['written']} documents including "
            f"catch-up with the trickle and the swap ({overall:.1f} documents/s overall, "
            f"{overall / live_rate:.1f}× live)"
        )
        print(
            f"replay after the indexes: {result['follow_seconds']:.1f} s following the live"
            f" position (each write maintaining the indexes), {result['baseline_seconds']:.1f}"
            " s comparing old and new graph ahead of the lock"
        )
        if replay_model is not None:
            print(f"model calls by the replay: {sum(replay_model.calls().values())}")
        print(f"rebuilt realm: {await graph_size(dsn, realm)}")
        swap = result["swap"]
        stall = await live_stall(
            dsn, realm, result["retired"], datetime.fromisoformat(swap["committed_at"])
        )
        paused = (
            f"; with {args.trickle:g} documents/s arriving, the indexer's writes paused"
            f" {stall * 1000:.0f} ms across the swap (its retry backoff included)"
            if args.trickle > 0
            else ""
        )
        print(
            f"swap: live realm held {swap['hold_ms']:.0f} ms ({swap['catch_up_ms']:.0f} ms "
            f"applying {swap['catch_up_records']} records under the lock, "
            f"{swap['diff_ms']:.0f} ms comparing old and new graph){paused}"
        )
    finally:
        indexer.terminate()
        indexer.wait(30)
        for model in (live_model, replay_model):
            if model is not None:
                model.stop()
        if not args.keep:
            await drop_realm(dsn, realm, group)


async def graph_size(dsn: str, realm: str) -> str:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        counts = []
        for table in ("entities", "relations", "chunks"):
            cur = await conn.execute(
                psycopg.sql.SQL("SELECT count(*) FROM {}").format(
                    psycopg.sql.Identifier(f"realm_{realm}", table)
                )
            )
            counts.append(f"{(await cur.fetchone() or (0,))[0]:,} {table}")
    return ", ".join(counts)


async def drop_realm(dsn: str, realm: str, group: str) -> None:
    """The benchmark's realm, its retired schema and copies, and their positions."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = %s OR starts_with(nspname, %s)",
            (f"realm_{realm}", f"realm_{realm}__"),
        )
        for (schema,) in await cur.fetchall():
            await conn.execute(
                psycopg.sql.SQL("DROP SCHEMA {} CASCADE").format(psycopg.sql.Identifier(schema))
            )
        await conn.execute("DELETE FROM tidegraph.realms WHERE realm = %s", (realm,))
        await conn.execute(
            "DELETE FROM tidegraph.consumer_positions WHERE group_id = %s"
            " OR starts_with(group_id, %s)",
            (group, f"tidegraph-replay:realm_{realm}"),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=5000)
    parser.add_argument("--extractor", choices=("llm", "rules"), default="llm")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per model call")
    parser.add_argument("--concurrency", type=int, default=16, help="documents prepared at once")
    parser.add_argument(
        "--trickle",
        type=float,
        default=2.0,
        help="documents/s published while the replay runs (0: none)",
    )
    parser.add_argument(
        "--fresh-names",
        action="store_true",
        help="a new person in every mention (about 25 entities per document)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the realm and its retired schema for inspection"
    )
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_model:
        serve_model(args.latency)
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
