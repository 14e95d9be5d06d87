"""Settings of the query service: limits, retrieval knobs and API keys.

Loaded once by the composition root (:func:`load_query_settings`) and passed to
:func:`tidegraph.query_service.app.create_app`; nothing here reads the environment at import.
Environment names are ``TIDEGRAPH_<FIELD>`` (``TIDEGRAPH_API_KEYS`` for the keys).
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidegraph.query_service.gate import GateTimings
from tidegraph.query_service.replicas import ReplicaPolicy


class QuerySettings(BaseSettings):
    """What the HTTP API allows and how retrieval behaves by default."""

    model_config = SettingsConfigDict(env_prefix="TIDEGRAPH_", extra="ignore", frozen=True)

    api_keys: SecretStr | None = Field(
        None,
        description="`key1=realm_a,realm_b;key2=*`. Unset: no keys, loopback only.",
    )
    max_body_bytes: int = Field(64 * 1024, ge=1024, description="Largest request body.")
    max_query_chars: int = Field(4000, ge=1, description="Longest query text.")
    max_top_k: int = Field(100, ge=1, description="Largest `top_k` a request may ask for.")
    max_hops: int = Field(3, ge=0, le=6, description="Deepest traversal a request may ask for.")
    max_relation_top_k: int = Field(200, ge=1, description="Most relations one answer carries.")
    max_page: int = Field(1000, ge=1, description="Largest page of changes/relations/entities.")
    edge_cap: int = Field(
        40,
        ge=1,
        description="Most relations one matched entity contributes to a walk, unless the "
        "request sets `max_relation_edges`.",
    )
    max_relation_edges: int = Field(
        200, ge=1, description="Largest `max_relation_edges` a request may ask for."
    )
    channel_depth: int = Field(
        30, ge=1, description="Candidates each relation channel hands to fusion."
    )
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion constant.")
    ef_search: int = Field(
        100, ge=10, le=1000, description="HNSW candidate list (entities, communities)."
    )
    ef_search_relations: int = Field(
        400,
        ge=10,
        le=1000,
        description="HNSW candidate list for relation similarity: rendered triples are short "
        "and alike, so their graph needs a wider search for the same recall.",
    )
    ef_search_hashing_relations: int = Field(
        1000,
        ge=10,
        le=1000,
        description="HNSW candidate list for relation similarity in a realm with the offline "
        "hashing embedder: its near-orthogonal vectors need a wider search of the relation "
        "graph for the same recall (0.97 at 10,000 entities; 0.90 at 400).",
    )
    entity_similarity_floor: float = Field(
        0.1,
        ge=-1.0,
        le=1.0,
        description="Least cosine similarity for an entity matched by vector to be reported "
        "and walked from (entities named in the question always are).",
    )
    ef_search_chunks: int = Field(64, ge=10, le=1000, description="HNSW list for passages.")
    community_weights: tuple[float, float, float] = Field(
        (0.6, 0.25, 0.15),
        description="Blend of similarity, rating and size when ranking community reports.",
    )
    metrics_require_key: bool = Field(
        False,
        description="With API keys configured, `/metrics` answers only a key reaching every "
        "realm (`key=*`); its series name realms.",
    )
    realm_cache_seconds: float = Field(5.0, ge=0, description="How long realm metadata is kept.")
    ready_timeout: float = Field(
        0.9, gt=0, le=30, description="`/readyz` answers 503 when its check takes longer."
    )
    db_probe_after: float = Field(
        0.2,
        gt=0,
        description="A request still waiting on the database this long makes the service "
        "check that PostgreSQL answers (one connection, `SELECT 1`).",
    )
    db_probe_timeout: float = Field(
        0.6, gt=0, description="A database check slower than this means PostgreSQL is down."
    )
    db_recheck_every: float = Field(
        0.2, gt=0, description="Pause between database checks while PostgreSQL is down."
    )
    db_work_timeout: float = Field(
        30.0, gt=0, description="Longest a request may spend on the database before its 503."
    )
    standby_wait: float = Field(
        0.2,
        ge=0,
        le=30,
        description="Longest a read that requires a sequence waits for a standby to apply it"
        " before the primary answers it.",
    )
    standby_max_lag: float = Field(
        5.0,
        ge=0,
        description="A standby whose replay lags more than this many seconds answers no"
        " read that requires no sequence.",
    )
    standby_lag_every: float = Field(
        1.0, gt=0, description="How often a standby's replay lag is measured again (seconds)."
    )
    primary_reads: bool = Field(
        True,
        description="The primary takes its turn with its standbys at reads; false: it"
        " answers only what no standby can.",
    )

    feed_fence_wait: float = Field(
        2.0,
        ge=0,
        le=30,
        description="Longest a change feed page waits for every standby of the realm's server"
        " to replay what it read, before a 503 `standbys_behind`.",
    )

    def gate_timings(self) -> GateTimings:
        """The outage gate's timings (:mod:`tidegraph.query_service.gate`)."""
        return GateTimings(
            probe_after=self.db_probe_after,
            probe_timeout=self.db_probe_timeout,
            recheck_every=self.db_recheck_every,
            work_timeout=self.db_work_timeout,
        )

    def replica_policy(self) -> ReplicaPolicy:
        """When a standby may answer a read (:mod:`tidegraph.query_service.replicas`)."""
        return ReplicaPolicy(
            wait=self.standby_wait,
            max_lag=self.standby_max_lag,
            lag_every=self.standby_lag_every,
            primary_reads=self.primary_reads,
            fence_wait=self.feed_fence_wait,
        )


def load_query_settings(**overrides: object) -> QuerySettings:
    """Environment with explicit (flag) overrides on top; ``None`` overrides are skipped."""
    return QuerySettings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
