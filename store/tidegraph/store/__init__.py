"""tidegraph.store: the SQL every package shares — the realm catalogue, layout locks and
upgrades, consumer positions, and which PostgreSQL errors are worth retrying.
"""

from tidegraph.store.errors import (
    AlreadySettled,
    EmbedderMismatch,
    Fenced,
    RealmSchemaError,
    RealmSwapped,
    classify_db_error,
    is_transient,
)
from tidegraph.store.holds import Hold
from tidegraph.store.locks import lock_realm_schema
from tidegraph.store.positions import Claim
from tidegraph.store.realm_positions import Mark
from tidegraph.store.realms import (
    RealmInfo,
    create_realm,
    ensure_control,
    find_realm,
    list_realms,
    open_realm,
    realm_exists,
)
from tidegraph.store.standby_fence import StandbyFence

__all__ = [
    "AlreadySettled",
    "Claim",
    "EmbedderMismatch",
    "Fenced",
    "Hold",
    "Mark",
    "RealmInfo",
    "RealmSchemaError",
    "RealmSwapped",
    "StandbyFence",
    "classify_db_error",
    "create_realm",
    "ensure_control",
    "find_realm",
    "is_transient",
    "list_realms",
    "lock_realm_schema",
    "open_realm",
    "realm_exists",
]
