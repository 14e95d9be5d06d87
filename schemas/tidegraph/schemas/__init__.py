"""tidegraph.schemas: the public contracts — event models, names, topics, realm configuration.

No I/O happens here beyond reading settings (the environment, and the env file `tidegraph up`
writes: :mod:`tidegraph.schemas.local_state`); every other package depends on this one and on
nothing else shared.
"""

from tidegraph.schemas._validation import Problem, RecordValidationError, problems_from
from tidegraph.schemas._version import __version__ as VERSION
from tidegraph.schemas.changes import (
    CHANGE_SCHEMA,
    ChangeKind,
    EntityRef,
    GraphChange,
    RelationRef,
    change_id,
)
from tidegraph.schemas.documents import (
    DOCUMENT_SCHEMA,
    DocumentVersion,
    compare_source_versions,
)
from tidegraph.schemas.errors import (
    ConfigError,
    ContractError,
    InvalidNameError,
    TidegraphError,
    TopicMissing,
    TransientError,
)
from tidegraph.schemas.facts import render_facts
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.names import (
    ANY_SPACE,
    DEFAULT_SPACE,
    REALM_PATTERN,
    SPACE_PATTERN,
    validate_realm,
    validate_space,
)
from tidegraph.schemas.partitions import partition_for_key, realm_partition
from tidegraph.schemas.realm_config import (
    DEFAULT_REALM_CONFIG,
    EmbedderSpec,
    RealmConfig,
    parse_embedder,
    preset,
)
from tidegraph.schemas.settings import Settings, load_settings
from tidegraph.schemas.topic_ready import topic_partitions
from tidegraph.schemas.topics import TopicSpec, topic_specs

__all__ = [
    "ANY_SPACE",
    "CHANGE_SCHEMA",
    "DEFAULT_REALM_CONFIG",
    "DEFAULT_SPACE",
    "DOCUMENT_SCHEMA",
    "REALM_PATTERN",
    "SPACE_PATTERN",
    "VERSION",
    "ChangeKind",
    "ConfigError",
    "ContractError",
    "DocumentVersion",
    "EmbedderSpec",
    "EntityRef",
    "GraphChange",
    "InvalidNameError",
    "Problem",
    "RealmConfig",
    "RecordValidationError",
    "RelationRef",
    "Settings",
    "TidegraphError",
    "TopicMissing",
    "TopicSpec",
    "TransientError",
    "change_id",
    "compare_source_versions",
    "content_hash",
    "load_settings",
    "parse_embedder",
    "partition_for_key",
    "preset",
    "problems_from",
    "realm_partition",
    "render_facts",
    "topic_partitions",
    "topic_specs",
    "validate_realm",
    "validate_space",
]
