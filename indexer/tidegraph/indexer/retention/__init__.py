"""Retention as demotion (paper §6.1): score entities, archive the least valuable, restore."""

from tidegraph.indexer.retention.archive import archive, plan_retention, unarchive

__all__ = [
    "archive",
    "plan_retention",
    "unarchive",
]
