"""``DocumentVersion`` (``tidegraph.document.v1``): what every connector publishes.

One record is one version of one document of one realm, as its source saw it. The rules are
the contract's (CONTRACT.md, "DocumentVersion"); where the contract leaves a choice open it
is decided here and written on the field:

* ``schema`` is required on the wire (:meth:`DocumentVersion.from_json` refuses a record
  without it); Python callers may omit it, it defaults to the v1 id.
* A ``delete`` carries neither ``content`` nor ``content_hash``: a delete with content is a
  producer bug (wrong ``op``) and is rejected rather than guessed at.
* ``event_time`` must carry a UTC offset (naive datetimes are rejected); any offset is
  accepted and normalised to UTC, and it is written back with a ``Z`` suffix.
* The model checks the *format* of ``content_hash``; whether it matches the content is a
  separate check (:meth:`DocumentVersion.hash_matches`) because the indexer must tell a
  hash mismatch apart from a malformed record and hashing 8 MiB is not free.
* Unknown fields are ignored, so a v1 reader accepts records from a producer that already
  knows a later additive field.
* ``facts`` (additive) carries structure the source already knows, in the extraction-output
  shape; such a record is indexed from its facts without an extractor, through the same
  gates. ``content`` stays required on an upsert: a source without prose sends the facts'
  rendered passage (``tidegraph.schemas.facts.render_facts``; the bulk and HTTP connectors
  fill it in), which is the chunk the facts' provenance hangs on. What makes a version
  unchanged is :attr:`DocumentVersion.version_hash`, over the content and the facts.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from tidegraph.schemas._validation import RecordValidationError, load_object, problems_from
from tidegraph.schemas.extraction import ExtractionOutput
from tidegraph.schemas.facts import render_facts, version_hash
from tidegraph.schemas.hashing import CONTENT_HASH_PATTERN, content_hash
from tidegraph.schemas.instants import Instant, format_utc
from tidegraph.schemas.names import ANY_SPACE, DEFAULT_SPACE, REALM_PATTERN, SPACE_PATTERN

DOCUMENT_SCHEMA: Final = "tidegraph.document.v1"
DOC_KEY_MAX = 1024

Op = Literal["upsert", "delete"]


def _order_form(value: datetime) -> str:
    """Fixed-width UTC form, so event times compare correctly as strings."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _op_rules(extra: dict[str, Any]) -> None:
    """JSON Schema for the ``op`` rules pydantic cannot express from annotations."""
    extra.setdefault("required", [])
    if "schema" not in extra["required"]:
        extra["required"].insert(0, "schema")
    extra["allOf"] = [
        {
            "if": {"properties": {"op": {"const": "upsert"}}, "required": ["op"]},
            "then": {
                "required": ["content", "content_hash"],
                "properties": {"content": {"type": "string"}, "content_hash": {"type": "string"}},
            },
        },
        {
            "if": {"properties": {"op": {"const": "delete"}}, "required": ["op"]},
            "then": {
                "properties": {
                    "content": {"type": "null"},
                    "content_hash": {"type": "null"},
                    "facts": {"type": "null"},
                }
            },
        },
    ]


class DocumentVersion(BaseModel):
    """One version of one document, keyed on Kafka by its realm."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        title="DocumentVersion",
        json_schema_extra=_op_rules,
    )

    schema_id: Literal["tidegraph.document.v1"] = Field(
        DOCUMENT_SCHEMA, alias="schema", description="Schema id; required on the wire."
    )
    realm: str = Field(pattern=REALM_PATTERN, description="Tenant; one PostgreSQL schema each.")
    space: str = Field(
        DEFAULT_SPACE,
        pattern=SPACE_PATTERN,
        description="Scope inside the realm; `*` is a read-time wildcard, never written.",
    )
    doc_key: str = Field(
        min_length=1, max_length=DOC_KEY_MAX, description="Identity of the document in its realm."
    )
    op: Op = Field(description="`upsert` replaces the document, `delete` removes it.")
    content: str | None = Field(
        None, validate_default=True, description="Full text; required for upsert, absent on delete."
    )
    content_hash: str | None = Field(
        None,
        validate_default=True,
        pattern=CONTENT_HASH_PATTERN,
        description="`sha256:` + 64 lowercase hex of the UTF-8 content; required for upsert.",
    )
    title: str | None = Field(None, description="Human title, when the source has one.")
    source: str | None = Field(None, description="Which connector or system produced it.")
    metadata: dict[str, JsonValue] = Field(
        default_factory=dict, description="Free-form attributes carried to the graph."
    )
    source_version: str | None = Field(
        None,
        description="Monotonic per doc_key as the source sees it; integers compare as integers.",
    )
    order_key: str | None = Field(
        None,
        description="Document order for supersession, compared as strings; defaults to event_time.",
    )
    event_time: Instant = Field(description="When the source changed, with a UTC offset.")
    facts: ExtractionOutput | None = Field(
        None,
        description=(
            "Entities and relations the source states, in the extraction-output shape; when"
            " present the document is indexed from them instead of by an extractor, through"
            " the same validation gates. Upsert only."
        ),
    )

    @field_validator("space", mode="before")
    @classmethod
    def _no_wildcard(cls, value: object) -> object:
        if value == ANY_SPACE:
            raise ValueError("'*' is a read-time wildcard and never valid on a write")
        return value

    @field_validator("content", "content_hash")
    @classmethod
    def _op_needs(cls, value: str | None, info: ValidationInfo) -> str | None:
        op = info.data.get("op")
        if op == "upsert" and value is None:
            raise ValueError("required when op is 'upsert'")
        if op == "delete" and value is not None:
            raise ValueError("must be absent when op is 'delete'")
        return value

    @field_validator("facts")
    @classmethod
    def _facts_on_upsert(
        cls, value: ExtractionOutput | None, info: ValidationInfo
    ) -> ExtractionOutput | None:
        if value is not None and info.data.get("op") == "delete":
            raise ValueError("must be absent when op is 'delete'")
        return value

    @property
    def effective_order_key(self) -> str:
        """``order_key`` when given, else ``event_time`` in a fixed-width UTC form."""
        return self.order_key if self.order_key is not None else _order_form(self.event_time)

    @property
    def version_hash(self) -> str | None:
        """What decides whether this version is unchanged from the applied one: the content
        hash, combined with the facts when the record carries any (``None`` on a delete)."""
        if self.content_hash is None:
            return None
        return version_hash(self.content_hash, self.facts)

    def hash_matches(self) -> bool:
        """True for a delete, or when ``content_hash`` is the hash of ``content``."""
        if self.content is None:
            return self.content_hash is None
        return self.content_hash == content_hash(self.content)

    def to_json(self) -> bytes:
        """The record value as published (absent optional fields are left out).

        Built directly rather than through pydantic's serializer: connectors encode every
        record on their hot path. A test pins it to ``model_dump(mode="json",
        exclude_none=True)``.
        """
        body: dict[str, Any] = {
            "schema": self.schema_id,
            "realm": self.realm,
            "space": self.space,
            "doc_key": self.doc_key,
            "op": self.op,
        }
        for name in _OPTIONAL_BEFORE_METADATA:
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        body["metadata"] = self.metadata
        if self.source_version is not None:
            body["source_version"] = self.source_version
        if self.order_key is not None:
            body["order_key"] = self.order_key
        body["event_time"] = format_utc(self.event_time)
        if self.facts is not None:
            body["facts"] = self.facts.model_dump(mode="json", exclude_none=True)
        return orjson.dumps(body)

    @classmethod
    def from_json(cls, data: bytes | bytearray | memoryview | str) -> DocumentVersion:
        """Parse and validate a record value; raises :class:`RecordValidationError`."""
        obj = load_object(DOCUMENT_SCHEMA, data)
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> DocumentVersion:
        """Validate an already-parsed object; raises :class:`RecordValidationError`."""
        try:
            return cls.model_validate(obj)
        except ValidationError as exc:
            raise RecordValidationError(DOCUMENT_SCHEMA, problems_from(exc)) from None

    @classmethod
    def for_upsert(
        cls,
        realm: str,
        doc_key: str,
        content: str,
        *,
        event_time: datetime | None = None,
        **fields: Any,
    ) -> DocumentVersion:
        """An upsert with its hash computed and ``event_time`` defaulting to now."""
        return cls.from_dict(
            {
                **fields,
                "realm": realm,
                "doc_key": doc_key,
                "op": "upsert",
                "content": content,
                "content_hash": content_hash(content),
                "event_time": event_time or datetime.now(UTC),
            }
        )

    @classmethod
    def for_facts(
        cls,
        realm: str,
        doc_key: str,
        facts: ExtractionOutput | dict[str, Any],
        *,
        content: str | None = None,
        event_time: datetime | None = None,
        **fields: Any,
    ) -> DocumentVersion:
        """An upsert carrying ``facts``; its content is their rendered passage unless given."""
        if not isinstance(facts, ExtractionOutput):
            facts = ExtractionOutput.model_validate(facts)
        text = render_facts(facts) if content is None else content
        return cls.for_upsert(realm, doc_key, text, event_time=event_time, facts=facts, **fields)

    @classmethod
    def for_delete(
        cls, realm: str, doc_key: str, *, event_time: datetime | None = None, **fields: Any
    ) -> DocumentVersion:
        """A delete, ``event_time`` defaulting to now."""
        return cls.from_dict(
            {
                **fields,
                "realm": realm,
                "doc_key": doc_key,
                "op": "delete",
                "event_time": event_time or datetime.now(UTC),
            }
        )


_OPTIONAL_BEFORE_METADATA = ("content", "content_hash", "title", "source")


def with_facts_passage(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a record-shaped object) with ``content`` set to its facts' rendered passage
    when it carries valid ``facts`` and no content: what the bulk and HTTP connectors accept
    from a source without prose. Anything else comes back as it was, for validation to
    report."""
    facts = obj.get("facts")
    if obj.get("content") is not None or not isinstance(facts, dict):
        return obj
    if obj.get("op", "upsert") != "upsert":
        return obj
    try:
        parsed = ExtractionOutput.model_validate(facts)
    except ValidationError:
        return obj
    return {**obj, "content": render_facts(parsed)}


_INTEGER = re.compile(r"-?[0-9]+")


def compare_source_versions(a: str, b: str) -> int:
    """-1, 0 or 1 as ``a`` is older than, equal to or newer than ``b``.

    Compared as integers when both are integers (so ``"9" < "10"``), else as strings.
    """
    if _INTEGER.fullmatch(a) and _INTEGER.fullmatch(b):
        ia, ib = int(a), int(b)
        return (ia > ib) - (ia < ib)
    return (a > b) - (a < b)
