"""A deterministic, offline embedder: feature hashing with SHA-256 (paper §3.5).

Each text becomes a bag of features — its lowercased words, and the character trigrams of
each word padded with ``#`` (so ``designs`` and ``designed`` still land close) — and each
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
import re
from collections import Counter
from collections.abc import Sequence
from itertools import chain

__all__ = ["DEFAULT_DIMENSION", "HashingEmbedder"]

DEFAULT_DIMENSION = 384
WORD_WEIGHT = 2
"""Weight of a whole-word feature."""
TRIGRAM_WEIGHT = 1
"""Weight of each character-trigram feature: enough to relate inflections, less than a word.
Weights are small integers so that a text's features can be counted exactly, in C."""

_WORDS = re.compile(r"\w+")
_CACHE_LIMIT = 200_000


class _Features(dict[str, tuple[int, ...]]):
    """Word → its signed bucket keys (``bucket * 2 + positive``), repeated by weight; memoised."""

    def __init__(self, dimension: int) -> None:
        super().__init__()
        self.dimension = dimension

    def __missing__(self, word: str) -> tuple[int, ...]:
        padded = f"#{word}#"
        features = [(f"w:{word}", WORD_WEIGHT)]
        features.extend((f"t:{padded[i : i + 3]}", TRIGRAM_WEIGHT) for i in range(len(word)))
        keys: list[int] = []
        for feature, weight in features:
            digest = hashlib.sha256(feature.encode("utf-8")).digest()
            bucket = int.from_bytes(digest[:8], "big") % self.dimension
            keys.extend([bucket * 2 + (digest[8] & 1)] * weight)
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        self[word] = result = tuple(keys)
        return result


class HashingEmbedder:
    """``hashing:<dimension>``: the same text gives the same vector in every process."""

    def __init__(self, dimension: int = DEFAULT_DIMENSION) -> None:
        if dimension < 1:
            raise ValueError(f"embedding dimension must be positive, got {dimension}")
        self._dimension = dimension
        self._features = _Features(dimension)

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
        """The unit vector of one text.

        Sums the signed counts per bucket and scales only the buckets that got any: a short
        text (an entity or relation rendering) touches a few dozen of the buckets, and
        building, measuring and scaling all of them cost three times as much.
        """
        words = _WORDS.findall(text.lower())
        counts = Counter(chain.from_iterable(map(self._features.__getitem__, words)))
        sums: dict[int, int] = {}
        for key, count in counts.items():
            bucket = key >> 1
            sums[bucket] = sums.get(bucket, 0) + (count if key & 1 else -count)
        values = [0.0] * self._dimension
        squares = sum(v * v for v in sums.values())
        if squares == 0:
            values[0] = 1.0
            return values
        scale = 1.0 / math.sqrt(squares)  # exact integer sum: the norm is correctly rounded
        for bucket, v in sums.items():
            values[bucket] = v * scale
        return values
