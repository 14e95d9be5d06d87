"""Bulk loading: files, folders and JSONL onto the documents topic as fast as Kafka takes them.

Inputs become a stream of document versions or refusals (a line that is not a valid
document, a file that is not text, a document over the size limit); refusals are counted
and reported with their reason, never fatal. Reading runs ahead while one sender task hands
documents to the producer as whole record batches, and a document counts as published only
once Kafka acknowledged it. A delivery failure stops the load: what Kafka did not
acknowledge is reported as not published.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePath
from typing import Any, NamedTuple

import orjson

from tidegraph.connectors.errors import DeliveryError, UndecodableSourceError
from tidegraph.connectors.producer import Delivery, DocumentProducer
from tidegraph.connectors.progress import Progress
from tidegraph.connectors.textfiles import (
    TEXT_GLOBS,
    OrderFrom,
    decode_text,
    file_version,
    passed_over,
    walk,
)
from tidegraph.schemas import (
    DEFAULT_SPACE,
    DOCUMENT_SCHEMA,
    DocumentVersion,
    RecordValidationError,
    content_hash,
    with_facts_passage,
)

JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson"})
BULK_GLOBS = (*TEXT_GLOBS, "**/*.jsonl", "**/*.ndjson")
DEFAULT_WINDOW = 20_000
DEFAULT_CHUNK = 1_000


@dataclass(frozen=True)
class Refusal:
    """An input that was not published, and why."""

    source: str
    """File, or ``file:line`` for a JSONL line."""
    doc_key: str | None
    """The document's key when it was known."""
    reason: str


@dataclass
class BulkReport:
    """What a bulk load did."""

    published: int = 0
    """Documents Kafka acknowledged."""
    bytes: int = 0
    """Encoded bytes of the acknowledged documents."""
    refused: list[Refusal] = field(default_factory=list)
    elapsed: float = 0.0
    failure: str | None = None
    """Why the load stopped early (Kafka did not acknowledge), if it did."""
    passed_over: dict[str, int] = field(default_factory=dict)
    """Files in the folders given that were not read, by why: their suffix (not text,
    Markdown or JSONL), ``hidden`` or ``symlink``. Not a failure: said in the summary."""

    @property
    def ok(self) -> bool:
        return not self.refused and self.failure is None

    def summary(self) -> str:
        rate = self.published / self.elapsed if self.elapsed > 0 else 0.0
        mbps = self.bytes / self.elapsed / 1e6 if self.elapsed > 0 else 0.0
        lines = [
            f"published {self.published}, refused {len(self.refused)} "
            f"in {self.elapsed:.2f}s ({rate:,.0f} docs/s, {mbps:.1f} MB/s)"
        ]
        lines += [
            f"  refused {r.source}" + (f" [{r.doc_key}]" if r.doc_key else "") + f": {r.reason}"
            for r in self.refused
        ]
        if self.passed_over:
            counts = sorted(self.passed_over.items(), key=lambda kv: (-kv[1], kv[0]))
            lines.append(
                f"  skipped {sum(self.passed_over.values())} file(s) in the folders given: "
                + ", ".join(f"{n} {why}" for why, n in counts)
                + f" — publish reads {', '.join(g.removeprefix('**/') for g in BULK_GLOBS)}"
                " files and passes over hidden ones and symlinks"
            )
        if self.failure:
            lines.append(f"  stopped: {self.failure}")
        return "\n".join(lines)


class Input(NamedTuple):
    """A document read from an input, with where it came from."""

    where: str
    doc: DocumentVersion


Item = Input | Refusal


def document_from_object(
    obj: Any, realm: str, *, space: str = DEFAULT_SPACE, source: str = "bulk"
) -> DocumentVersion:
    """A ``DocumentVersion``-shaped object completed with the load's defaults.

    Missing ``schema``, ``realm``, ``space``, ``op`` (upsert), ``source``, ``event_time`` (now)
    and ``content_hash`` are filled in, and ``content`` from ``facts`` when only they are
    given; a ``realm`` other than the load's, or a given ``content_hash`` that does not match
    the content, is refused.
    """
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    obj = dict(obj)
    if obj.setdefault("realm", realm) != realm:
        raise ValueError(f"realm {obj['realm']!r} differs from the load's realm {realm!r}")
    obj.setdefault("schema", DOCUMENT_SCHEMA)
    obj.setdefault("space", space)
    obj.setdefault("op", "upsert")
    obj.setdefault("source", source)
    obj.setdefault("event_time", datetime.now(UTC))
    if obj["op"] == "upsert":
        obj = with_facts_passage(obj)
    content = obj.get("content")
    if obj["op"] == "upsert" and isinstance(content, str):
        computed = content_hash(content)
        given = obj.setdefault("content_hash", computed)
        if given != computed:
            raise ValueError(f"content_hash {given!r} does not match the content ({computed})")
    return DocumentVersion.from_dict(obj)


def text_document(
    path: Path,
    doc_key: str,
    realm: str,
    *,
    space: str = DEFAULT_SPACE,
    source: str,
    order_from: OrderFrom = "front-matter",
) -> DocumentVersion:
    """A text or Markdown file as an upsert (see ``textfiles.file_version``)."""
    data = path.read_bytes()
    return file_version(
        path,
        doc_key,
        decode_text(data, str(path)),
        realm,
        mtime_ns=path.stat().st_mtime_ns,
        space=space,
        source=source,
        order_from=order_from,
    )


def _jsonl_items(path: Path, realm: str, space: str) -> Iterator[Item]:
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                yield Refusal(where, None, f"malformed JSON ({exc})")
                continue
            key = obj.get("doc_key") if isinstance(obj, dict) else None
            if not isinstance(obj, dict):
                yield Refusal(where, None, "not a JSON object")
                continue
            try:
                yield Input(where, document_from_object(obj, realm, space=space))
            except (RecordValidationError, ValueError) as exc:
                yield Refusal(where, key if isinstance(key, str) else None, str(exc))


def _file_items(
    path: Path, doc_key: str, realm: str, space: str, order_from: OrderFrom
) -> Iterator[Item]:
    if path.suffix.lower() in JSONL_SUFFIXES:
        yield from _jsonl_items(path, realm, space)
        return
    try:
        doc = text_document(path, doc_key, realm, space=space, source="bulk", order_from=order_from)
        yield Input(str(path), doc)
    except (UndecodableSourceError, RecordValidationError) as exc:
        yield Refusal(str(path), doc_key, str(exc))
    except OSError as exc:
        yield Refusal(str(path), doc_key, f"cannot read: {exc.strerror or exc}")


def _given_key(path: Path) -> str:
    pure = PurePath(path)
    return pure.name if pure.is_absolute() or ".." in pure.parts else pure.as_posix()


def read_inputs(
    paths: Sequence[Path],
    realm: str,
    *,
    space: str = DEFAULT_SPACE,
    order_from: OrderFrom = "front-matter",
) -> Iterator[Item]:
    """Documents and refusals from files, folders (recursively) and JSONL files.

    A text file's ``doc_key`` is its path relative to the folder given, or the path as given
    for a file argument (its name when absolute); its order as ``order_from`` says.
    """
    for given in paths:
        if given.is_dir():
            for relative, path in walk(given, BULK_GLOBS):
                yield from _file_items(path, relative, realm, space, order_from)
        elif given.is_file():
            yield from _file_items(given, _given_key(given), realm, space, order_from)
        else:
            yield Refusal(str(given), None, "no such file or folder")


def count_inputs(paths: Sequence[Path]) -> int:
    """How many documents :func:`read_inputs` will yield at most (for the progress bar)."""
    total = 0
    for given in paths:
        files = [p for _, p in walk(given, BULK_GLOBS)] if given.is_dir() else [given]
        for path in files:
            if path.suffix.lower() in JSONL_SUFFIXES and path.is_file():
                with path.open("rb") as f:
                    total += sum(1 for line in f if line.strip())
            else:
                total += 1
    return total


async def publish_items(
    producer: DocumentProducer,
    items: Iterable[Item],
    *,
    progress: Progress | None = None,
    window: int = DEFAULT_WINDOW,
    chunk: int = DEFAULT_CHUNK,
) -> BulkReport:
    """Publish every document, reading ahead while Kafka acknowledges; report the outcome.

    Documents are handed to the producer ``chunk`` at a time as whole record batches by
    one sender task (so order is kept), while reading continues; at most ``window`` are
    read ahead of what was handed over.
    """
    loop = asyncio.get_running_loop()
    report = BulkReport()
    started = loop.time()
    outbox: list[Input] = []
    acks: list[asyncio.Future[list[Delivery]]] = []
    sender: asyncio.Task[None] | None = None

    def refuse(refusal: Refusal) -> None:
        report.refused.append(refusal)
        if progress is not None:
            progress.refuse()

    def acked(future: asyncio.Future[list[Delivery]]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        deliveries = future.result()
        size = sum(d.size for d in deliveries)
        report.published += len(deliveries)
        report.bytes += size
        if progress is not None:
            progress.advance(len(deliveries), size)

    async def send() -> None:
        while outbox:
            taken = outbox[:chunk]
            del outbox[:chunk]
            submitted = await producer.submit_many([i.doc for i in taken])
            where = {id(i.doc): i.where for i in taken}
            for doc, exc in submitted.refused:
                refuse(Refusal(where[id(doc)], doc.doc_key, str(exc)))
            submitted.acked.add_done_callback(acked)
            acks.append(submitted.acked)

    try:
        for item in items:
            if isinstance(item, Refusal):
                refuse(item)
                continue
            outbox.append(item)
            if len(outbox) >= chunk:
                if sender is not None and sender.done():
                    sender.result()
                    sender = None
                if sender is None:
                    sender = asyncio.create_task(send())
                await asyncio.sleep(0)  # let the sender and the producer run
                if len(outbox) >= window:
                    await asyncio.wait([sender])
        if sender is not None:
            await sender
        await send()
    except DeliveryError as exc:
        report.failure = str(exc)
    finally:
        if sender is not None and not sender.done():
            sender.cancel()
    for future in acks:
        try:
            await future
        except DeliveryError as exc:
            report.failure = report.failure or str(exc)
    report.elapsed = loop.time() - started
    if progress is not None:
        progress.finish()
    return report


async def publish_paths(
    producer: DocumentProducer,
    paths: Sequence[Path],
    realm: str,
    *,
    space: str = DEFAULT_SPACE,
    show_progress: bool = True,
    window: int = DEFAULT_WINDOW,
    order_from: OrderFrom = "front-matter",
) -> BulkReport:
    """Publish files, folders and JSONL files of ``realm``; see :func:`read_inputs`."""
    progress = Progress("publish", count_inputs(paths), enabled=show_progress)
    items = read_inputs(paths, realm, space=space, order_from=order_from)
    report = await publish_items(producer, items, progress=progress, window=window)
    passed: Counter[str] = Counter()
    for given in paths:
        if given.is_dir():
            passed.update(passed_over(given, BULK_GLOBS))
    report.passed_over = dict(passed)
    return report
