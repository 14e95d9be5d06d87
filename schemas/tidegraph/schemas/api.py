"""Request and response bodies of the HTTP API, as the OpenAPI document describes them.

They live in ``schemas`` (no I/O, no web framework) because two sides use them: the query
service documents and validates with them, and :mod:`tidegraph.client` returns them.

Requests are validated here (unknown fields refused, unknown ``mode`` a 422, no NUL
characters anywhere since PostgreSQL text cannot hold them); limits that depend on the
service configuration (``top_k``, ``hops``, query length) are checked by the query service
against its settings. Responses are these models as they are: retrieval builds them, the
service serialises them and the client returns them. An entity, relation or community
report has one set of fields wherever it appears (``EntityFields`` …); each view adds what
it knows of it (a retrieval score, a retention state, a place in the topic tree).
"""

# Long on purpose: every body of the HTTP API in one place, so the contract reads as one document;
# the shared field sets keep one shape per object.
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
)

from tidegraph.schemas.changes import GraphChange
from tidegraph.schemas.names import validate_space
from tidegraph.schemas.periods import BELIEF_INSTANT_FORMS, belief_instant, covered

MIN_SEQUENCE_HEADER = "X-Tidegraph-Min-Sequence"
"""Request header: the realm commit sequence the answer must reflect (read-your-writes);
the query parameter ``min_seq`` says the same."""
MIN_SEQUENCE_PARAMETER = "min_seq"
"""Query parameter of every realm read: the same as ``X-Tidegraph-Min-Sequence``."""
HEAD_SEQUENCE_HEADER = "X-Tidegraph-Head-Sequence"
"""Response header of every realm read: the realm's head sequence where the read ran (the
answer reflects at least that commit), the ``head_seq`` the contract names."""
SERVED_BY_HEADER = "X-Tidegraph-Served-By"
"""Response header of every realm read: the node that answered (``server`` for a primary,
``server/standby`` for a standby)."""

BELIEVED_AT_DOC = f"Belief time: the graph as believed then. Takes {BELIEF_INSTANT_FORMS}."

ENTITIES_BELIEVED_AT_DOC = (
    "Belief time: the entities that existed then (live then unless "
    "`include_dormant`/`include_archived`), with the name, type, description and aliases "
    "believed then. A `name` lookup still matches today's names and aliases. Takes "
    f"{BELIEF_INSTANT_FORMS}."
)

BeliefInstant = Annotated[
    datetime,
    BeforeValidator(belief_instant),
    WithJsonSchema(
        {
            "type": "string",
            "description": f"A belief-time instant: {BELIEF_INSTANT_FORMS}.",
            "examples": ["1842", "1842-06-30", "2026-12-06T05:19:35.376Z"],
        }
    ),
]
"""An ``as_believed_at`` value as every surface takes it (:func:`belief_instant`): after
validation always a timezone-aware instant in UTC."""

AS_OF_DOC = (
    "Valid time: `YYYY`, `YYYY-MM` or `YYYY-MM-DD`, as relations' `valid_from` holds them;"
    " relations whose period overlaps the year, month or day match, undated ones always."
)

RERANK_SCORE_DOC = (
    "Relevance the rerank endpoint gave it (higher is more relevant, on the model's own "
    "scale); null when the answer was not reranked."
)

Mode = Literal["mix", "local", "global", "hybrid", "naive", "bypass"]


def no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


class QueryDataRequest(BaseModel):
    """``POST /v1/realms/{realm}/query_data``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: str = Field(min_length=1, max_length=20000, description="The question.")
    mode: Mode = Field("mix", description="Retrieval mode (paper Table 3); others are a 422.")
    space: str = Field("default", description="A space, or `*` to read every space.")
    top_k: int = Field(
        10,
        ge=1,
        le=1000,
        description="Entities, chunks and community reports returned; also widens the "
        "relations returned when `relation_top_k` is not given.",
    )
    relation_top_k: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Relations returned (after fusion and de-duplication). Not given: "
        "the larger of 25 and `top_k`, so asking for more entities also returns more "
        "relations. Relations incident to an entity the question names, whose predicate "
        'the question asks about ("What did X design?" → X\'s `designed` relations, '
        "X as subject), come first.",
    )
    hops: int = Field(2, ge=0, le=10, description="Traversal depth from matched entities.")
    as_of: str | None = Field(None, description=AS_OF_DOC)
    as_believed_at: BeliefInstant | None = Field(
        None,
        description="Belief time: the graph as believed then, entities with the name, type, "
        f"description and aliases believed then. Takes {BELIEF_INSTANT_FORMS}.",
    )
    include_superseded: bool = Field(False, description="Admit superseded relations.")
    relation_types: list[str] | None = Field(
        None, max_length=64, description="Admitted predicates (walk, similarity, full-text)."
    )
    fusion: Literal["rrf", "quota"] = Field("rrf", description="How relation channels merge.")
    similarity_share: float = Field(
        0.5, ge=0.0, le=1.0, description="Quota fusion: the similarity channel's share."
    )
    mmr: bool = Field(
        False,
        description="Maximal marginal relevance over the fused relations (paper §7.4): each "
        "next relation maximises `mmr_lambda`·relevance − (1 − `mmr_lambda`)·(its largest "
        "embedding cosine to the relations already placed), relevance falling linearly with "
        "the fused rank, so a restatement of a fact already placed (by another channel, in "
        "other words or the other direction) gives its slot to a new fact. Applied within "
        "the predicate-focus groups, which keep leading; an evidence chain keeps its path "
        "order. Off by default.",
    )
    mmr_lambda: float = Field(
        0.7,
        ge=0.0,
        le=1.0,
        description="MMR trade-off: 1 keeps the fused order, lower values diversify more.",
    )
    node_distance: bool = Field(
        False,
        description="Rank the fused relations by their true graph distance from the matched "
        "entities (paper §7.4), nearer first, the fused order breaking ties: a breadth-first "
        "search of at most `hops` hops (at least 1) from the matched entities over the edges "
        "this request admits (space, `as_of`, `as_believed_at`, `include_superseded`, "
        "`relation_types`). An edge on a matched entity is at distance 1; relations not "
        "reached within the bound go last with `hop` null. Each relation's `hop` then is "
        "that distance. Applied within the predicate-focus groups; an evidence chain "
        "keeps its path order. Off by default.",
    )
    decompose: bool = Field(
        False,
        description="Query decomposition for multi-event questions (paper §8.5; off by "
        "default, as the paper measured it costing accuracy on single-event questions): the "
        "question is split lexically into sub-questions (at `?` or `;` followed by more "
        "text, at `and`/`but`/`or`/a comma opening a new question such as `and when did …`, "
        "at `before`/`after` followed by a capitalised name; at most 4), each retrieved on "
        "its own, and entities, relations, passages and reports merged by reciprocal rank "
        "(entities named in any part first). `stats.decomposition` lists the parts; a "
        "question with one part is retrieved as usual.",
    )
    max_relation_edges: int | None = Field(
        None,
        ge=1,
        le=1000,
        description="Most relations any single matched entity contributes to the walk "
        "(paper §7.2), so a hub cannot fill the traversal channel; at most the service's "
        "`max_relation_edges`. Not given: the service's `edge_cap` (40).",
    )
    rerank: bool | None = Field(
        None,
        description="Reorder the passages and relations returned with the service's rerank "
        "endpoint (`TIDEGRAPH_RERANK_URL`), before any prompt budget applies; relations "
        "the predicate focus found keep leading. Null: whenever the service has one; true "
        "without one is a 503. A failing endpoint leaves the retrieval order, with a "
        "`stats.warnings` entry.",
    )

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return no_nul(value)

    @field_validator("as_of")
    @classmethod
    def _as_of(cls, value: str | None) -> str | None:
        return valid_as_of(value)

    @field_validator("space")
    @classmethod
    def _space(cls, value: str) -> str:
        return validate_space(value, allow_wildcard=True)

    @field_validator("relation_types")
    @classmethod
    def _types(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        out = []
        for p in value:
            norm = no_nul(p).strip().lower().replace(" ", "_")
            if not 1 <= len(norm) <= 128:
                raise ValueError("each relation type must have 1 to 128 characters")
            out.append(norm)
        return out


class TokenBudgets(BaseModel):
    """Token budgets per prompt block; a block not named has none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    communities: int | None = Field(None, ge=0, le=10_000_000, description="Community reports.")
    passages: int | None = Field(None, ge=0, le=10_000_000, description="Passages.")
    entities: int | None = Field(None, ge=0, le=10_000_000, description="Entity lines.")
    relations: int | None = Field(None, ge=0, le=10_000_000, description="Relation lines.")


class QueryRequest(QueryDataRequest):
    """``POST /v1/realms/{realm}/query``: retrieval plus synthesis."""

    max_prompt_chars: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Evidence character budget; passages over it are clipped, never dropped.",
    )
    token_budgets: TokenBudgets | None = Field(
        None,
        description="Per-block token budgets (paper §8.3), none by default. Tokens are "
        "estimated as characters / 4. A budgeted block keeps its best-ranked items whole "
        "while they fit; the first passage or report that does not fit is clipped to the "
        "rest when at least 80 characters remain, later items are left out (entity and "
        "relation lines are kept whole or left out). Left-out passages get no reference "
        "number. `prompt.blocks` reports what each block kept; `max_prompt_chars` applies "
        "after these budgets.",
    )


class EntityFields(BaseModel):
    """An entity as every answer shows it; each view adds what it knows of it."""

    id: str
    space: str
    name: str
    type: str
    description: str
    aliases: list[str]


class EntityOut(EntityFields):
    """An entity a retrieval matched."""

    matched: str = Field(description="`name` (named in the question) or `vector`.")
    score: float


class RelationFields(BaseModel):
    """A relation as every answer shows it; each view adds what it knows of it."""

    id: str
    space: str
    subject: str
    predicate: str
    object: str
    negated: bool
    valid_from: str | None
    valid_to: str | None
    t_created: datetime
    t_expired: datetime | None
    status: str = Field(
        description="Belief state in the view read: `current`, `superseded` or `retracted`."
    )
    superseded_by: str | None
    superseded_via: str | None = Field(
        None,
        description="How the relation was superseded, when it is: `negation` (a later "
        "statement of the same predicate on the same pair with the opposite negation), "
        "`exclusive_group` (a later predicate of one of the realm's exclusive groups on the "
        "same pair), `functional` (a later value of a predicate the realm declares "
        "functional: another object for the same subject, or another subject for the same "
        "object) or `model` (a later object for the same subject and predicate that the "
        "model said contradicts it). Null for a current relation, and for one superseded "
        "before realms recorded it.",
    )
    weight: int
    doc_keys: list[str]


class RelationOut(RelationFields):
    """A relation a retrieval found, with how it was found."""

    hop: int | None = Field(
        description="Hops from the nearest matched entity; null when the walk did not reach it."
    )
    channels: list[str]
    score: float
    order_key: str | None = Field(
        None,
        description="Document order (`order_key`: publication date, fiscal year …) of the "
        "latest live document asserting the relation; the synthesis prompt shows it as "
        "`[stated …]` and resolves conflicting statements to the most recent one.",
    )
    rerank_score: float | None = Field(None, description=RERANK_SCORE_DOC)
    path: list[str] | None = Field(
        None,
        description="For a relation reached beyond the first hop, the chain that reached "
        "it: the ids of the relations on the path from a matched entity, this one last — "
        "the evidence chain from an entity the question names when the relation was "
        "ranked as one, else the walk's path. Every id in it is a relation of the same "
        "answer, listed before this one, and every relation on it was admitted by the "
        "request's filters (space, `as_of`, `as_believed_at`, `include_superseded`, "
        "`relation_types`). Null for a relation on a matched entity and for one the walk "
        "did not reach.",
    )


class ChunkOut(BaseModel):
    """A passage a retrieval found."""

    id: str
    space: str
    doc_key: str
    ordinal: int
    text: str
    citation: str
    channels: list[str]
    score: float
    order_key: str | None = Field(
        None, description="The `order_key` of the passage's document (current version)."
    )
    rerank_score: float | None = Field(None, description=RERANK_SCORE_DOC)


class CommunityFields(BaseModel):
    """A community report as every answer shows it; each view adds what it knows of it."""

    id: str
    space: str
    level: int = Field(
        description="Level in the topic tree (paper §6.1): 0 the finest communities, each "
        "higher level grouping those below it."
    )
    title: str
    summary: str
    rating: float
    size: int = Field(description="Member entities.")
    built_at: datetime


class CommunityOut(CommunityFields):
    """A community report a retrieval ranked."""

    findings: list[str] = Field(
        description="The report's findings, one statement each (denials stated as denials)."
    )
    score: float


class QueryDataResponse(BaseModel):
    entities: list[EntityOut]
    relations: list[RelationOut]
    chunks: list[ChunkOut]
    communities: list[CommunityOut]
    stats: dict[str, Any]


class ReferenceOut(BaseModel):
    n: int
    doc_key: str
    chunk_id: str
    citation: str


class BlockStatsOut(BaseModel):
    retrieved_items: int = Field(description="Items retrieval returned for the block.")
    retrieved_chars: int = Field(description="Their characters as rendered for the prompt.")
    prompt_items: int = Field(description="Items that reached the prompt, whole or clipped.")
    prompt_chars: int = Field(description="Their characters in the prompt.")
    token_budget: int | None = Field(description="The block's token budget; null: none.")


class PromptStats(BaseModel):
    retrieved_chars: int = Field(description="Evidence characters retrieved, all blocks.")
    prompt_chars: int = Field(description="Evidence characters that reached the prompt.")
    clipped: int = Field(description="Passages and reports clipped to meet the budgets.")
    budget: int | None = Field(description="`max_prompt_chars` as given.")
    blocks: dict[str, BlockStatsOut] = Field(
        description="Per block — `communities`, `passages`, `entities`, `relations` — items "
        "and characters retrieved against reaching the prompt (paper §8.3); also exported "
        "as the histograms `tidegraph_context_items` and `tidegraph_context_chars` labelled "
        "by block and stage (`retrieved`, `prompt`)."
    )


class QueryResponse(BaseModel):
    answer: str
    references: list[ReferenceOut]
    prompt: PromptStats
    data: QueryDataResponse


class ChangesResponse(BaseModel):
    changes: list[GraphChange] = Field(description="`GraphChange` objects (change.v1).")
    next_seq: int = Field(description="Pass as `after_seq` to read on.")
    head_seq: int = Field(description="The realm's latest commit sequence at the read.")


class DocumentResponse(BaseModel):
    doc_key: str
    space: str
    status: Literal["indexed", "deleted", "failed"]
    content_hash: str | None = Field(
        description="Hash of the applied version: the content hash of the record, or for a"
        " record carrying `facts` a `sha256:` hash over its content hash and its facts (what"
        " decides that a re-sent record is unchanged)."
    )
    source_version: str | None
    order_key: str | None
    chunks: int
    indexed_at: datetime
    error: str | None = Field(
        description="Why the version failed; for an indexed version carrying `facts`, which"
        " of them the validation gates or the realm's vocabulary refused (`refused facts:"
        " …`), else null."
    )
    title: str | None


class RelationListed(RelationFields):
    """A relation as the relation list shows it."""


class RelationsResponse(BaseModel):
    relations: list[RelationListed]
    next_after_id: str | None = Field(
        description="The id of the page's last item (ids are strings): pass it as `after_id` "
        "for the next page; null on the last page."
    )


class BeliefInterval(BaseModel):
    state: Literal["current", "superseded"] = Field(description="What the relation was then.")
    superseded_by: str | None = Field(description="The relation superseding it, if it was.")
    superseded_via: str | None = Field(description="How (see `superseded_via` on relations).")
    t_created: datetime = Field(description="Believed from this instant …")
    t_expired: datetime | None = Field(description="… until this one; null: still believed.")


class RelationHeader(BaseModel):
    id: str
    space: str
    subject: str
    predicate: str
    object: str
    negated: bool
    valid_from: str | None
    valid_to: str | None
    status: Literal["current", "superseded", "retracted"] = Field(
        description="Its state now (`retracted`: no live document asserts it)."
    )
    superseded_by: str | None
    superseded_via: str | None
    t_created: datetime
    t_expired: datetime | None


class RelationHistoryResponse(BaseModel):
    """``GET /v1/realms/{realm}/relations/{id}/history``."""

    relation: RelationHeader
    history: list[BeliefInterval] = Field(
        description="Its belief intervals, oldest first; a gap between two is a time it was "
        "not believed at all (retracted, then asserted again)."
    )


class EntityListed(EntityFields):
    """An entity as the entity list shows it: with its retention state."""

    dormant_since: datetime | None
    archived_since: datetime | None = Field(
        None,
        description="Since when retention archived it (withheld from retrieval and "
        "communities, preserved, reversible with `tidegraph unarchive`); null: not archived.",
    )


class EntitiesResponse(BaseModel):
    entities: list[EntityListed] = Field(
        description="By id; for a `name` lookup, ranked: exact name or alias, then names "
        "and aliases beginning with it, then those with words beginning with its words."
    )
    next_after_id: str | None = Field(
        description="The id of the page's last entity (ids are strings): pass it as `after_id` "
        "for the next page; null on the last page and always for a `name` lookup."
    )


class CommunityListed(CommunityFields):
    """A community as the topic tree lists it: with its place in the tree."""

    parent_id: str | None = Field(
        description="The community one level up that contains this one; null for a root "
        "(the top level, or one whose parent's report failed at build)."
    )
    children: list[str] = Field(
        description="Ids of the communities one level down that this one contains, by id."
    )


class CommunitiesResponse(BaseModel):
    communities: list[CommunityListed] = Field(
        description="The topic tree of the last community build, by id; every item names "
        "its parent and all its children, so containment is complete on any page."
    )
    levels: list[int] = Field(description="Levels present in the space filter, ascending.")
    built_at: datetime | None = Field(description="When the last build ran; null: never.")
    stale: bool = Field(description="The graph has changed since the last build.")
    next_after_id: str | None = Field(
        description="The id of the page's last item (ids are strings): pass it as `after_id` "
        "for the next page; null on the last page."
    )


class CoverageCommunity(BaseModel):
    id: str
    space: str
    level: int
    title: str
    size: int
    retrievals: int = Field(description="Recorded queries that reported it since its build.")
    last_retrieved_at: datetime | None = Field(description="The latest of them; null: none.")


class CoverageCommunitiesResponse(BaseModel):
    communities: list[CoverageCommunity] = Field(
        description="Current communities, fewest recorded retrievals first (never retrieved "
        "first among equals, then the longest unretrieved), then by id. A rebuild gives "
        "communities new ids: counts restart with it."
    )
    since: datetime | None = Field(description="First recorded query; null: none yet.")


class CoverageEntity(BaseModel):
    id: str
    space: str
    name: str
    type: str


class CoverageEntitiesResponse(BaseModel):
    entities: list[CoverageEntity] = Field(
        description="Live entities no recorded query touched (neither reported nor an end "
        "of a reported relation), by id."
    )
    since: datetime | None = Field(description="First recorded query; null: none yet.")
    next_after_id: str | None = Field(
        description="The id of the page's last item (ids are strings): pass it as `after_id` "
        "for the next page; null on the last page."
    )


class RealmSummary(BaseModel):
    realm: str = Field(description="Realm name.")
    embedder: str = Field(description="The realm's pinned embedder (`hashing:<dim>` or `llm:…`).")
    documents: int = Field(description="Documents whose status is `indexed`.")
    entities: int = Field(description="Live (not dormant) entities, every space.")
    relations: int = Field(description="Current relations, every space.")
    head_seq: int = Field(
        description="The realm's latest commit sequence: `after_seq` for the change feed."
    )


class RealmsResponse(BaseModel):
    """``GET /v1/realms``: the realms the caller's key may read, by name."""

    realms: list[RealmSummary]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    """Every error answer: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


def valid_as_of(value: str | None) -> str | None:
    """``value`` when it is a year, a year-month or a date that exists, else ValueError
    saying what is accepted."""
    if value is None:
        return None
    try:
        covered(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a year, year-month or date (YYYY, YYYY-MM, YYYY-MM-DD)"
        ) from None
    return value


AsOf = Annotated[str | None, AfterValidator(valid_as_of)]
"""An ``as_of`` value as every surface takes it (:func:`valid_as_of`)."""
