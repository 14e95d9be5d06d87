"""The default chunker and the document context (paper §4.1)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegraph.indexer.extraction.chunking import (
    DEFAULT_BUDGET,
    build_context,
    chunk_document,
    extend_context,
    sentence_spans,
    sentence_starts,
)
from tidegraph.indexer.extraction.interfaces import Chunk, DocumentContext

_WORDS = (
    ["Babbage", "designed", "the", "engine", "Ada", "wrote", "notes", "on", "it", "Dr.", "C.",
     "e.g.", "in", "1834", "and", "a", "very", "long", "word" * 30]
)  # fmt: skip


def _prose(seed: int) -> str:
    """A document of paragraphs of sentences, cheap to generate from one seed."""
    rng = random.Random(seed)
    paragraphs = []
    for _ in range(rng.randint(0, 5)):
        sentences = []
        for _ in range(rng.randint(1, 8)):
            words = rng.choices(_WORDS, k=rng.randint(1, 15))
            sentences.append(" ".join(words) + rng.choice([".", "!", "?", '."', ""]))
        paragraphs.append(" ".join(sentences))
    lead = rng.choice(["", "  ", "\n\n"])
    return lead + rng.choice(["\n\n", "\n \n\n", "\r\n\r\n"]).join(paragraphs) + lead


_DOCUMENTS = st.integers(0, 2**32).map(_prose)
_SIZES = st.integers(20, 600).flatmap(lambda b: st.tuples(st.just(b), st.integers(0, b - 1)))


def _check(text: str, chunks: list[Chunk], budget: int) -> None:
    covered = [False] * len(text)
    for i, chunk in enumerate(chunks):
        assert chunk.ordinal == i
        assert chunk.text == text[chunk.start : chunk.start + len(chunk.text)]
        assert 0 < len(chunk.text) <= budget
        assert chunk.text == chunk.text.strip()
        for k in range(chunk.start, chunk.start + len(chunk.text)):
            covered[k] = True
    assert all(covered[k] or text[k].isspace() for k in range(len(text)))
    starts = [c.start for c in chunks]
    assert starts == sorted(set(starts))
    ends = [c.start + len(c.text) for c in chunks]
    assert ends == sorted(set(ends))


@settings(max_examples=150)
@given(_DOCUMENTS, _SIZES)
def test_prose_is_covered_within_budget(text: str, sizes: tuple[int, int]) -> None:
    budget, overlap = sizes
    chunks = chunk_document(text, budget, overlap)
    _check(text, chunks, budget)
    assert chunks == chunk_document(text, budget, overlap)  # deterministic


@settings(max_examples=150)
@given(st.text(max_size=800), _SIZES)
def test_any_text_is_covered_within_budget(text: str, sizes: tuple[int, int]) -> None:
    _check(text, chunk_document(text, *sizes), sizes[0])


@settings(max_examples=60)
@given(_DOCUMENTS)
def test_overlap_resumes_at_a_sentence_start(text: str) -> None:
    starts = set(sentence_starts(text))
    chunks = chunk_document(text, 300, 120)
    for previous, chunk in zip(chunks, chunks[1:], strict=False):
        if chunk.start < previous.start + len(previous.text):  # overlapping
            assert chunk.start in starts
            assert previous.start + len(previous.text) - chunk.start <= 120


def test_whole_paragraphs_are_packed() -> None:
    paragraphs = [f"Paragraph {i} is about Babbage and the engine he designed." for i in range(5)]
    text = "\n\n".join(paragraphs)
    chunks = chunk_document(text, budget=130, overlap=0)
    assert [c.text for c in chunks] == [
        "\n\n".join(paragraphs[0:2]),
        "\n\n".join(paragraphs[2:4]),
        paragraphs[4],
    ]
    assert chunks[1].metadata == {"paragraph_first": "2", "paragraph_last": "3"}


def test_overlap_carries_the_last_sentences_forward() -> None:
    first = "Ada met Babbage. Babbage designed the engine. Ada wrote the notes."
    second = "Menabrea described it in French."
    chunks = chunk_document(f"{first}\n\n{second}", budget=90, overlap=40)
    assert [c.text for c in chunks] == [first, f"Ada wrote the notes.\n\n{second}"]
    assert chunks[1].metadata == {"paragraph_first": "0", "paragraph_last": "1"}


def test_no_overlap_rather_than_mid_sentence() -> None:
    first = "A sentence that is far longer than the permitted overlap window here."
    chunks = chunk_document(f"{first}\n\nNext.", budget=len(first) + 3, overlap=20)
    assert [c.text for c in chunks] == [first, "Next."]


def test_long_paragraph_splits_at_sentences_and_long_sentences_at_spaces() -> None:
    sentences = [f"Sentence {i} says something about the engine." for i in range(40)]
    chunks = chunk_document(" ".join(sentences), budget=200, overlap=50)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.text.endswith(".")
        assert chunk.text.startswith("Sentence")
    giant = " ".join(["word"] * 200)
    pieces = chunk_document(giant, budget=100, overlap=0)
    assert all(p.text.startswith("word") and p.text.endswith("word") for p in pieces)
    unbroken = "x" * 250
    assert [c.text for c in chunk_document(unbroken, budget=100, overlap=10)] == [
        "x" * 90,
        "x" * 90,
        "x" * 70,
    ]


def test_defaults_and_edges() -> None:
    assert chunk_document("") == []
    assert chunk_document(" \n\n \t") == []
    doc = "One sentence. " * 500
    chunks = chunk_document(doc)
    assert all(len(c.text) <= DEFAULT_BUDGET for c in chunks)
    with pytest.raises(ValueError, match="budget"):
        chunk_document("x", budget=0)
    with pytest.raises(ValueError, match="overlap"):
        chunk_document("x", budget=10, overlap=10)


def test_sentence_boundaries() -> None:
    text = 'Dr. Smith met C. Babbage. He left! e.g. this stays. Then "Quote." Next\n\nPara two'
    assert [text[s:e] for s, e in sentence_spans(text)] == [
        "Dr. Smith met C. Babbage.",
        "He left! e.g. this stays.",
        'Then "Quote."',
        "Next",
        "Para two",
    ]


def test_build_context_threads_capped_names() -> None:
    context = build_context(
        "Babbage",
        "fs",
        ["Charles Babbage", " ada  lovelace", "charles babbage", "", "Ada Lovelace", "Menabrea"],
        ["designed"],
        cap=2,
    )
    assert context == DocumentContext(
        title="Babbage",
        source="fs",
        known_names=("Charles Babbage", "ada lovelace"),
        vocabulary=("designed",),
    )
    grown = extend_context(build_context(None, None, ["A"]), ["B", "a", "C"], cap=3)
    assert grown.known_names == ("A", "B", "C")
    assert extend_context(grown, ["D"], cap=3) == grown  # first seen are kept
    with pytest.raises(ValueError, match="cap"):
        build_context(None, None, cap=-1)
