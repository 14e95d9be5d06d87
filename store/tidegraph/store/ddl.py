"""The PostgreSQL layout: one control schema, and one schema per realm.

Realm schemas are named by :func:`tidegraph.schemas.names.realm_schema` and only ever reach
SQL through ``sql.Identifier``. Every embedding column has the realm's pinned dimension
(DESIGN invariant 10); :data:`EMBEDDING_COLUMNS` lists them so initialisation can verify
each one (paper §3.5) instead of trusting that an earlier run created them right.

Belief time lives in three places: ``chunks.t_created/t_expired`` (chunks are expired, never
deleted), ``relation_history`` (one row per belief interval of a relation's state) and
``entity_history`` (one row per belief interval of an entity's name, type, description and
aliases), so the graph as believed at any instant can be read back after later writes.
``entity_sources`` holds what each live chunk says an entity is (type, description): the
entity's type and description are derived from it, so they leave with the chunks that
taught them.
"""

# Long on purpose: the realm schema as one DDL text, table by table, with the additions upgrades
# make to it; split, a table and its later columns would live apart.
from __future__ import annotations

from typing import LiteralString

from psycopg import sql

CONTROL_SCHEMA = "tidegraph"

EMBEDDING_COLUMNS: tuple[tuple[str, str], ...] = (
    ("chunks", "embedding"),
    ("entities", "embedding"),
    ("relations", "embedding"),
    ("communities", "embedding"),
)
"""(table, column) pairs that must be ``vector(<realm dimension>)``."""

_CONTROL = """
CREATE SCHEMA IF NOT EXISTS tidegraph;
CREATE TABLE IF NOT EXISTS tidegraph.realms (
    realm        text PRIMARY KEY,
    schema_name  text NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    server       text NOT NULL DEFAULT 'main'
);
CREATE TABLE IF NOT EXISTS tidegraph.consumer_positions (
    group_id     text   NOT NULL,
    topic        text   NOT NULL,
    partition    int    NOT NULL,
    next_offset  bigint NOT NULL,
    epoch        bigint NOT NULL DEFAULT 0,
    ahead        jsonb  NOT NULL DEFAULT '{}',
    last_belief  timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition)
);
CREATE TABLE IF NOT EXISTS tidegraph.indexer_holds (
    group_id     text   NOT NULL,
    topic        text   NOT NULL,
    partition    int    NOT NULL,
    realm        text   NOT NULL,
    kind         text   NOT NULL CHECK (kind IN ('paused', 'held')),
    record_offset bigint NOT NULL,
    doc_key      text,
    error_class  text   NOT NULL,
    error        text   NOT NULL,
    since        timestamptz NOT NULL DEFAULT now(),
    retry_at     timestamptz,
    PRIMARY KEY (group_id, topic, partition, realm)
);
CREATE TABLE IF NOT EXISTS tidegraph.key_positions (
    key          text   NOT NULL,
    topic        text   NOT NULL,
    partition    int    NOT NULL,
    next_offset  bigint NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key, topic, partition)
);
CREATE TABLE IF NOT EXISTS tidegraph.publisher_positions (
    realm          text PRIMARY KEY,
    published_seq  bigint NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
"""

_POSITIONS = """
CREATE TABLE IF NOT EXISTS {schema}.positions (
    topic        text   NOT NULL,
    partition    int    NOT NULL,
    next_offset  bigint NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);
"""


def positions_ddl(schema: str) -> sql.Composed:
    """The realm's own position table alone (idempotent): where the realm stands on each
    partition of the documents topic (:mod:`tidegraph.store.realm_positions`)."""
    return sql.SQL(_POSITIONS).format(schema=sql.Identifier(schema))


_TELEMETRY = """
CREATE TABLE IF NOT EXISTS {schema}.retrievals (
    id             bigserial PRIMARY KEY,
    at             timestamptz NOT NULL DEFAULT now(),
    query_hash     text   NOT NULL,
    mode           text   NOT NULL,
    entity_ids     bigint[] NOT NULL,
    community_ids  bigint[] NOT NULL
);
CREATE INDEX IF NOT EXISTS retrievals_at ON {schema}.retrievals (at);
"""

TELEMETRY_TABLE = "retrievals"
"""Coverage telemetry (paper §6.1): one row per recorded query, holding the hash of its
text (never the text), the entities and communities it touched and when; a realm created
before it gets it when a service next opens it (:mod:`tidegraph.store.upgrades`)."""


_ARCHIVAL = """
ALTER TABLE {schema}.entities ADD COLUMN IF NOT EXISTS archived_since timestamptz;
CREATE INDEX IF NOT EXISTS entities_archived ON {schema}.entities (id)
    WHERE archived_since IS NOT NULL;
"""


def archival_ddl(schema: str) -> sql.Composed:
    """Retention's ``entities.archived_since`` and the partial index every retrieval channel
    probes to withhold archived entities and their relations (idempotent)."""
    return sql.SQL(_ARCHIVAL).format(schema=sql.Identifier(schema))


_SUPERSEDED_VIA = """
ALTER TABLE {schema}.relations ADD COLUMN IF NOT EXISTS superseded_via text;
ALTER TABLE {schema}.relation_history ADD COLUMN IF NOT EXISTS superseded_via text;
"""


def superseded_via_ddl(schema: str) -> sql.Composed:
    """The mechanism column of ``relations`` and ``relation_history`` (``negation``,
    ``exclusive_group``, ``functional``); null on a relation superseded before it existed
    (idempotent)."""
    return sql.SQL(_SUPERSEDED_VIA).format(schema=sql.Identifier(schema))


def telemetry_ddl(schema: str) -> sql.Composed:
    """The coverage telemetry table alone (idempotent)."""
    return sql.SQL(_TELEMETRY).format(schema=sql.Identifier(schema))


_REALM_TABLES = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.meta (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    realm          text NOT NULL,
    embedder       text NOT NULL,
    dimension      int  NOT NULL,
    extractor      text NOT NULL,
    config         jsonb NOT NULL,
    seq            bigint NOT NULL DEFAULT 0,
    last_write_at  timestamptz,
    communities_built_at  timestamptz,
    communities_stale     boolean NOT NULL DEFAULT false,
    swapped_out    boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {schema}.documents (
    space           text NOT NULL,
    doc_key         text NOT NULL,
    status          text NOT NULL CHECK (status IN ('indexed', 'deleted', 'failed')),
    content_hash    text,
    source_version  text,
    order_key       text,
    title           text,
    source          text,
    metadata        jsonb NOT NULL DEFAULT '{{}}',
    error           text,
    chunk_count     int  NOT NULL DEFAULT 0,
    indexed_at      timestamptz NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (space, doc_key)
);
CREATE TABLE IF NOT EXISTS {schema}.chunks (
    id            bigserial PRIMARY KEY,
    space         text NOT NULL,
    doc_key       text NOT NULL,
    ordinal       int  NOT NULL,
    text          text NOT NULL,
    content_hash  text NOT NULL,
    metadata      jsonb NOT NULL DEFAULT '{{}}',
    embedding     vector({dim}) NOT NULL,
    t_created     timestamptz NOT NULL,
    t_expired     timestamptz
);
CREATE INDEX IF NOT EXISTS chunks_live_doc ON {schema}.chunks (space, doc_key)
    WHERE t_expired IS NULL;
CREATE INDEX IF NOT EXISTS chunks_belief ON {schema}.chunks (t_created, t_expired);
CREATE TABLE IF NOT EXISTS {schema}.entities (
    id             bigserial PRIMARY KEY,
    space          text NOT NULL,
    name           text NOT NULL,
    name_key       text NOT NULL,
    type           text NOT NULL,
    description    text NOT NULL DEFAULT '',
    aliases        text[] NOT NULL DEFAULT '{{}}',
    embedding      vector({dim}) NOT NULL,
    dormant_since  timestamptz,
    archived_since timestamptz,
    merged_into    bigint,
    created_at     timestamptz NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS entities_name_key ON {schema}.entities (space, name_key);
CREATE INDEX IF NOT EXISTS entities_archived ON {schema}.entities (id)
    WHERE archived_since IS NOT NULL;
CREATE TABLE IF NOT EXISTS {schema}.entity_aliases (
    space        text   NOT NULL,
    alias_lower  text   NOT NULL,
    entity_id    bigint NOT NULL REFERENCES {schema}.entities (id),
    PRIMARY KEY (space, alias_lower, entity_id)
);
CREATE TABLE IF NOT EXISTS {schema}.mentions (
    chunk_id   bigint NOT NULL REFERENCES {schema}.chunks (id),
    entity_id  bigint NOT NULL,
    t_created  timestamptz NOT NULL,
    t_expired  timestamptz,
    PRIMARY KEY (chunk_id, entity_id, t_created)
);
CREATE INDEX IF NOT EXISTS mentions_entity ON {schema}.mentions (entity_id);
CREATE INDEX IF NOT EXISTS mentions_live ON {schema}.mentions (entity_id)
    WHERE t_expired IS NULL;
CREATE TABLE IF NOT EXISTS {schema}.relations (
    id             bigserial PRIMARY KEY,
    space          text   NOT NULL,
    subject_id     bigint NOT NULL REFERENCES {schema}.entities (id),
    predicate      text   NOT NULL,
    object_id      bigint NOT NULL REFERENCES {schema}.entities (id),
    negated        boolean NOT NULL DEFAULT false,
    description    text   NOT NULL DEFAULT '',
    confidence     real   NOT NULL DEFAULT 1.0,
    valid_from     text,
    valid_to       text,
    valid_from_d   date,
    valid_to_d     date,
    weight         int    NOT NULL DEFAULT 0,
    order_key      text,
    status         text   NOT NULL CHECK (status IN ('current', 'superseded', 'retracted')),
    superseded_by  bigint,
    superseded_via text,
    t_created      timestamptz NOT NULL,
    t_expired      timestamptz,
    doc_keys       text[] NOT NULL DEFAULT '{{}}',
    rendered       text   NOT NULL,
    tsv            tsvector GENERATED ALWAYS AS (to_tsvector('simple', rendered)) STORED,
    embedding      vector({dim}) NOT NULL,
    UNIQUE (space, subject_id, predicate, object_id, negated)
) WITH (fillfactor = 60);
CREATE INDEX IF NOT EXISTS relations_subject ON {schema}.relations (subject_id) INCLUDE (object_id);
CREATE INDEX IF NOT EXISTS relations_object ON {schema}.relations (object_id) INCLUDE (subject_id);
CREATE INDEX IF NOT EXISTS relations_pair ON {schema}.relations (space, subject_id, object_id);
CREATE INDEX IF NOT EXISTS relations_valid ON {schema}.relations (valid_from_d, valid_to_d);
CREATE TABLE IF NOT EXISTS {schema}.relation_sources (
    relation_id  bigint NOT NULL REFERENCES {schema}.relations (id),
    chunk_id     bigint NOT NULL REFERENCES {schema}.chunks (id),
    doc_key      text   NOT NULL,
    order_key    text,
    description  text   NOT NULL DEFAULT '',
    confidence   real   NOT NULL DEFAULT 1.0,
    valid_from   text,
    valid_to     text,
    PRIMARY KEY (relation_id, chunk_id)
);
CREATE INDEX IF NOT EXISTS relation_sources_chunk ON {schema}.relation_sources (chunk_id);
CREATE TABLE IF NOT EXISTS {schema}.relation_history (
    relation_id    bigint NOT NULL REFERENCES {schema}.relations (id),
    state          text   NOT NULL CHECK (state IN ('current', 'superseded')),
    superseded_by  bigint,
    superseded_via text,
    subject_id     bigint,
    object_id      bigint,
    weight         int,
    order_key      text,
    valid_from     text,
    valid_to       text,
    valid_from_d   date,
    valid_to_d     date,
    doc_keys       text[],
    expired        timestamptz,
    t_created      timestamptz NOT NULL,
    t_expired      timestamptz,
    PRIMARY KEY (relation_id, t_created)
);
CREATE INDEX IF NOT EXISTS relation_history_subject ON {schema}.relation_history (subject_id);
CREATE INDEX IF NOT EXISTS relation_history_object ON {schema}.relation_history (object_id);
CREATE UNIQUE INDEX IF NOT EXISTS relation_history_open ON {schema}.relation_history (relation_id)
    WHERE t_expired IS NULL;
CREATE INDEX IF NOT EXISTS relation_history_belief
    ON {schema}.relation_history (t_created, t_expired);
CREATE TABLE IF NOT EXISTS {schema}.document_history (
    space           text NOT NULL,
    doc_key         text NOT NULL,
    status          text NOT NULL,
    content_hash    text,
    source_version  text,
    order_key       text,
    title           text,
    chunk_count     int  NOT NULL,
    indexed_at      timestamptz NOT NULL,
    error           text,
    t_created       timestamptz NOT NULL,
    t_expired       timestamptz,
    PRIMARY KEY (space, doc_key, t_created)
);
CREATE TABLE IF NOT EXISTS {schema}.outbox (
    seq          bigint NOT NULL,
    idx          int    NOT NULL,
    kind         text   NOT NULL,
    space        text   NOT NULL,
    belief_time  timestamptz NOT NULL,
    payload      jsonb  NOT NULL,
    PRIMARY KEY (seq, idx)
);
CREATE INDEX IF NOT EXISTS outbox_belief ON {schema}.outbox (belief_time);
CREATE TABLE IF NOT EXISTS {schema}.extraction_cache (
    key         text PRIMARY KEY,
    output      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS {schema}.communities (
    id          bigserial PRIMARY KEY,
    space       text NOT NULL,
    level       int  NOT NULL DEFAULT 0,
    parent_id   bigint,
    title       text NOT NULL,
    summary     text NOT NULL,
    findings    jsonb NOT NULL DEFAULT '[]',
    rating      real NOT NULL DEFAULT 0,
    size        int  NOT NULL,
    built_at    timestamptz NOT NULL,
    t_created   timestamptz NOT NULL,
    t_expired   timestamptz,
    embedding   vector({dim}) NOT NULL
);
CREATE TABLE IF NOT EXISTS {schema}.community_members (
    community_id  bigint NOT NULL REFERENCES {schema}.communities (id) ON DELETE CASCADE,
    entity_id     bigint NOT NULL REFERENCES {schema}.entities (id),
    PRIMARY KEY (community_id, entity_id)
);
"""

_ATTRIBUTE_INDEXES = """
CREATE INDEX IF NOT EXISTS entity_sources_typed ON {schema}.entity_sources (entity_id, type)
    WHERE type IS NOT NULL;
CREATE INDEX IF NOT EXISTS entity_sources_described ON {schema}.entity_sources (entity_id)
    WHERE description <> '';
"""

_ENTITY_BELIEF = (
    """
CREATE TABLE IF NOT EXISTS {schema}.entity_sources (
    entity_id    bigint NOT NULL REFERENCES {schema}.entities (id),
    chunk_id     bigint NOT NULL REFERENCES {schema}.chunks (id),
    type         text,
    description  text   NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS entity_sources_entity ON {schema}.entity_sources (entity_id);
CREATE INDEX IF NOT EXISTS entity_sources_chunk ON {schema}.entity_sources (chunk_id);
CREATE TABLE IF NOT EXISTS {schema}.entity_history (
    entity_id    bigint NOT NULL,
    name         text   NOT NULL,
    type         text   NOT NULL,
    description  text   NOT NULL,
    aliases      text[] NOT NULL,
    space        text,
    name_key     text,
    alias_keys   text[],
    dormant_since  timestamptz,
    archived_since timestamptz,
    t_created    timestamptz NOT NULL,
    t_expired    timestamptz,
    PRIMARY KEY (entity_id, t_created)
);
CREATE INDEX IF NOT EXISTS entity_history_name ON {schema}.entity_history (name_key);
CREATE UNIQUE INDEX IF NOT EXISTS entity_history_open ON {schema}.entity_history (entity_id)
    WHERE t_expired IS NULL;
"""
    + _ATTRIBUTE_INDEXES
)


ATTRIBUTE_INDEXES: tuple[str, ...] = ("entity_sources_typed", "entity_sources_described")
"""What every write reads to derive its touched entities' attributes: the distinct types
(an index-only scan) and the contributions that carry a description. Without them the
derivation visited every contribution row of every touched entity, one heap page each: a
named entity gains a row per chunk naming it, so the cost per write grew with the realm
(the statement took 24 ms for the 50 entities of a 9 KB document at 1,250 documents a
realm, 1.7 ms with them). A realm created before them gets them when opened
(:func:`tidegraph.store.upgrades.add_attribute_indexes`)."""


def attribute_index_ddl(schema: str) -> sql.Composed:
    """The attribute derivation's indexes alone (idempotent)."""
    return sql.SQL(_ATTRIBUTE_INDEXES).format(schema=sql.Identifier(schema))


ENTITY_BELIEF_TABLES: tuple[str, ...] = ("entity_sources", "entity_history")
"""What live chunks say each entity is, and the belief intervals of every entity's
attributes; a realm created before them gets them when opened
(:func:`tidegraph.store.upgrades.add_entity_belief`)."""


def entity_belief_ddl(schema: str) -> sql.Composed:
    """The entity sources and attribute history tables alone (idempotent)."""
    return sql.SQL(_ENTITY_BELIEF).format(schema=sql.Identifier(schema))


_BELIEF_HISTORY = """
ALTER TABLE {schema}.entities ADD COLUMN IF NOT EXISTS merged_into bigint;
ALTER TABLE {schema}.relations ADD COLUMN IF NOT EXISTS doc_keys text[] NOT NULL DEFAULT '{{}}';
UPDATE {schema}.relations r SET doc_keys = ARRAY(SELECT DISTINCT s.doc_key
    FROM {schema}.relation_sources s WHERE s.relation_id = r.id ORDER BY 1);
ALTER TABLE {schema}.relation_history
    ADD COLUMN IF NOT EXISTS subject_id bigint, ADD COLUMN IF NOT EXISTS object_id bigint,
    ADD COLUMN IF NOT EXISTS weight int, ADD COLUMN IF NOT EXISTS order_key text,
    ADD COLUMN IF NOT EXISTS valid_from text, ADD COLUMN IF NOT EXISTS valid_to text,
    ADD COLUMN IF NOT EXISTS valid_from_d date, ADD COLUMN IF NOT EXISTS valid_to_d date,
    ADD COLUMN IF NOT EXISTS doc_keys text[], ADD COLUMN IF NOT EXISTS expired timestamptz;
UPDATE {schema}.relation_history h SET subject_id = r.subject_id, object_id = r.object_id,
    weight = r.weight, order_key = r.order_key, valid_from = r.valid_from,
    valid_to = r.valid_to, valid_from_d = r.valid_from_d, valid_to_d = r.valid_to_d,
    doc_keys = r.doc_keys,
    expired = CASE WHEN h.state = 'current' THEN NULL ELSE h.t_created END
    FROM {schema}.relations r WHERE r.id = h.relation_id;
CREATE INDEX IF NOT EXISTS relation_history_subject ON {schema}.relation_history (subject_id);
CREATE INDEX IF NOT EXISTS relation_history_object ON {schema}.relation_history (object_id);
ALTER TABLE {schema}.mentions
    ADD COLUMN IF NOT EXISTS t_created timestamptz, ADD COLUMN IF NOT EXISTS t_expired timestamptz;
UPDATE {schema}.mentions m SET t_created = c.t_created FROM {schema}.chunks c
    WHERE c.id = m.chunk_id AND m.t_created IS NULL;
ALTER TABLE {schema}.mentions ALTER COLUMN t_created SET NOT NULL;
ALTER TABLE {schema}.mentions DROP CONSTRAINT IF EXISTS mentions_pkey;
ALTER TABLE {schema}.mentions DROP CONSTRAINT IF EXISTS mentions_entity_id_fkey;
ALTER TABLE {schema}.mentions ADD PRIMARY KEY (chunk_id, entity_id, t_created);
CREATE INDEX IF NOT EXISTS mentions_live ON {schema}.mentions (entity_id)
    WHERE t_expired IS NULL;
ALTER TABLE {schema}.entity_history
    ADD COLUMN IF NOT EXISTS space text, ADD COLUMN IF NOT EXISTS name_key text,
    ADD COLUMN IF NOT EXISTS alias_keys text[],
    ADD COLUMN IF NOT EXISTS dormant_since timestamptz,
    ADD COLUMN IF NOT EXISTS archived_since timestamptz;
UPDATE {schema}.entity_history h SET space = e.space, name_key = e.name_key,
    alias_keys = ARRAY(SELECT a.alias_lower FROM {schema}.entity_aliases a
        WHERE a.entity_id = e.id ORDER BY 1),
    dormant_since = e.dormant_since, archived_since = e.archived_since
    FROM {schema}.entities e WHERE e.id = h.entity_id;
CREATE INDEX IF NOT EXISTS entity_history_name ON {schema}.entity_history (name_key);
ALTER TABLE {schema}.communities
    ADD COLUMN IF NOT EXISTS t_created timestamptz, ADD COLUMN IF NOT EXISTS t_expired timestamptz;
UPDATE {schema}.communities SET t_created = built_at WHERE t_created IS NULL;
ALTER TABLE {schema}.communities ALTER COLUMN t_created SET NOT NULL;
CREATE TABLE IF NOT EXISTS {schema}.document_history (
    space           text NOT NULL,
    doc_key         text NOT NULL,
    status          text NOT NULL,
    content_hash    text,
    source_version  text,
    order_key       text,
    title           text,
    chunk_count     int  NOT NULL,
    indexed_at      timestamptz NOT NULL,
    error           text,
    t_created       timestamptz NOT NULL,
    t_expired       timestamptz,
    PRIMARY KEY (space, doc_key, t_created)
);
INSERT INTO {schema}.document_history (space, doc_key, status, content_hash, source_version,
    order_key, title, chunk_count, indexed_at, error, t_created)
    SELECT space, doc_key, status, content_hash, source_version, order_key, title,
    chunk_count, indexed_at, error, indexed_at FROM {schema}.documents
    ON CONFLICT DO NOTHING;
"""


def belief_history_ddl(schema: str) -> sql.Composed:
    """Everything a realm keeps so a read ``as_believed_at`` answers exactly what it
    answered then, for a realm created before: each relation's reported attributes per
    belief interval, mentions and community builds with belief intervals, and document
    versions' history; seeded from what the realm holds now (what earlier instants held
    was not recorded: a replay rebuilds it exactly)."""
    return sql.SQL(_BELIEF_HISTORY).format(schema=sql.Identifier(schema))


_CONTRADICTION_ANSWERS = """
CREATE TABLE IF NOT EXISTS {schema}.contradiction_answers (
    key             text PRIMARY KEY,
    first_text      text NOT NULL,
    second_text     text NOT NULL,
    prompt_version  text NOT NULL,
    contradicts     boolean NOT NULL,
    model           text NOT NULL,
    answered_at     timestamptz NOT NULL DEFAULT now()
);
"""


def contradiction_answers_ddl(schema: str) -> sql.Composed:
    """The model's cached answers about the residue: whether two rendered relations
    contradict each other, keyed by both texts and the prompt version (idempotent)."""
    return sql.SQL(_CONTRADICTION_ANSWERS).format(schema=sql.Identifier(schema))


_REALM = _REALM_TABLES + _POSITIONS + _ENTITY_BELIEF + _TELEMETRY + _CONTRADICTION_ANSWERS

_NAME_SEARCH_INDEXES = """
CREATE INDEX IF NOT EXISTS entities_name_words ON {schema}.entities
    USING gin (to_tsvector('simple', name_key));
CREATE INDEX IF NOT EXISTS entity_aliases_words ON {schema}.entity_aliases
    USING gin (to_tsvector('simple', alias_lower));
"""

_SEARCH_INDEXES = (
    """
CREATE INDEX IF NOT EXISTS relations_tsv ON {schema}.relations USING gin (tsv);
"""
    + _NAME_SEARCH_INDEXES
)

HNSW_OPTIONS: dict[str, tuple[int, int]] = {
    "chunks": (16, 64),
    "entities": (16, 128),
    "relations": (8, 64),
    "communities": (16, 64),
}
"""``(m, ef_construction)`` of each table's HNSW index (``<table>_embedding``, cosine).

pgvector's defaults are (16, 64). Entities get a wider candidate list at build time: they
reach a given recall at a smaller ``hnsw.ef_search``, which every query pays, and an entity
is inserted rarely (about one per document). Relations get a sparser graph and a narrower
build list: a document adds dozens, every one an insertion into this graph inside the write
transaction, which made it the largest part of the database's work per document written
(at (16, 64) 36 of 58 ms of the database's CPU per 9 KB document); m = 8 halves it, and
the query service's relation ``ef_search`` of 400 keeps recall@10 on the clustered
vectors at 0.998 (a build list of 32 would save another 5 ms but lost recall: 0.962).
Hashing vectors pay for it: their relation recall@10 at 10,000 entities falls from 0.950 to
0.895 at that ``ef_search``, so the query service searches a hashing realm's relations at
1000 (0.972) (README, "Indexer throughput").

A realm's indexes are built with the options in force when it was created (or last
rebuilt: :func:`tidegraph.store.upgrades.rebuild_vector_index`); changing them here changes
new realms and replays, and :func:`tidegraph.store.upgrades.vector_indexes_outdated` names
the indexes of an existing realm that differ."""


def vector_index_ddl(
    schema: str, table: str, *, name: str | None = None, concurrently: bool = False
) -> sql.Composed:
    """``CREATE INDEX`` of ``table``'s HNSW index with its :data:`HNSW_OPTIONS` (idempotent
    by name; ``name`` builds it under another one and ``concurrently`` without blocking
    writes, for a rebuild beside the old)."""
    m, ef_construction = HNSW_OPTIONS[table]
    return sql.SQL(
        "CREATE INDEX {how}IF NOT EXISTS {name} ON {table}"
        " USING hnsw (embedding vector_cosine_ops) WITH (m = {m}, ef_construction = {efc})"
    ).format(
        how=sql.SQL("CONCURRENTLY " if concurrently else ""),
        name=sql.Identifier(name or f"{table}_embedding"),
        table=sql.Identifier(schema, table),
        m=sql.Literal(m),
        efc=sql.Literal(ef_construction),
    )


NAME_SEARCH_INDEXES: tuple[str, ...] = ("entities_name_words", "entity_aliases_words")
"""Word-prefix indexes of entity names and aliases (the ``entities?name=`` lookup); a realm
created before them gets them on its next lookup (:mod:`tidegraph.store.upgrades`)."""


def name_search_ddl(schema: str) -> sql.Composed:
    """The word-prefix indexes of names and aliases alone (idempotent)."""
    return sql.SQL(_NAME_SEARCH_INDEXES).format(schema=sql.Identifier(schema))


POSITIONS_AHEAD_DDL = sql.SQL(
    "ALTER TABLE tidegraph.consumer_positions ADD COLUMN IF NOT EXISTS ahead jsonb"
    " NOT NULL DEFAULT '{}'"
)
"""Per-realm positions for a control schema created before them."""

CATALOGUE_SERVER_DDL = sql.SQL(
    "ALTER TABLE tidegraph.realms ADD COLUMN IF NOT EXISTS server text NOT NULL DEFAULT 'main'"
)
"""Which server holds each realm, for a catalogue created before realms had a server (all
of its realms are on ``main``, the catalogue's own server)."""


def control_ddl() -> sql.SQL:
    """Statements creating the control schema (realms, consumer and publisher positions)."""
    return sql.SQL(_CONTROL)


def _compose(template: LiteralString, schema: str, dimension: int) -> sql.Composed:
    if not 1 <= dimension <= 16000:
        raise ValueError(f"embedding dimension {dimension} outside 1..16000")
    return sql.SQL(template).format(schema=sql.Identifier(schema), dim=sql.Literal(dimension))


def realm_ddl(schema: str, dimension: int) -> sql.Composed:
    """Statements creating one realm's tables (idempotent), without search indexes."""
    return _compose(_REALM, schema, dimension)


def search_index_ddl(schema: str, dimension: int) -> sql.Composed:
    """Indexes only queries read (HNSW, full text): separate so a bulk load (replay)
    builds them once after loading instead of maintaining them row by row."""
    return sql.Composed(
        [
            _compose(_SEARCH_INDEXES, schema, dimension),
            *(vector_index_ddl(schema, t) + sql.SQL(";\n") for t in HNSW_OPTIONS),
        ]
    )


FOREIGN_KEYS: tuple[tuple[str, str, str, bool], ...] = (
    ("entity_aliases", "entity_id", "entities", False),
    ("mentions", "chunk_id", "chunks", False),
    ("relations", "subject_id", "entities", False),
    ("relations", "object_id", "entities", False),
    ("relation_sources", "relation_id", "relations", False),
    ("relation_sources", "chunk_id", "chunks", False),
    ("relation_history", "relation_id", "relations", False),
    ("entity_sources", "entity_id", "entities", False),
    ("entity_sources", "chunk_id", "chunks", False),
    ("community_members", "community_id", "communities", True),
    ("community_members", "entity_id", "entities", False),
)
"""(table, column, referenced table, on delete cascade) of every foreign key the realm's
tables declare, under PostgreSQL's default names (``<table>_<column>_fkey``). A mention
refers to its entity without a key: its belief interval outlives an entity merged away and
deleted, whose mentions read ``as_believed_at`` an earlier instant still find."""


def _foreign_key_name(table: str, column: str) -> str:
    return f"{table}_{column}_fkey"


def drop_foreign_keys_ddl(schema: str) -> sql.Composed:
    """Drop the realm's foreign keys: a bulk load checks them once afterwards
    (:func:`foreign_keys_ddl`) instead of with a lookup per written row."""
    return sql.SQL("").join(
        sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {};\n").format(
            sql.Identifier(schema, table), sql.Identifier(_foreign_key_name(table, column))
        )
        for table, column, _, _ in FOREIGN_KEYS
    )


def foreign_keys_ddl(schema: str) -> sql.Composed:
    """Add (and so validate) the realm's foreign keys, as the table definitions declare
    them; for a schema whose keys :func:`drop_foreign_keys_ddl` dropped."""
    return sql.SQL("").join(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} (id){};\n").format(
            sql.Identifier(schema, table),
            sql.Identifier(_foreign_key_name(table, column)),
            sql.Identifier(column),
            sql.Identifier(schema, target),
            sql.SQL(" ON DELETE CASCADE" if cascade else ""),
        )
        for table, column, target, cascade in FOREIGN_KEYS
    )
