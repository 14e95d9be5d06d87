"""The one write semantics: a document version applied to a realm's graph in a transaction."""

from tidegraph.indexer.write.context import ensure_vector_types, vec_param
from tidegraph.indexer.write.contradictions import CachedJudge, Judge, JudgeFor
from tidegraph.indexer.write.failures import Backoff, RecordFailed, Verdict, retry_after, verdict
from tidegraph.indexer.write.runs import Item, Run, RunWriter, as_record_failure, fallback, runs
from tidegraph.indexer.write.sequencer import BatchSequencer, LiveSequencer, Sequencer, Stamp
from tidegraph.indexer.write.units import BatchUnit, Outcome, RecordUnit, Settlement
from tidegraph.indexer.write.writer import UNKNOWN, Version, WriteResult, apply_version

__all__ = [
    "UNKNOWN",
    "Backoff",
    "BatchSequencer",
    "BatchUnit",
    "CachedJudge",
    "Item",
    "Judge",
    "JudgeFor",
    "LiveSequencer",
    "Outcome",
    "RecordFailed",
    "RecordUnit",
    "Run",
    "RunWriter",
    "Sequencer",
    "Settlement",
    "Stamp",
    "Verdict",
    "Version",
    "WriteResult",
    "apply_version",
    "as_record_failure",
    "ensure_vector_types",
    "fallback",
    "retry_after",
    "runs",
    "vec_param",
    "verdict",
]
