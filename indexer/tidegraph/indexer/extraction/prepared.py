"""Values passed from the concurrent prepare phase to the ordered write phase.

Everything here is already gated and normalised: the writer trusts it to be well-formed
and only decides identity (resolution), provenance and belief-time state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EntityFact:
    """An accepted entity as one chunk states it."""

    name: str
    """Surface form, already gated."""
    type: str
    """``Concept`` when the extractor gave none (a stub for a relation endpoint)."""
    description: str
    """What this chunk says the entity is."""
    aliases: tuple[str, ...]
    """Other surface forms the chunk used for it."""


@dataclass(frozen=True)
class RelationFact:
    """An accepted, normalised relation as one chunk states it."""

    subject: str
    """Subject surface form (resolved to an entity by the writer)."""
    predicate: str
    """Normalised predicate (lowercase, underscores, vocabulary-snapped)."""
    object: str
    """Object surface form."""
    negated: bool
    """The text denies the relation."""
    description: str
    """What the chunk says about it."""
    confidence: float
    """Extractor confidence that passed the floor."""
    valid_from: str | None
    """``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` when the text states it."""
    valid_to: str | None
    """Same forms; ``None`` when open or unstated."""


@dataclass(frozen=True)
class PreparedChunk:
    """One chunk with its embedding and accepted structure."""

    ordinal: int
    """Position in the document."""
    text: str
    """Chunk text."""
    embedding: list[float]
    """Chunk embedding (realm dimension)."""
    entities: tuple[EntityFact, ...] = ()
    """Accepted entities, endpoint stubs included."""
    relations: tuple[RelationFact, ...] = ()
    """Accepted relations."""
    error: str | None = None
    """Why extraction produced nothing usable for this chunk, when it did not."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Provenance for citations."""


@dataclass(frozen=True)
class PreparedDocument:
    """A document version ready to be written."""

    space: str
    doc_key: str
    content_hash: str
    source_version: str | None
    order_key: str | None
    title: str | None
    source: str | None
    metadata: dict[str, Any]
    chunks: tuple[PreparedChunk, ...]
    vectors: dict[str, list[float]]
    """Embeddings of entity and relation texts computed ahead, keyed by text."""
    refused: str | None = None
    """Why the version cannot be stored at all (see ``writer.refused_version``)."""
    refusals: tuple[str, ...] = ()
    """Facts the record supplied that the gates or the vocabulary refused, each with why."""

    @property
    def notice(self) -> str | None:
        """What the document's status reports as its error: why it failed, else which of
        its supplied facts were refused (the version is indexed from the rest)."""
        failure = self.failure
        if failure is not None or not self.refusals:
            return failure
        return "refused facts: " + "; ".join(self.refusals)

    @property
    def failure(self) -> str | None:
        """Why the document as a whole yields no structure (every chunk empty or failed)."""
        if self.refused is not None:
            return self.refused
        if any(c.entities or c.relations for c in self.chunks):
            return None
        reasons = sorted({c.error for c in self.chunks if c.error})
        if not self.chunks:
            return "document has no text to extract from"
        return "no chunk yielded valid structure" + (": " + "; ".join(reasons) if reasons else "")
