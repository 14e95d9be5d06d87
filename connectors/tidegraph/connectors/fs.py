"""The file connector: a folder of text and Markdown files kept in step with a realm.

A snapshot publishes every matching file (``doc_key`` = path relative to the folder,
``source_version`` = mtime in nanoseconds, title from the first Markdown heading or the file
name) and a delete for every file the state file remembers that is gone. Watching then
publishes changes and deletions as they happen. The state file records what Kafka
acknowledged, so a restart does not resend unchanged files (resending would be harmless:
the indexer skips an unchanged hash). Files that are not UTF-8 text are reported and
skipped.

Watching cannot miss a change made between the snapshot and the moment the watcher starts:
the first thing the watch loop does once the watcher exists is a full reconciliation, and
it repeats one every ``rescan_interval`` seconds as a safety net.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from watchfiles import awatch

from tidegraph.connectors.errors import DeliveryError, DocumentTooLargeError, UndecodableSourceError
from tidegraph.connectors.producer import Delivery, DocumentProducer
from tidegraph.connectors.textfiles import (
    TEXT_GLOBS,
    OrderFrom,
    decode_text,
    file_version,
    matches,
    walk,
)
from tidegraph.schemas import DEFAULT_SPACE, DocumentVersion, content_hash

log = logging.getLogger(__name__)

SOURCE = "fs"
STATE_VERSION = 1


@dataclass(frozen=True)
class SentFile:
    """What was last acknowledged for one file."""

    mtime_ns: int
    size: int
    content_hash: str


@dataclass(frozen=True)
class Skipped:
    """A file that was not published, and why."""

    doc_key: str
    reason: str


@dataclass
class SyncReport:
    """One reconciliation: what went to Kafka and what did not."""

    upserts: list[Delivery] = field(default_factory=list)
    deletes: list[Delivery] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def published(self) -> int:
        return len(self.upserts) + len(self.deletes)


def _where(delivery: Delivery) -> str:
    return f"partition {delivery.partition}, offset {delivery.offset}"


def default_state_path(state_dir: str | Path, realm: str, root: Path) -> Path:
    """``<state_dir>/fs/<realm>-<hash of the folder>.json``: one state per realm and folder."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:12]
    return Path(state_dir) / "fs" / f"{realm}-{digest}.json"


class FsState:
    """The state file: which version of which file Kafka acknowledged."""

    def __init__(self, path: Path, identity: dict[str, str]) -> None:
        self.path = path
        self.identity = identity
        self.files: dict[str, SentFile] = {}

    @classmethod
    def load(cls, path: Path, identity: dict[str, str]) -> FsState:
        """Read ``path``; missing, or written for another realm/folder/topic, means empty."""
        state = cls(path, identity)
        try:
            raw: Any = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return state
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("ignoring unreadable state file %s: %s", path, exc)
            return state
        if raw.get("version") != STATE_VERSION or raw.get("identity") != identity:
            log.warning("state file %s belongs to another source; starting afresh", path)
            return state
        state.files = {key: SentFile(**entry) for key, entry in raw.get("files", {}).items()}
        return state

    def save(self) -> None:
        """Write atomically (temporary file, then rename), so a crash leaves old or new."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "version": STATE_VERSION,
            "identity": self.identity,
            "files": {
                k: {"mtime_ns": v.mtime_ns, "size": v.size, "content_hash": v.content_hash}
                for k, v in sorted(self.files.items())
            },
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(orjson.dumps(body))
        os.replace(tmp, self.path)


class FsConnector:
    """Publishes a folder's matching files as document versions of one realm and space."""

    def __init__(
        self,
        producer: DocumentProducer,
        realm: str,
        root: Path,
        *,
        state_path: Path,
        globs: Iterable[str] = TEXT_GLOBS,
        space: str = DEFAULT_SPACE,
        order_from: OrderFrom = "front-matter",
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.producer = producer
        self.realm = realm
        self.root = root
        self.globs = tuple(globs)
        self.order_from = order_from
        self.space = space
        self.on_event = on_event
        identity = {
            "realm": realm,
            "space": space,
            "root": str(root.resolve()),
            "topic": producer.topic,
        }
        self.state = FsState.load(state_path, identity)

    def _say(self, message: str) -> None:
        log.info("%s", message)
        if self.on_event is not None:
            self.on_event(message)

    async def snapshot(self) -> SyncReport:
        """Publish every new or changed file and a delete for every vanished one."""
        present = {relative for relative, _ in walk(self.root, self.globs)}
        return await self.sync(present | set(self.state.files))

    async def sync(self, doc_keys: Iterable[str]) -> SyncReport:
        """Bring the given relative paths in step: upsert what changed, delete what is gone.

        Returns once Kafka acknowledged every record sent and the state file is saved.
        Raises :class:`DeliveryError` (after saving what was acknowledged) when Kafka did not.
        """
        report = SyncReport()
        pending: list[tuple[str, SentFile | None, asyncio.Future[Delivery]]] = []
        for doc_key in sorted(set(doc_keys)):
            prepared = self._prepare(doc_key, report)
            if prepared is None:
                continue
            doc, sent = prepared
            try:
                future = await self.producer.submit(doc)
            except DocumentTooLargeError as exc:
                report.skipped.append(Skipped(doc_key, str(exc)))
                self._say(f"skipped {doc_key}: {exc}")
                continue
            pending.append((doc_key, sent, future))
        failure: DeliveryError | None = None
        for doc_key, sent, future in pending:
            try:
                delivery = await future
            except DeliveryError as exc:
                failure = failure or exc
                continue
            if sent is None:
                self.state.files.pop(doc_key, None)
                report.deletes.append(delivery)
                self._say(
                    f"deleted {doc_key} (partition {delivery.partition}, offset {delivery.offset})"
                )
            else:
                self.state.files[doc_key] = sent
                report.upserts.append(delivery)
                self._say(f"published {doc_key} ({_where(delivery)})")
        self.state.save()
        if failure is not None:
            raise failure
        return report

    def _prepare(
        self, doc_key: str, report: SyncReport
    ) -> tuple[DocumentVersion, SentFile | None] | None:
        """The record to send for ``doc_key`` (``SentFile`` is ``None`` for a delete), if any."""
        path = self.root / doc_key
        known = self.state.files.get(doc_key)
        try:
            stat = path.stat() if matches(doc_key, self.globs) and path.is_file() else None
        except OSError:
            stat = None
        if stat is None:
            if known is None:
                return None
            version = max(time.time_ns(), known.mtime_ns + 1)
            doc = DocumentVersion.for_delete(
                self.realm, doc_key, space=self.space, source=SOURCE, source_version=str(version)
            )
            return doc, None
        if known is not None and (known.mtime_ns, known.size) == (stat.st_mtime_ns, stat.st_size):
            report.unchanged += 1
            return None
        try:
            text = decode_text(path.read_bytes(), doc_key)
        except UndecodableSourceError as exc:
            report.skipped.append(Skipped(doc_key, exc.reason))
            self._say(f"skipped {doc_key}: not UTF-8 text ({exc.reason})")
            return None
        except OSError as exc:  # vanished or unreadable between stat and read
            report.skipped.append(Skipped(doc_key, f"cannot read: {exc}"))
            return None
        sent = SentFile(stat.st_mtime_ns, stat.st_size, content_hash(text))
        if known is not None and known.content_hash == sent.content_hash:
            self.state.files[doc_key] = sent  # touched, not changed
            report.unchanged += 1
            return None
        doc = file_version(
            path,
            doc_key,
            text,
            self.realm,
            mtime_ns=stat.st_mtime_ns,
            space=self.space,
            source=SOURCE,
            order_from=self.order_from,
        )
        return doc, sent

    def _affected(self, paths: Iterable[str]) -> set[str]:
        """Relative keys touched by watcher paths, including files under a removed folder."""
        root = self.root.resolve()
        out: set[str] = set()
        for raw in paths:
            try:
                relative = Path(raw).resolve().relative_to(root).as_posix()
            except ValueError:
                continue
            out.add(relative)
            prefix = relative + "/"
            out.update(k for k in self.state.files if k.startswith(prefix))
        return out

    async def watch(
        self,
        stop: asyncio.Event | None = None,
        *,
        rescan_interval: float = 60.0,
        debounce_ms: int = 200,
        force_polling: bool | None = None,
        on_sync: Callable[[SyncReport], None] | None = None,
    ) -> None:
        """Publish changes as they happen until ``stop`` is set (or the task is cancelled)."""
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        last_full: float | None = None
        async for changes in awatch(
            self.root,
            watch_filter=None,
            debounce=debounce_ms,
            step=50,
            stop_event=stop,
            rust_timeout=int(min(rescan_interval, 1.0) * 1000),
            yield_on_timeout=True,
            force_polling=force_polling,
        ):
            now = loop.time()
            if last_full is None or now - last_full >= rescan_interval:
                report = await self.snapshot()
                last_full = now
            elif changes:
                report = await self.sync(self._affected(path for _, path in changes))
            else:
                continue
            if on_sync is not None:
                on_sync(report)
