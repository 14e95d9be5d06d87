"""The per-record decision: unchanged content is a no-op, older versions are stale.

The pure rules only; that folding them in memory decides like reading the stored state
back is shown against PostgreSQL in ``test_write_equivalence``.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.decide.fold import Action, DocState, decide, next_state
from tidegraph.schemas.documents import compare_source_versions

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


def test_the_highest_version_seen_is_never_forgotten() -> None:
    """ "5", then a version without ``source_version``, then "3": the third is stale
    whether or not the second was folded in between (poll boundaries must not matter)."""
    after_five = next_state(Action.APPLY, "h5", "5", None)
    unversioned = decide("upsert", "hx", None, after_five)
    assert unversioned is Action.APPLY
    after_unversioned = next_state(unversioned, "hx", None, after_five)
    assert after_unversioned == DocState("indexed", "hx", "5")
    assert decide("upsert", "h3", "3", after_unversioned) is Action.STALE


def test_a_resend_or_a_delete_of_an_absent_document_still_raises_the_version() -> None:
    resent = next_state(Action.NOOP, "h1", "9", INDEXED)
    assert resent == DocState("indexed", "h1", "9")
    gone = next_state(Action.NOOP, None, "7", None)
    assert gone == DocState("deleted", None, "7")
    assert decide("upsert", "h2", "6", gone) is Action.STALE


def _highest(versions: list[str | None]) -> str | None:
    """Independent model: the maximum of the versions seen, by a sort."""
    import functools

    seen = [v for v in versions if v is not None]
    if not seen:
        return None
    return sorted(seen, key=functools.cmp_to_key(compare_source_versions))[-1]


@given(records)
def test_the_state_keeps_the_highest_version_of_any_record_seen(
    batch: list[tuple[str, str, str | None]],
) -> None:
    state: DocState | None = None
    seen: list[str | None] = []
    for op, content_hash, version in batch:
        hash_or_none = content_hash if op == "upsert" else None
        action = decide(op, hash_or_none, version, state)
        state = next_state(action, hash_or_none, version, state)
        seen.append(version)
        assert (state.source_version if state else None) == _highest(seen)


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
        assert decide(*last, state) in (Action.NOOP, Action.STALE)  # writes nothing
