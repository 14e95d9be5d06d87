"""The offline hashing embedder: deterministic across processes, unit-normalised."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.indexer.models.hashing import HashingEmbedder

EMBEDDER = HashingEmbedder(64)


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_identity() -> None:
    assert HashingEmbedder().id == "hashing:384"
    assert HashingEmbedder().dimension == 384
    assert EMBEDDER.id == "hashing:64"
    with pytest.raises(ValueError, match="positive"):
        HashingEmbedder(0)


@given(st.text(max_size=200))
def test_unit_norm_and_deterministic(text: str) -> None:
    vector = EMBEDDER.vector(text)
    assert len(vector) == 64
    assert math.isclose(math.fsum(v * v for v in vector), 1.0, rel_tol=1e-9)
    assert HashingEmbedder(64).vector(text) == vector  # a fresh instance, an empty cache


def _dense_reference(embedder: HashingEmbedder, text: str) -> list[float]:
    """The definition written plainly: every bucket summed, then the whole vector scaled."""
    values = [0.0] * embedder.dimension
    for word in re.findall(r"\w+", text.lower()):
        for key in embedder._features[word]:
            values[key >> 1] += 1 if key & 1 else -1
    norm = math.hypot(*values)
    if norm == 0.0:
        return [1.0] + [0.0] * (embedder.dimension - 1)
    scale = 1.0 / norm
    return [v * scale for v in values]


@given(st.text(max_size=300))
def test_vector_is_the_plain_definition_bit_for_bit(text: str) -> None:
    # Stored vectors of a realm must keep matching the ones computed later for a query.
    assert EMBEDDER.vector(text) == _dense_reference(EMBEDDER, text)


def test_vectors_of_prose_are_the_plain_definition_bit_for_bit() -> None:
    embedder = HashingEmbedder(384)
    words = [
        "Ada",
        "Lovelace",
        "wrote",
        "notes",
        "on",
        "the",
        "Analytical",
        "Engine",
        "and",
        "Charles",
        "Babbage",
        "designed",
        "it",
        "in",
        "London",
        "harbour",
        "guild",
        "1843",
    ]
    rng = random.Random(3)
    for n in range(1, 400):
        text = " ".join(rng.choice(words) for _ in range(n % 60 + 1)) + "."
        assert embedder.vector(text) == _dense_reference(embedder, text), text


def test_empty_text_is_a_fixed_unit_vector() -> None:
    expected = [1.0] + [0.0] * 63
    assert EMBEDDER.vector("") == expected
    assert EMBEDDER.vector("  ?! ") == expected


def test_similar_texts_are_closer_than_unrelated_ones() -> None:
    embedder = HashingEmbedder(384)
    query = embedder.vector("Who designed the Analytical Engine?")
    near = embedder.vector("Charles Babbage designed the Analytical Engine.")
    far = embedder.vector("Quarterly revenue rose on strong aircraft deliveries.")
    assert _cosine(query, near) > _cosine(query, far)
    # trigrams relate inflections
    assert _cosine(embedder.vector("designs"), embedder.vector("designed")) > 0.3


async def test_embed_keeps_order() -> None:
    texts = ["a", "b", "", "a"]
    vectors = await EMBEDDER.embed(texts)
    assert vectors == [EMBEDDER.vector(t) for t in texts]
    assert vectors[0] == vectors[3]


def test_same_vectors_in_another_process_with_another_hash_seed() -> None:
    texts = ["Charles Babbage", "Ada Lovelace worked with Charles Babbage.", ""]
    script = (
        "import json, sys\n"
        "from tidegraph.indexer.models.hashing import HashingEmbedder\n"
        "print(json.dumps(HashingEmbedder(64).embed_sync(json.loads(sys.argv[1]))))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(texts)],
        env=env,
        capture_output=True,
        check=True,
        text=True,
    )
    assert json.loads(out.stdout) == EMBEDDER.embed_sync(texts)
