"""The per-record decision: unchanged content is a no-op, older versions are stale.

Folding a sequence of records through :func:`next_state` must agree with deciding each
record against what was really applied, so a batch decided up front gives the same
actions as records decided one at a time.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.decide.fold import Action, DocState, decide, next_state

INDEXED = DocState("indexed", "h1", "5")


def test_same_hash_is_a_noop_and_changed_hash_applies() -> None:
    assert decide("upsert", "h1", None, INDEXED) is Action.NOOP
    assert decide("upsert", "h2", None, INDEXED) is Action.APPLY
    assert decide("upsert", "h1", None, None) is Action.APPLY


def test_versions_compare_as_integers_when_both_are_integers() -> None:
    assert decide("upsert", "h2", "10", DocState("indexed", "h1", "9")) is Action.APPLY
    assert decide("upsert", "h2", "4", INDEXED) is Action.STALE
    assert decide("delete", None, "4", INDEXED) is Action.STALE
    assert decide("upsert", "h2", "b", DocState("indexed", "h1", "a")) is Action.APPLY


def test_delete_of_absent_or_deleted_is_a_noop_and_readding_applies() -> None:
    deleted = DocState("deleted", None, "6")
    assert decide("delete", None, None, None) is Action.NOOP
    assert decide("delete", None, "7", deleted) is Action.NOOP
    assert decide("delete", None, "6", INDEXED) is Action.DELETE
    assert decide("upsert", "h1", "7", deleted) is Action.APPLY


def test_failed_document_is_retried_by_a_new_hash_only() -> None:
    failed = DocState("failed", "h1", None)
    assert decide("upsert", "h1", None, failed) is Action.NOOP
    assert decide("upsert", "h2", None, failed) is Action.APPLY


records = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete"]),
        st.sampled_from(["h1", "h2", "h3"]),
        st.one_of(st.none(), st.integers(0, 5).map(str)),
    ),
    max_size=12,
)


def _applied(
    state: DocState | None, op: str, content_hash: str, version: str | None, action: Action
) -> DocState | None:
    """What the writer would really store after ``action`` (the ground truth)."""
    if action is Action.APPLY:
        return DocState("indexed", content_hash, version)
    if action is Action.DELETE:
        return DocState("deleted", None, version)
    return state


@given(records)
def test_folding_a_batch_matches_deciding_one_record_at_a_time(
    batch: list[tuple[str, str, str | None]],
) -> None:
    assumed: DocState | None = None
    real: DocState | None = None
    for op, content_hash, version in batch:
        hash_or_none = content_hash if op == "upsert" else None
        action = decide(op, hash_or_none, version, assumed)
        assert action is decide(op, hash_or_none, version, real)
        assumed = next_state(action, hash_or_none, version, assumed)
        real = _applied(real, op, content_hash, version, action)
        assert assumed == real


@given(records)
def test_an_unchanged_resend_after_any_history_is_a_noop(
    batch: list[tuple[str, str, str | None]],
) -> None:
    state: DocState | None = None
    last: tuple[str, str | None, str | None] | None = None
    for op, content_hash, version in batch:
        hash_or_none = content_hash if op == "upsert" else None
        action = decide(op, hash_or_none, version, state)
        state = next_state(action, hash_or_none, version, state)
        if action in (Action.APPLY, Action.DELETE):
            last = (op, hash_or_none, version)
    if last is not None:
        assert decide(*last, state) is Action.NOOP
