"""Bulk publish: files, folders and JSONL onto a real topic; refusals reported with reasons."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tidegraph.connectors.bulk import (
    Input,
    Refusal,
    document_from_object,
    publish_paths,
    read_inputs,
)
from tidegraph.connectors.producer import DocumentProducer
from tidegraph.schemas.errors import RecordValidationError
from tidegraph.schemas.hashing import content_hash

from connector_helpers import (  # type: ignore[import-not-found]
    fresh_settings,
    read_topic,
    validated,
)

pytestmark = pytest.mark.kafka


def _tree(root: Path) -> None:
    (root / "docs" / "guide").mkdir(parents=True)
    (root / "docs" / "guide" / "intro.md").write_text("# Introduction\n\nHello.\n")
    (root / "docs" / "notes.txt").write_text("plain notes\n")
    (root / "docs" / "binary.md").write_bytes(b"\xff\xfe\x00garbage")
    (root / "docs" / ".hidden.md").write_text("# Hidden\n")
    (root / "docs" / "image.png").write_bytes(b"\x89PNG")
    lines = [
        {"doc_key": "j/1", "content": "one", "title": "One", "metadata": {"n": 1}},
        {"doc_key": "j/2", "content": "two", "content_hash": content_hash("two")},
        {"doc_key": "j/3", "op": "delete"},
        {"doc_key": "j/4", "content": "four", "order_key": "2024-06-30", "space": "s1"},
        {"doc_key": "bad/hash", "content": "x", "content_hash": "sha256:" + "0" * 64},
        {"doc_key": "bad/nocontent", "op": "upsert"},
        {"doc_key": "bad/realm", "content": "x", "realm": "other"},
        {"doc_key": "big", "content": "x" * 5000},
    ]
    body = b"\n".join(orjson.dumps(line) for line in lines)
    (root / "docs" / "load.jsonl").write_bytes(body + b"\n{not json\n\n[1, 2]\n")


def test_read_inputs_classifies(tmp_path: Path) -> None:
    _tree(tmp_path)
    items = list(read_inputs([tmp_path / "docs", tmp_path / "missing"], "acme"))
    docs = {i.doc.doc_key: i.doc for i in items if isinstance(i, Input)}
    refusals = [i for i in items if isinstance(i, Refusal)]
    assert set(docs) == {"guide/intro.md", "notes.txt", "j/1", "j/2", "j/3", "j/4", "big"}
    assert docs["guide/intro.md"].title == "Introduction"
    assert docs["notes.txt"].title == "notes"
    assert docs["j/1"].content_hash == content_hash("one") and docs["j/1"].source == "bulk"
    assert docs["j/3"].op == "delete" and docs["j/4"].space == "s1"
    reasons = "\n".join(f"{r.source} {r.doc_key} {r.reason}" for r in refusals)
    assert "binary.md" in reasons and "NUL" in reasons
    assert "bad/hash" in reasons and "does not match the content" in reasons
    assert "bad/nocontent" in reasons and "required when op is 'upsert'" in reasons
    assert "bad/realm" in reasons and "differs from the load's realm" in reasons
    assert "malformed JSON" in reasons and "not a JSON object" in reasons
    assert "missing" in reasons and "no such file" in reasons
    assert len(refusals) == 7


def test_jsonl_objects_may_carry_facts() -> None:
    facts = {"relations": [{"subject": "Ada Quill", "predicate": "works_at", "object": "Wren"}]}
    alone = document_from_object({"doc_key": "e/1", "facts": facts}, "acme")
    assert alone.content == "Ada Quill works at Wren." and alone.hash_matches()
    assert alone.facts is not None and alone.facts.relations[0].object == "Wren"
    prose = document_from_object({"doc_key": "e/2", "content": "Text.", "facts": facts}, "acme")
    assert prose.content == "Text." and prose.facts == alone.facts
    with pytest.raises(RecordValidationError, match="facts.relations.0.subject"):
        document_from_object({"doc_key": "e/3", "facts": {"relations": [{}]}}, "acme")
    with pytest.raises(RecordValidationError, match="facts: must be absent"):
        document_from_object({"doc_key": "e/4", "op": "delete", "facts": facts}, "acme")


async def test_publish_end_to_end(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    _tree(tmp_path)
    settings = await fresh_settings(kafka_bootstrap, unique_name("tb"))
    producer = DocumentProducer.from_settings(settings, max_document_bytes=4096)
    async with producer:
        report = await publish_paths(producer, [tmp_path / "docs"], "acme", show_progress=False)
    assert report.published == 6 and report.failure is None
    too_big = [r for r in report.refused if r.doc_key == "big"]
    assert len(too_big) == 1 and "bytes encoded, over the 4096-byte limit" in too_big[0].reason
    assert len(report.refused) == 6 + 1  # the six bad inputs plus the oversize document
    assert "published 6, refused 7" in report.summary()
    # Files no glob takes are passed over, and the summary says how many and why.
    assert report.passed_over == {".png": 1, "hidden": 1}
    assert "skipped 2 file(s) in the folders given: 1 .png, 1 hidden — publish reads *.md," in (
        report.summary()
    )

    records = await read_topic(kafka_bootstrap, settings.documents_topic, expected=6)
    docs = [validated(r) for r in records]
    assert sorted(d.doc_key for d in docs) == sorted(
        ["guide/intro.md", "notes.txt", "j/1", "j/2", "j/3", "j/4"]
    )
    assert len({r.partition for r in records}) == 1


async def test_cli_publish_jsonl_progress_and_summary(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    prefix = unique_name("tbc")
    path = tmp_path / "many.jsonl"
    path.write_bytes(
        b"".join(
            orjson.dumps({"doc_key": f"k{i}", "content": f"document {i}"}) + b"\n"
            for i in range(500)
        )
        + b'{"doc_key": "bad"}\n'
    )
    env = {**os.environ, "TIDEGRAPH_KAFKA_BOOTSTRAP": kafka_bootstrap}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tidegraph.infra.cli", "publish", "--realm", "acme",
        "--topic-prefix", prefix, str(path),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    stdout, stderr = out.decode(), err.decode()
    assert proc.returncode == 1, stderr  # one refusal → non-zero exit
    assert "published 500, refused 1" in stdout
    assert "bad" in stdout and "required when op is 'upsert'" in stdout
    assert "docs/s" in stderr and "MB/s" in stderr and "500/501" in stderr
    records = await read_topic(kafka_bootstrap, f"{prefix}.documents", expected=500)
    assert len(records) == 500
    assert [validated(r).doc_key for r in records] == [f"k{i}" for i in range(500)]
