"""Communities: detection over the current graph, their reports, and their storage (paper §6)."""

from tidegraph.indexer.communities.auto import auto_build_loop
from tidegraph.indexer.communities.detect import (
    ClusterParams,
    CommunityConfigError,
    Hierarchy,
    detect,
    leiden_available,
    partition,
    resolve_method,
)
from tidegraph.indexer.communities.reports import (
    Report,
    make_reports,
    model_reporter,
    offline_reporter,
)
from tidegraph.indexer.communities.store import (
    BuildResult,
    build_communities,
    read_snapshot,
)

__all__ = [
    "BuildResult",
    "ClusterParams",
    "CommunityConfigError",
    "Hierarchy",
    "Report",
    "auto_build_loop",
    "build_communities",
    "detect",
    "leiden_available",
    "make_reports",
    "model_reporter",
    "offline_reporter",
    "partition",
    "read_snapshot",
    "resolve_method",
]
