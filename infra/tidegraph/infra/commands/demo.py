"""``tidegraph demo``: the whole pipeline on a sample corpus, then the query service answering.

Creates the topics and a ``demo`` realm (narrative preset, so the corpus's ally → enemy
reversal supersedes), starts an indexer and ``serve`` (query API + change publisher),
publishes the sample corpus shipped in the package (or ``--corpus``) through the bulk
connector — the later dispute document (``--later``) only once the rest is indexed, so it
arrives later in belief time as it would in life — and asks one question. It then prints
what valid time and belief time each show (a line each) and keeps serving until
interrupted, or exits with ``--once``. A demo that would show nothing fails instead: a
corpus that cannot be read in full, holds no document, has none indexed, or answers the
question with no relation is an error (exit 1) saying which.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

from tidegraph.connectors import (
    DocumentProducer,
    Input,
    Refusal,
    ensure_topics,
    publish_items,
    read_inputs,
)
from tidegraph.indexer.consumer import Indexer, IndexerConfig, make_pool
from tidegraph.indexer.extraction import Pipeline
from tidegraph.infra.commands import serve as serve_command
from tidegraph.infra.commands._demo_times import time_lines
from tidegraph.infra.composition import ModelRegistry
from tidegraph.infra.package_files import sample_corpus
from tidegraph.infra.runtime import (
    default_realm_config,
    documents_prepared_at_once,
    llm_client_if_configured,
    on_termination,
)
from tidegraph.query_service import load_query_settings
from tidegraph.schemas import (
    Settings,
    TidegraphError,
    load_settings,
    preset,
    realm_schema,
    validate_realm,
)
from tidegraph.store import create_realm, ensure_control

QUESTION = "Who worked with Charles Babbage, and what did he design?"
LATER = ("rivalry-2.md",)
"""The sample corpus's later dispute: published after the rest."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="stream a sample corpus through the pipeline and serve queries over it",
        description=__doc__,
    )
    p.add_argument("--realm", default="demo")
    p.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="files or a folder (default: the sample corpus shipped with tidegraph)",
    )
    p.add_argument(
        "--later",
        action="append",
        default=None,
        metavar="DOC_KEY",
        help="publish this document only once the others are indexed, so it arrives later in"
        f" belief time (repeatable; default: {', '.join(LATER)} of the sample corpus)",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--once", action="store_true", help="exit after answering the question")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for indexing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    validate_realm(args.realm)
    corpus: Path = args.corpus or sample_corpus()
    expected = corpus_documents(corpus, args.realm)
    settings = load_settings()
    return asyncio.run(_demo(args, corpus, expected, settings))


class DemoError(TidegraphError):
    """The demo would show nothing, or not what it says it shows."""


def corpus_documents(corpus: Path, realm: str) -> dict[str, str | None]:
    """``doc_key`` → ``content_hash`` of every document in ``corpus``; checked before any
    service is touched, since a demo over a partial or empty corpus would answer from
    nothing and look like it worked."""
    documents: dict[str, str | None] = {}
    refused: list[str] = []
    for item in read_inputs([corpus], realm):
        if isinstance(item, Refusal):
            refused.append(f"{item.source}: {item.reason}")
        else:
            documents[item.doc.doc_key] = item.doc.content_hash
    if refused:
        raise DemoError(f"the corpus at {corpus} cannot be read in full: {'; '.join(refused)}")
    if not documents:
        raise DemoError(f"the corpus at {corpus} holds no document: nothing would be indexed")
    return documents


def _say(message: str) -> None:
    print(f"demo: {message}", file=sys.stderr, flush=True)


async def _demo(
    args: argparse.Namespace, corpus: Path, expected: dict[str, str | None], settings: Settings
) -> int:
    dsn = settings.pg_dsn.get_secret_value()
    for warning in await ensure_topics(settings.kafka_bootstrap, settings):
        _say(f"warning: {warning}")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await ensure_control(conn)
        defaults = default_realm_config()
        info = await create_realm(
            conn,
            args.realm,
            preset("narrative", extractor=defaults.extractor, embedder=defaults.embedder),
        )
    _say(f"realm {args.realm}: extractor {info.extractor}, embedder {info.embedder}")
    first, *rest = _waves(corpus, args.realm, args.later)
    async with DocumentProducer.from_settings(settings) as producer:
        await _publish(producer, first)
        indexer, stop, indexing, serving = _start(args, settings, dsn)
        try:
            failed = await _wait_indexed(dsn, args.realm, _hashes(first), args.timeout, indexing)
            for wave in rest:  # once the rest is indexed: later in belief time
                await _publish(producer, wave)
                failed.update(
                    await _wait_indexed(dsn, args.realm, _hashes(wave), args.timeout, indexing)
                )
            _report_indexed(expected, failed, corpus)
            base = f"http://{args.host}:{args.port}"
            answer = await _ask(base, args.realm, indexing, serving)
            print(json.dumps(answer, indent=2, default=str))
            if not answer["relations"]:
                raise DemoError(
                    f"the question found no relation in what was indexed from {corpus} "
                    f"(extractor {info.extractor})"
                )
            async with httpx.AsyncClient(base_url=base, timeout=10) as client:
                for line in await time_lines(client, args.realm):
                    _say(line)
            _say(f"query service answering at {base} (POST /v1/realms/{args.realm}/query_data)")
            if not args.once:
                _say("serving until interrupted (Ctrl-C)")
                await stop.wait()
        finally:
            indexer.stop()
            stop.set()
            for task in (indexing, serving):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, 30)
    return 0


def _waves(corpus: Path, realm: str, later_keys: list[str] | None) -> list[list[Input]]:
    """The corpus in two waves: all but the ``--later`` documents, then those."""
    items = [i for i in read_inputs([corpus], realm) if isinstance(i, Input)]
    later = set(later_keys if later_keys is not None else LATER)
    first = [i for i in items if i.doc.doc_key not in later]
    rest = [i for i in items if i.doc.doc_key in later]
    return [first, rest] if rest else [first]


def _hashes(wave: list[Input]) -> dict[str, str | None]:
    return {i.doc.doc_key: i.doc.content_hash for i in wave}


def _start(
    args: argparse.Namespace, settings: Settings, dsn: str
) -> tuple[Indexer, asyncio.Event, asyncio.Task[None], asyncio.Task[None]]:
    """The indexer and ``serve`` (query API and change publisher) as tasks of this loop."""
    config = IndexerConfig(
        bootstrap=settings.kafka_bootstrap,
        pg_dsn=dsn,
        topic=settings.documents_topic,
        dlq_topic=settings.dlq_topic,
        group_id="tidegraph-demo",
        default_realm=default_realm_config(),
        prepare_concurrency=documents_prepared_at_once(None),
    )
    pool = make_pool(config)
    registry = ModelRegistry(pool=pool, llm=llm_client_if_configured())
    pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
    indexer = Indexer(
        config, pipeline.prepare, registry.embedder_for, pool, judge_for=registry.judge_for
    )
    indexing = asyncio.create_task(indexer.run(), name="indexer")
    serve_args = argparse.Namespace(
        host=args.host,
        port=args.port,
        no_publisher=False,
        publish_realm=None,
        pool_size=8,
        log_level="warning",
    )
    stop = asyncio.Event()
    serving = asyncio.create_task(
        serve_command.serve(serve_args, settings, load_query_settings(), stop), name="serve"
    )
    on_termination(stop.set)
    return indexer, stop, indexing, serving


async def _publish(producer: DocumentProducer, wave: list[Input]) -> None:
    """One wave of the corpus onto the topic, all of it or an error."""
    report = await publish_items(producer, wave)
    _say(report.summary())
    if not report.ok or report.published != len(wave):
        raise DemoError(f"published {report.published} of the {len(wave)} documents")


async def _wait_indexed(
    dsn: str,
    realm: str,
    expected: dict[str, str | None],
    limit: float,
    indexing: asyncio.Task[None],
) -> dict[str, str]:
    """Waits until every document of ``expected`` is applied; returns the reason of each
    one the indexer stored as ``failed``."""
    deadline = time.monotonic() + limit
    query = sql.SQL(
        "SELECT doc_key, content_hash, status, error FROM {} WHERE doc_key = ANY(%s)"
    ).format(sql.Identifier(realm_schema(realm), "documents"))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while True:
            if indexing.done():
                indexing.result()
                raise TidegraphError("the indexer stopped before the corpus was indexed")
            cur = await conn.execute(query, (list(expected),))
            rows = [row for row in await cur.fetchall() if row[2] != "deleted"]
            done = {key: digest for key, digest, _, _ in rows}
            if all(done.get(k) == h for k, h in expected.items()):
                return {key: str(error) for key, _, status, error in rows if status == "failed"}
            if time.monotonic() > deadline:
                missing = sorted(k for k, h in expected.items() if done.get(k) != h)
                raise TidegraphError(f"not indexed within {limit:g}s: {', '.join(missing)}")
            await asyncio.sleep(0.2)


def _report_indexed(expected: dict[str, str | None], failed: dict[str, str], corpus: Path) -> None:
    """Says how many documents were indexed; none at all is an error, not a demo."""
    _say(f"{len(expected) - len(failed)} documents indexed, {len(failed)} failed")
    for key, reason in sorted(failed.items()):
        _say(f"  failed {key}: {reason}")
    if len(failed) == len(expected):
        raise DemoError(f"indexed nothing: every document of {corpus} failed")


async def _ask(base: str, realm: str, *tasks: asyncio.Task[None]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        for _ in range(100):
            for task in tasks:
                if task.done():
                    task.result()
                    raise TidegraphError(f"{task.get_name()} stopped unexpectedly")
            try:
                resp = await client.post(
                    f"/v1/realms/{realm}/query_data",
                    json={"query": QUESTION, "mode": "mix", "top_k": 10},
                )
            except httpx.TransportError:
                await asyncio.sleep(0.2)
                continue
            resp.raise_for_status()
            body: dict[str, Any] = resp.json()
            return {
                "question": QUESTION,
                "relations": [
                    f"{r['subject']} {'NOT ' if r['negated'] else ''}{r['predicate']} {r['object']}"
                    for r in body.get("relations", [])[:10]
                ],
                "chunks": [c.get("citation") for c in body.get("chunks", [])[:5]],
            }
    raise TidegraphError(f"query service at {base} did not answer")
