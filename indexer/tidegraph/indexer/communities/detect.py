"""Communities of the current entity graph (paper §6, §6.1, §8.15): detection, as plain
functions over values. Reports are :mod:`tidegraph.indexer.communities.reports`; the store
(:mod:`tidegraph.indexer.communities.store`) reads the snapshot and writes the result.
Nothing here does I/O.

Why each rule is the way it is:

- **Weights.** Each current relation contributes its corroboration weight (distinct chunks)
  to an undirected edge, scaled by ``denial_factor`` (< 1) when it is a denial: a denial
  still says two entities are discussed together, but far less than an assertion does.
  Parallel relations between one pair add up; self-loops say nothing about clustering.
- **Leiden, seeded.** RBConfiguration (modularity with a resolution) via leidenalg, with a
  fixed seed and nodes and edges fed in sorted order, so the same graph always gives the
  same partition whatever order the snapshot came in. Label propagation leaves a cluster
  covering a third of the graph (§8.15), so it is only the fallback for an environment
  where leidenalg cannot be imported; it is deterministic too (seeded visiting order, ties
  to the smallest label).
- **Minimum size.** A cluster below ``min_size`` entities is dropped: a two-entity
  "community" says nothing its members' own descriptions do not (§6).
- **Hierarchy by recursion.** Level *l+1* clusters a supergraph with one node per level-*l*
  cluster and, as edge weights, the weights summed across each cut. Internal weight is left
  out, so the supergraph is not the already-optimal partition over again. Recursion is what
  guarantees that children are contained in their parents (§6.1); a parent has at least two
  children (one child would repeat it), and a cluster left alone at a level is a root.
- **Canonical order.** Clusters of a level are ordered largest first (ties: smallest entity
  id), which is also the order reports are made in, so a truncated build still covers the
  most significant structure.

Errors::

    TidegraphError
    └── CommunityError             a community build could not be done as asked
        ├── CommunityConfigError   bad parameters (also a ConfigError)
        └── ReportFailed           one cluster's report is unusable: skip it, log it
"""

from __future__ import annotations

import logging
import math
import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from tidegraph.schemas import ConfigError, TidegraphError

__all__ = [
    "Cluster",
    "ClusterParams",
    "CommunityConfigError",
    "CommunityError",
    "Entity",
    "Hierarchy",
    "Method",
    "Relation",
    "ReportFailed",
    "WeightedGraph",
    "build_graph",
    "detect",
    "effective_weight",
    "label_propagation",
    "leiden_available",
    "partition",
    "resolve_method",
]

log = logging.getLogger(__name__)

Method = Literal["auto", "leiden", "label_propagation"]

DEFAULT_SEED = 20240607
"""Leiden and label propagation seed: any fixed value; fixed is what matters."""
_LPA_MAX_SWEEPS = 100
_LEIDEN_ITERATIONS = 2
"""leidenalg's default. Iterating to convergence (-1) cost over ten times as long on a
100,000-relation graph for a partition of practically the same quality."""


class CommunityError(TidegraphError):
    """A community build could not be done as asked."""


class CommunityConfigError(CommunityError, ConfigError):
    """A build parameter is out of range, or the asked-for algorithm is not installed."""


class ReportFailed(CommunityError):
    """One cluster's report could not be made; the build skips it and goes on."""

    def __init__(self, level: int, index: int, reason: str) -> None:
        super().__init__(f"report of community {level}.{index} failed: {reason}")
        self.level = level
        self.index = index
        self.reason = reason


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Entity:
    """A live (not dormant) entity of the snapshot."""

    id: int
    """Entity id within the realm."""
    name: str
    """Canonical name."""
    type: str = "Concept"
    """Entity type."""
    description: str = ""
    """Living description (may be empty)."""


@dataclass(frozen=True)
class Relation:
    """A current relation of the snapshot."""

    id: int
    """Relation id within the realm."""
    subject: int
    """Subject entity id."""
    predicate: str
    """Normalised predicate."""
    object: int
    """Object entity id."""
    weight: float
    """Corroboration weight: distinct contributing chunks."""
    negated: bool = False
    """The sources deny the relation."""
    description: str = ""
    """Merged description from the sources."""


@dataclass(frozen=True)
class ClusterParams:
    """How to partition; every field is a command-line flag of ``tidegraph communities``."""

    resolution: float = 1.0
    """RBConfiguration resolution γ: higher gives more, smaller clusters (ignored by LPA)."""
    min_size: int = 3
    """Clusters with fewer entities are dropped."""
    levels: int = 1
    """Levels of the hierarchy; 1 is a flat partition."""
    seed: int = DEFAULT_SEED
    """Seed of Leiden and of label propagation's visiting order."""
    denial_factor: float = 0.25
    """Scale of a denial's weight, in [0, 1)."""
    method: Method = "auto"
    """``auto`` is Leiden when leidenalg imports, else label propagation."""

    def __post_init__(self) -> None:
        if not (self.resolution > 0 and math.isfinite(self.resolution)):
            raise CommunityConfigError(
                f"resolution must be a positive number, not {self.resolution}"
            )
        if self.min_size < 1:
            raise CommunityConfigError(f"min_size must be at least 1, not {self.min_size}")
        if self.levels < 1:
            raise CommunityConfigError(f"levels must be at least 1, not {self.levels}")
        if not 0 <= self.denial_factor < 1:
            raise CommunityConfigError(
                f"denial_factor must be in [0, 1), not {self.denial_factor}: "
                "a denial must weigh less than the assertion it denies"
            )
        if self.method not in ("auto", "leiden", "label_propagation"):
            raise CommunityConfigError(f"unknown method {self.method!r}")


@dataclass(frozen=True)
class WeightedGraph:
    """Undirected weighted graph over entity ids, in canonical (sorted) order."""

    nodes: tuple[int, ...]
    """Entity ids, ascending; a node's index is its position here."""
    edges: tuple[tuple[int, int, float], ...]
    """``(i, j, weight)`` with node indices ``i < j``, sorted, one per pair, weight > 0."""


@dataclass(frozen=True)
class Cluster:
    """One community at one level of the hierarchy."""

    level: int
    """0 for clusters of entities, ``l`` for clusters of level ``l-1`` clusters."""
    index: int
    """Position within its level (largest first)."""
    members: tuple[int, ...]
    """Entity ids, ascending (for a parent: its children's members)."""
    children: tuple[int, ...] = ()
    """Indices of its clusters at ``level - 1``."""
    parent: int | None = None
    """Index of its parent at ``level + 1``, if any."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.level, self.index)


@dataclass(frozen=True)
class Hierarchy:
    """The partition of a snapshot: ``levels[0]`` over entities, then over clusters."""

    method: Literal["leiden", "label_propagation"]
    """Algorithm actually used."""
    entity_count: int
    """Entities in the snapshot (clustered or not)."""
    levels: tuple[tuple[Cluster, ...], ...]
    """Clusters per level, each level largest first; ``levels[0]`` may be empty."""

    @property
    def largest_share(self) -> float:
        """Share of the snapshot's entities held by the largest level-0 community (§8.15)."""
        if not self.entity_count or not self.levels[0]:
            return 0.0
        return len(self.levels[0][0].members) / self.entity_count

    def clusters(self) -> list[Cluster]:
        """Every cluster in report order: level by level, largest first."""
        return [c for level in self.levels for c in level]


# --------------------------------------------------------------------------- detection


def leiden_available() -> bool:
    """Whether leidenalg and igraph import here (not cached, so a test can hide them)."""
    return _leiden() is not None


def _leiden() -> tuple[Any, Any] | None:
    try:
        import igraph
        import leidenalg
    except ImportError:
        return None
    return igraph, leidenalg


def resolve_method(method: Method) -> Literal["leiden", "label_propagation"]:
    """The algorithm ``method`` means here; asking for Leiden without leidenalg is an error."""
    if method == "label_propagation":
        return "label_propagation"
    if leiden_available():
        return "leiden"
    if method == "leiden":
        raise CommunityConfigError(
            "Leiden was asked for but leidenalg/igraph cannot be imported (pip install leidenalg)"
        )
    log.warning("leidenalg cannot be imported: communities fall back to label propagation")
    return "label_propagation"


def build_graph(
    entity_ids: Iterable[int], relations: Iterable[Relation], denial_factor: float = 0.25
) -> WeightedGraph:
    """The weighted undirected graph of the snapshot.

    Relations with an endpoint outside ``entity_ids`` (dormant, or of another space) and
    self-loops are left out; a denial counts ``denial_factor`` times its weight.
    """
    nodes = tuple(sorted(set(entity_ids)))
    index = {eid: i for i, eid in enumerate(nodes)}
    acc: defaultdict[tuple[int, int], float] = defaultdict(float)
    for r in relations:
        i, j = index.get(r.subject), index.get(r.object)
        if i is None or j is None or i == j:
            continue
        w = effective_weight(r, denial_factor)
        if w > 0:
            acc[(i, j) if i < j else (j, i)] += w
    return WeightedGraph(nodes, tuple((i, j, w) for (i, j), w in sorted(acc.items())))


def effective_weight(r: Relation, denial_factor: float) -> float:
    """A relation's clustering weight: corroboration, scaled down for a denial."""
    return float(r.weight) * (denial_factor if r.negated else 1.0)


def partition(
    graph: WeightedGraph,
    method: Literal["leiden", "label_propagation"],
    *,
    resolution: float = 1.0,
    seed: int = DEFAULT_SEED,
) -> list[tuple[int, ...]]:
    """Groups of node indices, largest first (ties: smallest index), each ascending."""
    n = len(graph.nodes)
    if n == 0:
        return []
    if method == "leiden":
        membership = _leiden_membership(graph, resolution, seed)
    else:
        membership = label_propagation(graph, seed=seed)
    groups: defaultdict[int, list[int]] = defaultdict(list)
    for node, label in enumerate(membership):
        groups[label].append(node)
    return sorted((tuple(g) for g in groups.values()), key=lambda g: (-len(g), g[0]))


def _leiden_membership(graph: WeightedGraph, resolution: float, seed: int) -> list[int]:
    backend = _leiden()
    if backend is None:
        raise CommunityConfigError("leidenalg/igraph cannot be imported")
    igraph, leidenalg = backend
    g = igraph.Graph(n=len(graph.nodes), edges=[(i, j) for i, j, _ in graph.edges])
    found = leidenalg.find_partition(
        g,
        leidenalg.RBConfigurationVertexPartition,
        weights=[w for _, _, w in graph.edges],
        resolution_parameter=resolution,
        seed=seed,
        n_iterations=_LEIDEN_ITERATIONS,
    )
    return [int(x) for x in found.membership]


def label_propagation(graph: WeightedGraph, *, seed: int = DEFAULT_SEED) -> list[int]:
    """Asynchronous weighted label propagation (Raghavan et al. 2007), made deterministic.

    Each sweep visits the nodes in an order drawn from ``random.Random(seed)``; a node takes
    the label of greatest total edge weight among its neighbours, keeps its own on a tie
    that includes it, else takes the smallest tied label. Stops when a sweep changes
    nothing (or after a bounded number of sweeps).
    """
    n = len(graph.nodes)
    adj: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for i, j, w in graph.edges:
        adj[i].append((j, w))
        adj[j].append((i, w))
    labels = list(range(n))
    order = [v for v in range(n) if adj[v]]
    rng = random.Random(seed)  # noqa: S311 - a visiting order, not a secret
    for _ in range(_LPA_MAX_SWEEPS):
        rng.shuffle(order)
        changed = False
        for v in order:
            scores: defaultdict[int, float] = defaultdict(float)
            for u, w in adj[v]:
                scores[labels[u]] += w
            best = max(scores.values())
            tied = [lab for lab, s in scores.items() if math.isclose(s, best, rel_tol=1e-9)]
            if labels[v] in tied:
                continue
            labels[v] = min(tied)
            changed = True
        if not changed:
            break
    return labels


def detect(
    entity_ids: Iterable[int], relations: Iterable[Relation], params: ClusterParams
) -> Hierarchy:
    """Partition the snapshot and build ``params.levels`` levels by supergraph recursion."""
    method = resolve_method(params.method)
    graph = build_graph(entity_ids, relations, params.denial_factor)
    groups = partition(graph, method, resolution=params.resolution, seed=params.seed)
    members = [tuple(graph.nodes[i] for i in g) for g in groups if len(g) >= params.min_size]
    levels: list[list[Cluster]] = [[Cluster(0, k, m) for k, m in enumerate(members)]]
    while len(levels) < params.levels and len(levels[-1]) > 1:
        below = levels[-1]
        owner = {eid: c.index for c in below for eid in c.members}
        cut: defaultdict[tuple[int, int], float] = defaultdict(float)
        for i, j, w in graph.edges:
            a, b = owner.get(graph.nodes[i]), owner.get(graph.nodes[j])
            if a is not None and b is not None and a != b:
                cut[(a, b) if a < b else (b, a)] += w
        supergraph = WeightedGraph(
            tuple(range(len(below))), tuple((a, b, w) for (a, b), w in sorted(cut.items()))
        )
        parents = [
            g
            for g in partition(supergraph, method, resolution=params.resolution, seed=params.seed)
            if len(g) >= 2
        ]
        if not parents:
            break
        level = len(levels)
        made = sorted(
            ((tuple(sorted(eid for k in g for eid in below[k].members)), g) for g in parents),
            key=lambda x: (-len(x[0]), x[0][0]),
        )
        levels.append([Cluster(level, p, m, tuple(g)) for p, (m, g) in enumerate(made)])
        for p, (_, g) in enumerate(made):
            for k in g:
                c = below[k]
                below[k] = Cluster(c.level, c.index, c.members, c.children, p)
    return Hierarchy(method, len(graph.nodes), tuple(tuple(level) for level in levels))
