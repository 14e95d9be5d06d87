"""The query embedder seam, and the pinned-geometry check (DESIGN invariant 10).

The service never builds an embedder itself: the composition root hands it a factory that
maps a realm and its pinned embedder id to something satisfying :class:`QueryEmbedder`
(the indexer's hashing or model embedder). Before any similarity search the service
compares the embedder's id with the realm's pinned one and refuses with 409 on a mismatch,
because cosine distances between two geometries are numbers without meaning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tidegraph.query_service.errors import EmbedderMismatch, Unavailable


class QueryEmbedder(Protocol):
    """Maps query texts to vectors in a realm's pinned geometry."""

    @property
    def id(self) -> str:
        """``hashing:<dim>`` or ``llm:<model>:<dim>``; must equal the realm's pinned id."""
        ...

    @property
    def dimension(self) -> int:
        """Vector width."""
        ...

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit-normalised vector per text, in order; raise rather than fall back."""
        ...


EmbedderFactory = Callable[[str, str], QueryEmbedder]
"""``(realm, pinned embedder id) → embedder``; may raise ``ConfigError`` when it cannot."""


def checked(embedder: QueryEmbedder, realm: str, pinned: str, dimension: int) -> QueryEmbedder:
    """``embedder`` when its geometry is the realm's, else :class:`EmbedderMismatch`."""
    if embedder.id != pinned or embedder.dimension != dimension:
        raise EmbedderMismatch(realm, pinned, embedder.id)
    return embedder


def check_vectors(vectors: list[list[float]], count: int, dimension: int) -> None:
    """An embedder that returns the wrong shape is refused before it reaches SQL."""
    if len(vectors) != count or any(len(v) != dimension for v in vectors):
        raise Unavailable(
            f"the query embedder returned {len(vectors)} vectors for {count} texts or the "
            f"wrong width (want {dimension}); refusing to search with them"
        )
