"""The one write semantics: a document version applied to a realm's graph in a transaction."""

from tidegraph.indexer.write.failures import Backoff, RecordFailed, Verdict, verdict
from tidegraph.indexer.write.sequencer import BatchSequencer, LiveSequencer, Sequencer, Stamp
from tidegraph.indexer.write.units import BatchUnit, RecordUnit, Settlement
from tidegraph.indexer.write.writer import UNKNOWN, Version, WriteResult, apply_version

__all__ = [
    "Backoff",
    "BatchSequencer",
    "BatchUnit",
    "LiveSequencer",
    "RecordFailed",
    "RecordUnit",
    "Sequencer",
    "Settlement",
    "Stamp",
    "UNKNOWN",
    "Verdict",
    "Version",
    "WriteResult",
    "apply_version",
    "verdict",
]
