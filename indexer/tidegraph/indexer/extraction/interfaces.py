"""The two seams where models plug into the indexer: an extractor and an embedder.

Both are async because the production implementations are network calls; the offline
implementations (rules, hashing) satisfy the same protocols so the pipeline is identical.
Failures follow ``tidegraph.schemas.errors``: a ``TransientError`` pauses the partition,
an ``ExtractionFailed`` skips one chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tidegraph.schemas import ExtractionOutput, TidegraphError


class ExtractionFailed(TidegraphError):
    """The extractor could not produce valid output for one chunk (permanent for that chunk)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class DocumentContext:
    """What every chunk of a document is extracted against (paper §4.1)."""

    title: str | None = None
    """Document title, when the source gave one."""
    source: str | None = None
    """Where the document came from (connector name, URL, path)."""
    known_names: tuple[str, ...] = ()
    """Canonical entity names seen so far in this document, capped; reuse them exactly."""
    vocabulary: tuple[str, ...] = ()
    """The realm's controlled predicate vocabulary, empty when none is configured."""


@dataclass(frozen=True)
class Chunk:
    """One piece of a document: the unit that is extracted, embedded and cited."""

    ordinal: int
    """Position within the document, from 0."""
    text: str
    """The chunk's text, overlap included."""
    start: int = 0
    """Character offset of the chunk's first character in the document."""
    metadata: dict[str, str] = field(default_factory=dict)
    """Provenance for citations (e.g. paragraph range)."""


class Extractor(Protocol):
    """Turns one chunk into candidate entities and relations."""

    @property
    def id(self) -> str:
        """Stable identifier recorded in the realm's metadata (e.g. ``rules:1``)."""
        ...

    async def extract(self, chunk: Chunk, context: DocumentContext) -> ExtractionOutput:
        """Candidates for ``chunk``; raise ``ExtractionFailed`` or a ``TransientError``."""
        ...


class Embedder(Protocol):
    """Maps texts to vectors of a fixed dimension."""

    @property
    def id(self) -> str:
        """``hashing:<dim>`` or ``llm:<model>:<dim>``, pinned by the realm at creation."""
        ...

    @property
    def dimension(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-normalised vector per text, in order; raise rather than fall back."""
        ...
