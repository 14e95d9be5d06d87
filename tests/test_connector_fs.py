"""File connector: snapshot, restart without resending, offline deletes, watch, the command."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tidegraph.connectors.fs import FsConnector, SyncReport
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.connectors.textfiles import first_heading, matches
from tidegraph.schemas.documents import DocumentVersion

from connector_helpers import (  # type: ignore[import-not-found]
    fresh_settings,
    read_topic,
    validated,
)

pytestmark = pytest.mark.kafka


def test_first_heading_rules() -> None:
    assert first_heading("intro\n\n## Second level ##\n# First") == "Second level"
    assert first_heading("Title\n=====\n\ntext") == "Title"
    assert first_heading("```\n# not a heading\n```\n# Real") == "Real"
    assert first_heading("#hashtag only\nplain") is None


def test_glob_matching() -> None:
    globs = ("**/*.md", "*.txt")
    assert matches("a.md", globs) and matches("x/y/a.md", globs) and matches("a.txt", globs)
    assert not matches("x/a.txt", globs) and not matches("a.mdx", globs)
    assert not matches(".git/a.md", globs) and not matches("x/.draft.md", globs)


def _tree(root: Path) -> None:
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "intro.md").write_text("Some words\n\n# Getting started\n\nBody.\n")
    (root / "notes.txt").write_text("plain notes\n")
    (root / "latin1.txt").write_bytes("café".encode("latin-1"))
    (root / "skip.rst").write_text("not matched\n")


async def _docs(bootstrap: str, topic: str, expected: int) -> list[DocumentVersion]:
    return [validated(r) for r in await read_topic(bootstrap, topic, expected=expected)]


async def test_snapshot_restart_and_offline_changes(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    root = tmp_path / "src"
    _tree(root)
    state = tmp_path / "state" / "fs.json"
    settings = await fresh_settings(kafka_bootstrap, unique_name("tf"))
    events: list[str] = []
    async with DocumentProducer.from_settings(settings) as producer:
        first = await FsConnector(
            producer, "acme", root, state_path=state, on_event=events.append
        ).snapshot()
        assert len(first.upserts) == 2 and not first.deletes
        assert [s.doc_key for s in first.skipped] == ["latin1.txt"]
        assert any("skipped latin1.txt: not UTF-8" in e for e in events)
        docs = await _docs(kafka_bootstrap, settings.documents_topic, 2)
        by_key = {d.doc_key: d for d in docs}
        assert set(by_key) == {"guide/intro.md", "notes.txt"}
        intro = by_key["guide/intro.md"]
        assert intro.title == "Getting started" and intro.source == "fs"
        mtime = (root / "guide" / "intro.md").stat().st_mtime_ns
        assert intro.source_version == str(mtime)
        assert by_key["notes.txt"].title == "notes"

        # A restart with the same state resends nothing.
        again = await FsConnector(producer, "acme", root, state_path=state).snapshot()
        assert again.published == 0 and again.unchanged == 2

        # Touched but unchanged: still nothing. Changed and deleted while stopped: sent.
        os.utime(root / "notes.txt", ns=(mtime + 10**9, mtime + 10**9))
        (root / "guide" / "intro.md").write_text("# Getting started\n\nNew body.\n")
        (root / "notes.txt").unlink()
        third = await FsConnector(producer, "acme", root, state_path=state).snapshot()
        assert [d.doc_key for d in third.upserts] == ["guide/intro.md"]
        assert [d.doc_key for d in third.deletes] == ["notes.txt"]

    docs = await _docs(kafka_bootstrap, settings.documents_topic, 4)
    assert len(docs) == 4
    deleted = [d for d in docs if d.op == "delete"]
    assert [d.doc_key for d in deleted] == ["notes.txt"]
    assert int(deleted[0].source_version or 0) > mtime


async def test_watch_publishes_changes_and_deletions(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    root = tmp_path / "src"
    _tree(root)
    settings = await fresh_settings(kafka_bootstrap, unique_name("tw"))
    syncs: list[SyncReport] = []
    synced = asyncio.Event()

    def on_sync(report: SyncReport) -> None:
        syncs.append(report)
        synced.set()

    async def next_sync() -> SyncReport:
        synced.clear()
        await asyncio.wait_for(synced.wait(), 20)
        return syncs[-1]

    stop = asyncio.Event()
    async with DocumentProducer.from_settings(settings) as producer:
        connector = FsConnector(producer, "acme", root, state_path=tmp_path / "state.json")
        await connector.snapshot()
        task = asyncio.create_task(connector.watch(stop, on_sync=on_sync, debounce_ms=100))
        catch_up = await next_sync()  # the reconciliation once the watcher exists
        assert catch_up.published == 0

        (root / "guide" / "new.md").write_text("# Fresh\n")
        report = await next_sync()
        while not report.upserts:
            report = await next_sync()
        assert [d.doc_key for d in report.upserts] == ["guide/new.md"]

        (root / "guide" / "new.md").write_text("# Fresh\n\nedited\n")
        report = await next_sync()
        while not report.upserts:
            report = await next_sync()
        assert [d.doc_key for d in report.upserts] == ["guide/new.md"]

        (root / "guide" / "new.md").unlink()
        report = await next_sync()
        while not report.deletes:
            report = await next_sync()
        assert [d.doc_key for d in report.deletes] == ["guide/new.md"]

        stop.set()
        await asyncio.wait_for(task, 10)

    docs = await _docs(kafka_bootstrap, settings.documents_topic, 5)
    new = [d for d in docs if d.doc_key == "guide/new.md"]
    assert [d.op for d in new] == ["upsert", "upsert", "delete"]
    assert new[0].content == "# Fresh\n" and new[1].content == "# Fresh\n\nedited\n"


async def test_connect_fs_command(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    root = tmp_path / "src"
    _tree(root)
    prefix = unique_name("tfc")
    args = [sys.executable, "-m", "tidegraph.infra.cli", "connect", "fs", str(root),
            "--realm", "acme", "--topic-prefix", prefix, "--glob", "**/*.md",
            "--state", str(tmp_path / "st.json")]  # fmt: skip
    env = {**os.environ, "TIDEGRAPH_KAFKA_BOOTSTRAP": kafka_bootstrap}
    for expected in ("1 published", "0 published"):
        proc = await asyncio.create_subprocess_exec(
            *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        _, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        assert f"snapshot: {expected}" in err.decode()
    docs = await _docs(kafka_bootstrap, f"{prefix}.documents", 1)
    assert [d.doc_key for d in docs] == ["guide/intro.md"]
