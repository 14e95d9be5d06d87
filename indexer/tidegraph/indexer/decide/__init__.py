"""What a record means for a realm's graph (no-op, stale, apply, delete), decided before any
extraction cost is paid.
"""

from tidegraph.indexer.decide.fold import Action, DocState, decide, next_state
from tidegraph.indexer.decide.planner import Decision, Logged, Planner

__all__ = ["Action", "Decision", "DocState", "Logged", "Planner", "decide", "next_state"]
