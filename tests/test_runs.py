"""How a poll's records are cut into units of work (``write.runs.runs``), with no service.

A stretch of one realm's records long enough to catch up is written in runs of
``catch_up_run`` records, not as one transaction for the whole stretch: a run is written
once all its records are prepared, so with a model in the path one run for a whole poll
left every call slot idle while it was written.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.decide.fold import Action
from tidegraph.indexer.decide.planner import Decision, Logged
from tidegraph.indexer.write.runs import Item, runs
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash


def _item(offset: int, realm: str, action: Action = Action.APPLY) -> Item:
    text = f"Note {offset}."
    record = DocumentVersion(
        realm=realm,
        doc_key=f"d{offset}",
        op="upsert",
        content=text,
        content_hash=content_hash(text),
        event_time=datetime(2026, 1, 1, tzinfo=UTC),
    )
    logged = Logged(offset, datetime(2026, 1, 1, tzinfo=UTC), record)
    return Item(offset, realm, Decision(logged, action, None, None))


def test_a_long_stretch_is_written_in_runs_of_the_catch_up_size() -> None:
    items = [_item(i, "a") for i in range(40)]
    cut = runs(items, 16)
    assert [len(r.items) for r in cut] == [16, 16, 8]
    assert all(r.catch_up for r in cut)
    assert [it.offset for r in cut for it in r.items] == list(range(40))


def test_a_short_stretch_is_written_record_by_record() -> None:
    cut = runs([_item(i, "a") for i in range(5)] + [_item(5, "b")], 16)
    assert [(len(r.items), r.catch_up) for r in cut] == [(1, False)] * 6


@given(
    realms=st.lists(st.sampled_from("ab"), min_size=1, max_size=60),
    size=st.integers(min_value=1, max_value=20),
)
def test_runs_keep_log_order_and_never_exceed_the_catch_up_size(
    realms: list[str], size: int
) -> None:
    items = [_item(i, r) for i, r in enumerate(realms)]
    cut = runs(items, size)
    assert [it.offset for r in cut for it in r.items] == list(range(len(items)))
    for run in cut:
        assert len({it.key for it in run.items}) == 1
        assert len(run.items) <= (size if run.catch_up else 1)
    # The model: a realm's stretch of at least ``size`` records is caught up, in order.
    stretches: list[list[str]] = []
    for r in realms:
        if stretches and stretches[-1][0] == r:
            stretches[-1].append(r)
        else:
            stretches.append([r])
    caught_up = sum(len(s) for s in stretches if len(s) >= size)
    assert sum(len(r.items) for r in cut if r.catch_up) == caught_up
