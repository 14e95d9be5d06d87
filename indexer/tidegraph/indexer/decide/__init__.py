"""What a record means for a realm's graph (no-op, stale, apply, delete), decided before any
extraction cost is paid.
"""

from tidegraph.indexer.decide.admission import Admitted, Message, Refused, admit, log_time
from tidegraph.indexer.decide.fold import Action, DocState, decide, next_state
from tidegraph.indexer.decide.planner import Decision, Logged, Planner

__all__ = [
    "Action",
    "Admitted",
    "Decision",
    "DocState",
    "Logged",
    "Message",
    "Planner",
    "Refused",
    "admit",
    "decide",
    "log_time",
    "next_state",
]
