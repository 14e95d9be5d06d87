"""Document order from the files themselves: front matter, mtime or name (`--order-key-from`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.connectors.bulk import Input, read_inputs
from tidegraph.connectors.textfiles import file_version, front_matter
from tidegraph.infra.package_files import sample_corpus
from tidegraph.schemas.realm_config import preset

from indexer_helpers import (
    make_topics,
    publish,
    realm_snapshot,
    running_indexer,
    stored_position,
    wait_for,
)

CORPUS = sample_corpus()


def test_front_matter_block_and_what_follows() -> None:
    text = '---\norder_key: "2024-06-30"\ndate: 1830\n---\n# Title\n\nBody.\n'
    assert front_matter(text) == ({"order_key": "2024-06-30", "date": "1830"}, "# Title\n\nBody.\n")
    assert front_matter("---\r\ndate: 1842\r\n...\r\nBody") == ({"date": "1842"}, "Body")
    assert front_matter("# No block\n---\ndate: 1\n---\n") == (
        {},
        "# No block\n---\ndate: 1\n---\n",
    )
    unclosed = "---\ndate: 1830\n# Title\n"
    assert front_matter(unclosed) == ({}, unclosed)


_KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)
_VALUES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 .:/-]{0,20}[A-Za-z0-9]", fullmatch=True)


@given(st.dictionaries(_KEYS, _VALUES, max_size=5), st.text(max_size=200))
def test_front_matter_round_trips(fields: dict[str, str], body: str) -> None:
    block = "".join(f"{k}: {v}\n" for k, v in fields.items())
    assert front_matter(f"---\n{block}---\n{body}") == (fields, body)


def _file(tmp_path: Path, name: str, text: str, mtime: int) -> Path:
    path = tmp_path / name
    path.write_text(text)
    os.utime(path, ns=(mtime, mtime))
    return path


def test_each_order_source(tmp_path: Path) -> None:
    mtime = 1_700_000_000_000_000_000
    both = _file(tmp_path, "a.md", "---\ndate: 1830\norder_key: 7\n---\n# A\nText.", mtime)
    dated = _file(tmp_path, "b.md", "---\ndate: 1842\n---\n# B\nText.", mtime)
    plain = _file(tmp_path, "2024-01-05.md", "# C\nText.", mtime)

    def version(path: Path, order_from: str) -> tuple[str | None, str, str | None]:
        doc = file_version(
            path,
            path.name,
            path.read_text(),
            "r",
            mtime_ns=mtime,
            space="default",
            source="test",
            order_from=order_from,  # type: ignore[arg-type]
        )
        return doc.order_key, doc.effective_order_key, doc.title

    assert version(both, "front-matter") == ("7", "7", "A")  # order_key wins over date
    assert version(dated, "front-matter") == ("1842", "1842", "B")
    by_mtime = version(plain, "front-matter")
    assert by_mtime[0] is None and by_mtime[1].startswith("2023-11-14")  # no block: mtime
    assert version(dated, "mtime")[:2] == (None, by_mtime[1])
    assert version(plain, "name")[:2] == ("2024-01-05.md", "2024-01-05.md")


@pytest.mark.kafka
@pytest.mark.postgres
async def test_the_sample_corpus_orders_itself_whatever_the_arrival_order(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """The later dispute document supersedes the earlier one when it arrives first, with
    both files sharing one mtime (as after a git clone)."""
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm = unique_name("r")
    later, earlier = CORPUS / "rivalry-2.md", CORPUS / "rivalry-1.md"
    docs = [
        item.doc
        for item in read_inputs([later, earlier], realm)  # the later one first
        if isinstance(item, Input)
    ]
    assert [d.order_key for d in docs] == ["1842", "1830"]
    group = unique_name("g")
    async with running_indexer(
        topics, pg_dsn, group, default_realm=preset("narrative", embedder="hashing:64")
    ):
        await publish(topics, docs)

        async def applied() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 2

        await wait_for(applied, 60, "both documents applied")
    relations = {
        (r[2], r[5]) for r in (await realm_snapshot(pg_dsn, realm))["relations"] if r[1] != r[3]
    }
    assert ("enemy_of", "current") in relations and ("ally_of", "superseded") in relations
