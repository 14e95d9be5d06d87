"""tidegraph.store: the SQL every package shares — the realm catalogue, layout locks and
upgrades, consumer positions, and which PostgreSQL errors are worth retrying.
"""

from tidegraph.store.belief import (
    DOCUMENTS,
    ENTITIES,
    RELATIONS,
    belief,
    entities_view,
    live,
    relations_view,
)
from tidegraph.store.cluster import Cluster
from tidegraph.store.ddl import (
    contradiction_answers_ddl,
    drop_foreign_keys_ddl,
    foreign_keys_ddl,
    search_index_ddl,
)
from tidegraph.store.entity_state import alive
from tidegraph.store.errors import (
    AlreadySettled,
    DatabaseUnavailable,
    EmbedderMismatch,
    Fenced,
    RealmSchemaError,
    RealmSwapped,
    ServerUnavailable,
    classify_db_error,
    is_transient,
    is_unstorable,
    refusal,
)
from tidegraph.store.figures import RealmFigures, figures_everywhere, realm_figures, schema_figures
from tidegraph.store.holds import Hold
from tidegraph.store.locks import lock_realm_schema, replay_lock_key, switch_lock_key
from tidegraph.store.move import RealmMove
from tidegraph.store.placement import PlacedElsewhere, find_placed, place_realm
from tidegraph.store.positions import Claim, replay_group
from tidegraph.store.realm_positions import NO_REALM, Mark, key_realm
from tidegraph.store.realms import (
    DroppedRealm,
    Placement,
    RealmInfo,
    check_embedder,
    control_exists,
    create_realm,
    drop_realm,
    ensure_control,
    find_realm,
    list_realms,
    open_realm,
    placements,
    realm_copies,
    realm_exists,
    realm_problems,
    realm_server,
    set_coverage_telemetry,
    unregister,
)
from tidegraph.store.standby_fence import (
    Fence,
    StandbyFence,
    fence_after_read,
    has_replayed,
    read_fence,
)
from tidegraph.store.standbys import realm_head, replay_lag
from tidegraph.store.upgrades import (
    add_telemetry,
    has_telemetry,
    rebuild_vector_index,
    vector_indexes_outdated,
)

__all__ = [
    "DOCUMENTS",
    "ENTITIES",
    "NO_REALM",
    "RELATIONS",
    "AlreadySettled",
    "Claim",
    "Cluster",
    "DatabaseUnavailable",
    "DroppedRealm",
    "EmbedderMismatch",
    "Fenced",
    "Hold",
    "Mark",
    "PlacedElsewhere",
    "Placement",
    "RealmFigures",
    "RealmInfo",
    "RealmMove",
    "RealmSchemaError",
    "RealmSwapped",
    "ServerUnavailable",
    "StandbyFence",
    "add_telemetry",
    "alive",
    "belief",
    "check_embedder",
    "classify_db_error",
    "contradiction_answers_ddl",
    "control_exists",
    "create_realm",
    "drop_foreign_keys_ddl",
    "drop_realm",
    "ensure_control",
    "entities_view",
    "figures_everywhere",
    "find_placed",
    "find_realm",
    "foreign_keys_ddl",
    "has_telemetry",
    "is_transient",
    "is_unstorable",
    "key_realm",
    "list_realms",
    "live",
    "lock_realm_schema",
    "open_realm",
    "place_realm",
    "placements",
    "read_fence",
    "fence_after_read",
    "has_replayed",
    "Fence",
    "realm_copies",
    "realm_exists",
    "realm_figures",
    "realm_head",
    "realm_problems",
    "realm_server",
    "rebuild_vector_index",
    "refusal",
    "relations_view",
    "replay_group",
    "replay_lag",
    "replay_lock_key",
    "switch_lock_key",
    "schema_figures",
    "search_index_ddl",
    "set_coverage_telemetry",
    "unregister",
    "vector_indexes_outdated",
]
