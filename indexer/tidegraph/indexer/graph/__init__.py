"""The graph's pure rules: gates, normalisation, resolution, entity attributes,
corroboration, supersession."""

from tidegraph.indexer.graph.attributes import Attributes, Contribution, derive_attributes
from tidegraph.indexer.graph.corroboration import Corroboration, corroborate, edge_key
from tidegraph.indexer.graph.gates import GATE_HINTS, Gate, GateConfig, Rejection, apply_gates
from tidegraph.indexer.graph.predicates import Vocabulary, normalize_predicate
from tidegraph.indexer.graph.resolution import (
    CONCEPT,
    EntityRecord,
    Resolution,
    merge_records,
    resolve_chunk,
    short_forms,
)
from tidegraph.indexer.graph.rules import (
    LiveRelation,
    RelationAttrs,
    RelationState,
    desired_relation_states,
    merge_entity,
    merge_relation_attrs,
    period_bounds,
    relation_questions,
    render_entity,
    render_relation,
)
from tidegraph.indexer.graph.supersession import (
    Answer,
    Assertion,
    Judge,
    Mechanism,
    Question,
    resolve_supersession,
)
from tidegraph.indexer.graph.symmetry import orient, pair_of
from tidegraph.indexer.graph.validity import normalize_date, normalize_period, valid_at

__all__ = [
    "CONCEPT",
    "GATE_HINTS",
    "Answer",
    "Assertion",
    "Attributes",
    "Contribution",
    "Corroboration",
    "EntityRecord",
    "Gate",
    "GateConfig",
    "Judge",
    "LiveRelation",
    "Mechanism",
    "Question",
    "Rejection",
    "RelationAttrs",
    "RelationState",
    "Resolution",
    "Vocabulary",
    "apply_gates",
    "corroborate",
    "derive_attributes",
    "desired_relation_states",
    "edge_key",
    "merge_entity",
    "merge_records",
    "merge_relation_attrs",
    "normalize_date",
    "normalize_period",
    "normalize_predicate",
    "orient",
    "pair_of",
    "period_bounds",
    "relation_questions",
    "render_entity",
    "render_relation",
    "resolve_chunk",
    "resolve_supersession",
    "short_forms",
    "valid_at",
]
