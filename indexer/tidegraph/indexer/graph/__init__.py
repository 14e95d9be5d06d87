"""The graph's pure rules: gates, normalisation, resolution, entity attributes,
corroboration, supersession."""

from tidegraph.indexer.graph.attributes import Attributes, Contribution, derive_attributes
from tidegraph.indexer.graph.corroboration import Corroboration, corroborate, edge_key
from tidegraph.indexer.graph.gates import Gate, GateConfig, apply_gates
from tidegraph.indexer.graph.predicates import Vocabulary, normalize_predicate
from tidegraph.indexer.graph.resolution import EntityRecord, Resolution, resolve_chunk
from tidegraph.indexer.graph.rules import desired_relation_states, render_entity, render_relation
from tidegraph.indexer.graph.supersession import Assertion, resolve_supersession
from tidegraph.indexer.graph.symmetry import orient, pair_of
from tidegraph.indexer.graph.validity import normalize_date, normalize_period, valid_at

__all__ = [
    "Assertion",
    "Attributes",
    "Contribution",
    "Corroboration",
    "EntityRecord",
    "Gate",
    "GateConfig",
    "Resolution",
    "Vocabulary",
    "apply_gates",
    "corroborate",
    "derive_attributes",
    "desired_relation_states",
    "edge_key",
    "normalize_date",
    "normalize_period",
    "normalize_predicate",
    "orient",
    "pair_of",
    "render_entity",
    "render_relation",
    "resolve_chunk",
    "resolve_supersession",
    "valid_at",
]
