"""A deterministic, offline embedder: feature hashing with SHA-256 (paper §3.5).

Each text becomes a bag of features — its lowercased words, and the character trigrams of
each word padded with ``#`` (so ``Babbage`` and ``Babbage's`` still land close) — and each
feature adds ±weight to one of ``dimension`` buckets. Bucket and sign come from SHA-256 of
the feature, never from Python's ``hash``, which is salted per process: with it, nothing
indexed by one process could be found by another. The vector is unit-normalised.

It is a geometry of its own, comparable only with itself; a realm records ``hashing:<dim>``
and refuses any other embedder (DESIGN invariant 10). A text with no word characters, or
whose features happen to cancel out, maps to the first basis vector: a fixed unit vector,
because a zero vector has no cosine with anything.
"""

from __future__ import annotations

import hashlib
import math
import operator
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["DEFAULT_DIMENSION", "HashingEmbedder"]

DEFAULT_DIMENSION = 384
WORD_WEIGHT = 1.0
"""Weight of a whole-word feature."""
TRIGRAM_WEIGHT = 0.5
"""Weight of each character-trigram feature: enough to relate inflections, less than a word."""

_WORDS = re.compile(r"\w+")
_CACHE_LIMIT = 200_000


class HashingEmbedder:
    """``hashing:<dimension>``: the same text gives the same vector in every process."""

    def __init__(self, dimension: int = DEFAULT_DIMENSION) -> None:
        if dimension < 1:
            raise ValueError(f"embedding dimension must be positive, got {dimension}")
        self._dimension = dimension
        self._features: dict[str, tuple[tuple[int, float], ...]] = {}

    @property
    def id(self) -> str:
        """Recorded in the realm's metadata; includes the dimension."""
        return f"hashing:{self._dimension}"

    @property
    def dimension(self) -> int:
        """Length of every vector."""
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order (CPU only; never fails, never blocks on I/O)."""
        return self.embed_sync(texts)

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """:meth:`embed` without the coroutine, for callers outside an event loop."""
        return [self.vector(text) for text in texts]

    def vector(self, text: str) -> list[float]:
        """The unit vector of one text."""
        values = [0.0] * self._dimension
        cache = self._features
        for word, count in Counter(_WORDS.findall(text.lower())).items():
            features = cache.get(word) or self._word_features(word)
            if count == 1:
                for bucket, weight in features:
                    values[bucket] += weight
            else:
                for bucket, weight in features:
                    values[bucket] += weight * count
        norm = math.sqrt(sum(map(operator.mul, values, values)))
        if norm == 0.0:
            values[0] = 1.0
            return values
        return [v / norm for v in values]

    def _word_features(self, word: str) -> tuple[tuple[int, float], ...]:
        """(bucket, signed weight) of a word and its trigrams, memoised per word."""
        cached = self._features.get(word)
        if cached is not None:
            return cached
        merged: dict[int, float] = {}
        padded = f"#{word}#"
        features = [(f"w:{word}", WORD_WEIGHT)]
        features.extend((f"t:{padded[i : i + 3]}", TRIGRAM_WEIGHT) for i in range(len(word)))
        for feature, weight in features:
            digest = hashlib.sha256(feature.encode("utf-8")).digest()
            bucket = int.from_bytes(digest[:8], "big") % self._dimension
            signed = weight if digest[8] & 1 else -weight
            merged[bucket] = merged.get(bucket, 0.0) + signed
        result = tuple(merged.items())
        if len(self._features) >= _CACHE_LIMIT:
            self._features.clear()
        self._features[word] = result
        return result
