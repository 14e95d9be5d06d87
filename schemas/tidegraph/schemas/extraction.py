"""What any extractor hands to the validation gates (CONTRACT.md, "Extraction output").

These are *candidates*: the extractor is untrusted, and nothing here is graph structure
until the gates and resolution rules of the indexer accepted it. Unknown fields are
ignored and a missing list is empty, so a model that says less still parses. NUL
characters are dropped from every text: PostgreSQL cannot store them, and no name or
description means anything by one.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\0", "")
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


class CandidateEntity(BaseModel):
    """An entity as the extractor named it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(description="Surface form the extractor chose as the name.")
    type: str = Field("Concept", description="Entity type; `Concept` means unspecified.")
    description: str = Field("", description="What the text says this entity is.")
    aliases: list[str] = Field(default_factory=list, description="Other surface forms seen.")

    _texts = field_validator("*", mode="before")(_without_nul)


class CandidateRelation(BaseModel):
    """A triple as the extractor stated it, with negation and an optional validity period."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    subject: str
    predicate: str
    object: str
    description: str = ""
    negated: bool = Field(False, description="The text denies the relation.")
    confidence: float = Field(1.0, description="Extractor's confidence in [0, 1].")
    valid_from: str | None = Field(None, description="Start of a stated period, free text.")
    valid_to: str | None = Field(None, description="End of a stated period, free text.")

    _texts = field_validator("*", mode="before")(_without_nul)


class ExtractionOutput(BaseModel):
    """One chunk's candidates."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    entities: list[CandidateEntity] = Field(default_factory=list)
    relations: list[CandidateRelation] = Field(default_factory=list)
