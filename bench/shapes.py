"""Vector shapes for the query benchmark: hashing, and vectors shaped like a real model's.

Hashing vectors (``tidegraph.indexer.models.hashing``) are sparse and nearly orthogonal:
an HNSW graph over them is easy to search, and recall measured on them says little about
a real embedding model's. A model's vectors are clustered (topics), anisotropic (a few
directions carry most of the variance) and share a common direction (every pair has a
positive cosine). ``clustered-<dim>`` draws them from a fixed random mixture of Gaussians:

* a 64-dimension latent space with 256 cluster centres, each coordinate scaled by a
  power-law spectrum (coordinate j by (j + 1)^-0.5), so variance is anisotropic;
* an item is its text's cluster centre plus within-cluster noise on the same spectrum;
* a fixed random projection to ``dim`` dimensions, plus a common mean direction and a
  little isotropic noise, then unit length.

Everything is drawn from a generator seeded by the text's hash, so the same text gives
the same vector in every process and run (the cache of built realms relies on it), and
query vectors come from the same distribution as stored ones. Needs numpy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LATENT = 64
CLUSTERS = 256
SEED = 20260101


@dataclass(frozen=True)
class Shape:
    """A vector shape: ``hashing-384`` or ``clustered-<dim>``."""

    kind: str
    dim: int

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.dim}"

    @classmethod
    def parse(cls, text: str) -> Shape:
        kind, _, dim = text.partition("-")
        if kind not in ("hashing", "clustered"):
            raise ValueError(f"unknown vector shape {text!r} (hashing-N or clustered-N)")
        return cls(kind, int(dim or 384))


class _Mixture:
    def __init__(self, dim: int) -> None:
        import numpy as np

        rng = np.random.default_rng(SEED)
        self.np = np
        self.spectrum = (np.arange(LATENT) + 1.0) ** -0.5
        self.centres = rng.standard_normal((CLUSTERS, LATENT)) * self.spectrum
        self.projection = rng.standard_normal((LATENT, dim)) / np.sqrt(LATENT)
        mean = rng.standard_normal(dim)
        self.mean = mean / np.linalg.norm(mean)
        self.dim = dim

    def vectors(self, texts: Sequence[str]) -> Any:
        np = self.np
        latent = np.empty((len(texts), LATENT))
        noise = np.empty((len(texts), self.dim))
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
            rng = np.random.default_rng(seed)
            latent[i] = self.centres[seed % CLUSTERS] + 0.5 * self.spectrum * rng.standard_normal(
                LATENT
            )
            noise[i] = rng.standard_normal(self.dim)
        out = latent @ self.projection
        scale = np.linalg.norm(out, axis=1, keepdims=True)
        out = out / scale + 0.45 * self.mean + 0.25 * noise / np.sqrt(self.dim)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out.astype(np.float32)


_MIXTURES: dict[int, _Mixture] = {}


def clustered(texts: Sequence[str], dim: int) -> Any:
    """Unit vectors (a float32 array, one row per text) from the fixed mixture."""
    if dim not in _MIXTURES:
        _MIXTURES[dim] = _Mixture(dim)
    return _MIXTURES[dim].vectors(texts)
