"""Request and response bodies of the HTTP API, as the OpenAPI document describes them.

Requests are validated here (unknown fields refused, unknown ``mode`` a 422, no NUL
characters anywhere since PostgreSQL text cannot hold them); limits that depend on the
service configuration (``top_k``, ``hops``, query length) are checked by the app against
:class:`~tidegraph.query_service.config.QuerySettings`. Responses are serialised straight
from the retrieval values; these models document their shape.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from tidegraph.schemas.names import validate_space
from tidegraph.schemas.periods import covered

AS_OF_DOC = (
    "Valid time: `YYYY`, `YYYY-MM` or `YYYY-MM-DD`, as relations' `valid_from` holds them;"
    " relations whose period overlaps the year, month or day match, undated ones always."
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
    top_k: int = Field(10, ge=1, le=1000, description="Entities, chunks and reports returned.")
    relation_top_k: int = Field(25, ge=1, le=1000, description="Relations returned.")
    hops: int = Field(2, ge=0, le=10, description="Traversal depth from matched entities.")
    as_of: str | None = Field(None, description=AS_OF_DOC)
    as_believed_at: AwareDatetime | None = Field(
        None, description="Belief-time instant (with offset): the graph as believed then."
    )
    include_superseded: bool = Field(False, description="Admit superseded relations.")
    relation_types: list[str] | None = Field(
        None, max_length=64, description="Admitted predicates (walk, similarity, full-text)."
    )
    fusion: Literal["rrf", "quota"] = Field("rrf", description="How relation channels merge.")
    similarity_share: float = Field(
        0.5, ge=0.0, le=1.0, description="Quota fusion: the similarity channel's share."
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


class QueryRequest(QueryDataRequest):
    """``POST /v1/realms/{realm}/query``: retrieval plus synthesis."""

    max_prompt_chars: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Evidence character budget; passages over it are clipped, never dropped.",
    )


class EntityOut(BaseModel):
    id: str
    space: str
    name: str
    type: str
    description: str
    aliases: list[str]
    matched: str
    score: float


class RelationOut(BaseModel):
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
    superseded_by: str | None
    status: str
    weight: int
    hop: int | None
    channels: list[str]
    doc_keys: list[str]
    score: float


class ChunkOut(BaseModel):
    id: str
    space: str
    doc_key: str
    ordinal: int
    text: str
    citation: str
    channels: list[str]
    score: float


class CommunityOut(BaseModel):
    id: str
    space: str
    title: str
    summary: str
    findings: list[str]
    level: int
    rating: float
    size: int
    built_at: datetime
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


class PromptStats(BaseModel):
    retrieved_chars: int
    prompt_chars: int
    clipped: int
    budget: int | None


class QueryResponse(BaseModel):
    answer: str
    references: list[ReferenceOut]
    prompt: PromptStats
    data: QueryDataResponse


class ChangesResponse(BaseModel):
    changes: list[dict[str, Any]] = Field(description="`GraphChange` objects (change.v1).")
    next_seq: int
    head_seq: int


class DocumentResponse(BaseModel):
    doc_key: str
    space: str
    status: Literal["indexed", "deleted", "failed"]
    content_hash: str | None
    source_version: str | None
    order_key: str | None
    chunks: int
    indexed_at: datetime
    error: str | None
    title: str | None


class RelationListed(BaseModel):
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
    status: str
    superseded_by: str | None
    weight: int
    doc_keys: list[str]


class RelationsResponse(BaseModel):
    relations: list[RelationListed]
    next_after_id: int | None = Field(description="Pass as `after_id` for the next page.")


class EntityListed(BaseModel):
    id: str
    space: str
    name: str
    type: str
    description: str
    aliases: list[str]
    dormant_since: datetime | None


class EntitiesResponse(BaseModel):
    entities: list[EntityListed]
    next_after_id: int | None


class RealmListed(BaseModel):
    realm: str
    documents: dict[str, int] = Field(description="Document count by status.")
    entities: int = Field(description="Entities not dormant.")
    relations: int = Field(description="Relations current and believed now.")
    head_seq: int = Field(description="Latest commit sequence of the realm's change feed.")
    last_write_at: datetime | None
    embedder: str
    extractor: str


class RealmsResponse(BaseModel):
    realms: list[RealmListed] = Field(
        description="The realms the caller's key reaches (every realm when the service runs"
        " without keys), by name."
    )


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
