"""``GraphChange`` (``tidegraph.change.v1``): what the change feed tells downstream.

One change is one effect of one committed write to a realm's graph. Its id is
``realm:seq:index`` (commit sequence number, position inside the commit), so consumers can
deduplicate. Fields that do not apply to a kind are absent from the JSON; which ones a kind
needs is checked here (:data:`REQUIRED_BY_KIND`), so a producer cannot emit a
``relation_added`` without its relation. Inside ``relation``, ``valid_from``/``valid_to`` are
always written (``null`` means "no stated period", which is information, not absence).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tidegraph.schemas._validation import RecordValidationError, load_object, problems_from
from tidegraph.schemas.instants import Instant
from tidegraph.schemas.names import ANY_SPACE, DEFAULT_SPACE, REALM_PATTERN, SPACE_PATTERN

CHANGE_SCHEMA: Final = "tidegraph.change.v1"
CHANGE_ID_PATTERN = r"^[a-z][a-z0-9_]{0,39}:[0-9]+:[0-9]+$"


class ChangeKind(StrEnum):
    """What happened to the graph."""

    DOCUMENT_INDEXED = "document_indexed"
    DOCUMENT_REPLACED = "document_replaced"
    DOCUMENT_DELETED = "document_deleted"
    DOCUMENT_FAILED = "document_failed"
    ENTITY_ADDED = "entity_added"
    ENTITY_DORMANT = "entity_dormant"
    ENTITY_REVIVED = "entity_revived"
    ENTITY_UPDATED = "entity_updated"
    ENTITY_ARCHIVED = "entity_archived"
    ENTITY_UNARCHIVED = "entity_unarchived"
    RELATION_ADDED = "relation_added"
    RELATION_SUPERSEDED = "relation_superseded"
    RELATION_RETRACTED = "relation_retracted"
    RELATION_RESTORED = "relation_restored"
    COMMUNITIES_BUILT = "communities_built"
    COMMUNITIES_STALE = "communities_stale"
    REALM_DELETED = "realm_deleted"
    """The realm was deleted (`tidegraph realm delete`): drop every copy of it. Its ``seq``
    follows the realm's last commit; a realm created again under the name starts at 1."""


REQUIRED_BY_KIND: dict[ChangeKind, tuple[str, ...]] = {
    **{k: ("doc_key",) for k in ChangeKind if k.value.startswith("document_")},
    **{k: ("entity",) for k in ChangeKind if k.value.startswith("entity_")},
    **{k: ("relation",) for k in ChangeKind if k.value.startswith("relation_")},
    ChangeKind.RELATION_SUPERSEDED: ("relation", "superseded_by"),
    ChangeKind.COMMUNITIES_BUILT: (),
    ChangeKind.COMMUNITIES_STALE: (),
    ChangeKind.REALM_DELETED: (),
}
"""Fields a change of each kind must carry."""


def change_id(realm: str, seq: int, index: int) -> str:
    """The deterministic id of the ``index``-th change of commit ``seq``."""
    return f"{realm}:{seq}:{index}"


def _absent(value: object) -> bool:
    """Fields added to ``tidegraph.change.v1`` after its first release are left out when
    they do not apply, so earlier payloads read exactly as before."""
    return value is None


class EntityRef(BaseModel):
    """The entity a change is about."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(description="Stable entity id within the realm.")
    name: str = Field(description="Canonical name.")
    type: str = Field(description="Entity type (`Concept` when unspecified).")
    description: str | None = Field(
        None,
        exclude_if=_absent,
        description="Description as the entity now holds it; present on `entity_added` and"
        " `entity_updated` (every attribute is reported, not only the changed ones).",
    )
    aliases: list[str] | None = Field(
        None,
        exclude_if=_absent,
        description="Aliases, sorted; present on `entity_added` and `entity_updated`.",
    )


class RelationRef(BaseModel):
    """The relation a change is about; ``valid_*`` are ``null`` when no period was stated."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(description="Stable relation id within the realm.")
    subject_id: str | None = Field(
        None,
        exclude_if=_absent,
        description="Id of the subject entity (an `entity_dormant` with `merged_into` moves"
        " the relations of the absorbed entity to the absorbing one).",
    )
    object_id: str | None = Field(None, exclude_if=_absent, description="Id of the object entity.")
    subject: str = Field(description="Canonical name of the subject entity.")
    predicate: str = Field(description="Normalised predicate.")
    object: str = Field(description="Canonical name of the object entity.")
    negated: bool = Field(False, description="The source text denies the relation.")
    valid_from: str | None = Field(None, description="Start of validity: YYYY, YYYY-MM or date.")
    valid_to: str | None = Field(None, description="End of validity: YYYY, YYYY-MM or date.")


def _kind_rules(extra: dict[str, Any]) -> None:
    """JSON Schema: ``schema`` required on the wire, and each kind's required fields."""
    extra.setdefault("required", [])
    if "schema" not in extra["required"]:
        extra["required"].insert(0, "schema")
    extra["allOf"] = [
        {
            "if": {"properties": {"kind": {"const": kind.value}}, "required": ["kind"]},
            "then": {
                "required": list(fields),
                "properties": {f: {"not": {"type": "null"}} for f in fields},
            },
        }
        for kind, fields in REQUIRED_BY_KIND.items()
        if fields
    ]


class GraphChange(BaseModel):
    """One effect of one committed write, published on the changes topic keyed by realm."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        title="GraphChange",
        json_schema_extra=_kind_rules,
    )

    schema_id: Literal["tidegraph.change.v1"] = Field(
        CHANGE_SCHEMA, alias="schema", description="Schema id; required on the wire."
    )
    id: str = Field(pattern=CHANGE_ID_PATTERN, description="`realm:seq:index`, deterministic.")
    realm: str = Field(pattern=REALM_PATTERN)
    space: str = Field(DEFAULT_SPACE, pattern=SPACE_PATTERN)
    seq: int = Field(ge=0, description="Commit sequence number of the realm, gap-free.")
    belief_time: Instant = Field(description="When the graph came to believe this.")
    kind: ChangeKind = Field(
        description="What happened. `entity_archived` / `entity_unarchived`: retention "
        "(paper §6.1) withheld the entity from retrieval and community construction, as "
        "dormancy does, or gave it back; the entity and its relations are kept either way."
    )
    doc_key: str | None = Field(None, description="The document whose indexing caused it.")
    entity: EntityRef | None = None
    relation: RelationRef | None = None
    superseded_by: str | None = Field(None, description="Id of the superseding relation.")
    superseded_via: Literal["negation", "exclusive_group", "functional", "model"] | None = Field(
        None,
        description="On `relation_superseded`: the rule that made the relation superseded —"
        " `negation` (the same predicate on the pair, denied or asserted later),"
        " `exclusive_group` (a later predicate of one exclusive group on the pair) or"
        " `functional` (a later value of a functional predicate: another object for the"
        " subject, or another subject for the object) or `model` (a later relation with the"
        " same subject and predicate and another object that the model said contradicts"
        " it, in a realm with `contradiction_model`). Absent on changes written before it"
        " was recorded.",
    )
    error: str | None = Field(None, description="Why a document failed (document_failed).")
    merged_into: str | None = Field(
        None,
        description="On `entity_dormant`: id of the entity that absorbed this one (a merge); its"
        " relations now belong to that entity.",
    )
    rebuild: dict[str, Any] | None = Field(
        None,
        description="On the `communities_stale` notice of a replay swap: the retired schema, the"
        " log position (`topic`, `partition`, `offset`) the rebuilt realm reflects, and how"
        " many differences the changes after it report.",
    )

    @field_validator("space", mode="before")
    @classmethod
    def _no_wildcard(cls, value: object) -> object:
        if value == ANY_SPACE:
            raise ValueError("'*' is a read-time wildcard and never valid on a change")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> GraphChange:
        missing = [f for f in REQUIRED_BY_KIND[self.kind] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"kind {self.kind.value!r} requires {', '.join(missing)}")
        prefix = f"{self.realm}:{self.seq}:"
        if not self.id.startswith(prefix):
            raise ValueError(f"id must start with realm:seq ({prefix!r})")
        return self

    def to_json(self) -> bytes:
        """The record value as published; top-level fields that do not apply are absent."""
        body = self.model_dump(mode="json")
        return orjson.dumps({k: v for k, v in body.items() if v is not None})

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> GraphChange:
        """Parse and validate a record value; raises :class:`RecordValidationError`."""
        obj = load_object(CHANGE_SCHEMA, data)
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> GraphChange:
        """Validate an already-parsed object; raises :class:`RecordValidationError`."""
        try:
            return cls.model_validate(obj)
        except ValidationError as exc:
            raise RecordValidationError(CHANGE_SCHEMA, problems_from(exc)) from None
