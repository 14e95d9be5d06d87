"""Rebuilding a realm from the documents topic into a shadow schema, then swapping it in."""

from tidegraph.indexer.replay.applier import ShadowApplier
from tidegraph.indexer.replay.diff import (
    Difference,
    diff_schemas,
    format_difference,
    resolve_schema,
)
from tidegraph.indexer.replay.errors import ReplayBusy, ShadowExists
from tidegraph.indexer.replay.rebuild import (
    ReplayOptions,
    ReplayProgress,
    ReplayResult,
    drop_copy,
    replay_realm,
)
from tidegraph.indexer.replay.swap import rebuild_differences

__all__ = [
    "Difference",
    "ReplayBusy",
    "ReplayOptions",
    "ReplayProgress",
    "ReplayResult",
    "ShadowApplier",
    "ShadowExists",
    "diff_schemas",
    "drop_copy",
    "format_difference",
    "rebuild_differences",
    "replay_realm",
    "resolve_schema",
]
