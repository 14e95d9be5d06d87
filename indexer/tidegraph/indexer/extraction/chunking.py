"""The default splitter and the document context threaded through its chunks (paper §4.1).

Overlap matters for graph extraction: a relation whose subject ends one chunk and whose
object starts the next is invisible to both without it. So :func:`chunk_document` packs
whole paragraphs up to a character budget and starts each following chunk with an overlap
of at most ``overlap`` characters that begins at a sentence start, so it reads as prose. When
no sentence starts inside that window the chunk starts without overlap rather than
mid-sentence. A paragraph longer than the budget is split at sentence boundaries into pieces
of at most ``budget - overlap`` characters, so they can carry overlap as well; a sentence
longer than that is cut at the last whitespace that fits — or, failing that, hard.

Guarantees (property-tested): every non-whitespace character of the document lies in some
chunk; each chunk's text is ``document[start:start + len(text)]`` and never longer than the
budget; chunks are in document order; the same input gives the same chunks.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import replace

from tidegraph.indexer.extraction.interfaces import Chunk, DocumentContext

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_CONTEXT_CAP",
    "DEFAULT_OVERLAP",
    "build_context",
    "chunk_document",
    "extend_context",
    "sentence_spans",
    "sentence_starts",
]

DEFAULT_BUDGET = 2000
"""Characters per chunk, overlap included."""
DEFAULT_OVERLAP = 200
"""Most characters carried from the end of one chunk into the next."""
DEFAULT_CONTEXT_CAP = 50
"""Most canonical names handed to the extractor with each chunk."""

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "inc", "ltd", "co", "corp",
     "no", "fig", "al", "gen", "col", "lt", "sgt", "capt", "rev", "hon", "mt", "ft", "approx",
     "dept", "univ", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct",
     "nov", "dec", "ave", "cf", "ca"}
)  # fmt: skip
"""Words whose trailing period does not end a sentence (case-insensitive)."""


def _sentence_end_pattern() -> re.Pattern[str]:
    # One fixed-width lookbehind per abbreviation length keeps this a single regex pass.
    by_length: dict[int, list[str]] = {}
    for word in sorted(_ABBREVIATIONS):
        by_length.setdefault(len(word), []).append(word)
    not_abbreviation = "".join(
        rf"(?<!\b(?i:{'|'.join(words)})\.)" for _, words in sorted(by_length.items())
    )
    return re.compile(
        rf"[.!?…](?<!\b\w\.)(?<!\b\w\.\w\.){not_abbreviation}"  # not "C." "e.g." "Dr."
        r"[.!?…]*[\"'”’)\]]*\s+"
        r"(?=[^\sa-zß-öø-ÿ])"  # the next sentence does not start in lowercase
    )


_SENTENCE_END = _sentence_end_pattern()


def _rstrip(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _lstrip(text: str, start: int, end: int) -> int:
    while start < end and text[start].isspace():
        start += 1
    return start


def _paragraph_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    position = 0
    for brk in (*_PARAGRAPH_BREAK.finditer(text), None):
        stop = len(text) if brk is None else brk.start()
        start = _lstrip(text, position, stop)
        end = _rstrip(text, start, stop)
        if end > start:
            spans.append((start, end))
        if brk is not None:
            position = brk.end()
    return spans


def sentence_starts(text: str) -> list[int]:
    """Offsets where a sentence or paragraph starts, ascending, each on a non-space character.

    A sentence ends at ``.``/``!``/``?`` (closing quotes and brackets included) followed by
    whitespace and a character that is not lowercase; a period after a known abbreviation
    (``Dr.``, ``e.g.``) or a single initial (``C. Babbage``) does not end one.
    """
    starts = {start for start, _ in _paragraph_spans(text)}
    starts.update(m.end() for m in _SENTENCE_END.finditer(text))
    return sorted(starts)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every sentence, trailing whitespace excluded, in order."""
    starts = sentence_starts(text)
    bounds = [*starts, len(text)]
    return [(s, _rstrip(text, s, bounds[i + 1])) for i, s in enumerate(starts)]


def _hard_split(text: str, start: int, end: int, budget: int) -> list[tuple[int, int]]:
    """Cut a span longer than the budget at the last whitespace that fits, else at the budget."""
    pieces: list[tuple[int, int]] = []
    while end - start > budget:
        limit = start + budget
        cut = max(text.rfind(c, start + 1, limit + 1) for c in " \t\n\r")
        if cut <= start:
            pieces.append((start, limit))
            start = _lstrip(text, limit, end)
            continue
        pieces.append((start, _rstrip(text, start, cut)))
        start = _lstrip(text, cut, end)
    if end > start:
        pieces.append((start, end))
    return pieces


def _split_paragraph(
    text: str, start: int, end: int, starts: list[int], budget: int
) -> list[tuple[int, int]]:
    """Sentences of one over-long paragraph, packed greedily into pieces within the budget."""
    lo, hi = bisect.bisect_right(starts, start), bisect.bisect_left(starts, end)
    bounds = [start, *starts[lo:hi], end]
    pieces: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for k in range(len(bounds) - 1):
        s, e = bounds[k], _rstrip(text, bounds[k], bounds[k + 1])
        if e - s > budget:
            if current is not None:
                pieces.append(current)
                current = None
            pieces.extend(_hard_split(text, s, e, budget))
        elif current is None:
            current = (s, e)
        elif e - current[0] <= budget:
            current = (current[0], e)
        else:
            pieces.append(current)
            current = (s, e)
    if current is not None:
        pieces.append(current)
    return pieces


def _overlap_start(
    starts: list[int], chunk: tuple[int, int], next_end: int, budget: int, overlap: int
) -> int | None:
    """Earliest sentence start in the chunk's last ``overlap`` characters that still fits."""
    floor = max(chunk[1] - overlap, chunk[0] + 1, next_end - budget)
    k = bisect.bisect_left(starts, floor)
    if k < len(starts) and starts[k] < chunk[1]:
        return starts[k]
    return None


def chunk_document(
    text: str, budget: int = DEFAULT_BUDGET, overlap: int = DEFAULT_OVERLAP
) -> list[Chunk]:
    """Split ``text`` into chunks of at most ``budget`` characters with sentence-aligned overlap.

    Each chunk's metadata names the paragraphs it touches (``paragraph_first``,
    ``paragraph_last``, 0-based) for citations. A blank document gives no chunks.
    """
    if budget < 1:
        raise ValueError(f"chunk budget must be positive, got {budget}")
    if not 0 <= overlap < budget:
        raise ValueError(f"chunk overlap must be in [0, {budget}), got {overlap}")
    paragraphs = _paragraph_spans(text)
    if not paragraphs:
        return []
    starts = sentence_starts(text)
    segments: list[tuple[int, int]] = []
    for start, end in paragraphs:
        if end - start <= budget:
            segments.append((start, end))
        else:  # pieces leave room for the overlap, so a long paragraph's pieces overlap too
            segments.extend(_split_paragraph(text, start, end, starts, budget - overlap))

    paragraph_starts = [start for start, _ in paragraphs]
    chunks: list[Chunk] = []
    chunk_start = segments[0][0]
    i = 0
    while True:
        j = i
        while j + 1 < len(segments) and segments[j + 1][1] - chunk_start <= budget:
            j += 1
        chunk_end = segments[j][1]
        chunks.append(
            Chunk(
                ordinal=len(chunks),
                text=text[chunk_start:chunk_end],
                start=chunk_start,
                metadata={
                    "paragraph_first": str(bisect.bisect_right(paragraph_starts, chunk_start) - 1),
                    "paragraph_last": str(bisect.bisect_right(paragraph_starts, chunk_end - 1) - 1),
                },
            )
        )
        if j + 1 == len(segments):
            return chunks
        i = j + 1
        resumed = _overlap_start(starts, (chunk_start, chunk_end), segments[i][1], budget, overlap)
        chunk_start = segments[i][0] if resumed is None else resumed


def _thread_names(names: Iterable[str], cap: int) -> tuple[str, ...]:
    kept: dict[str, str] = {}
    for name in names:
        cleaned = " ".join(name.split())
        if cleaned and cleaned.lower() not in kept:
            if len(kept) >= cap:
                break
            kept[cleaned.lower()] = cleaned
    return tuple(kept.values())


def build_context(
    title: str | None,
    source: str | None,
    known_names: Iterable[str] = (),
    vocabulary: Iterable[str] = (),
    cap: int = DEFAULT_CONTEXT_CAP,
) -> DocumentContext:
    """The context for a document's chunks: title, source, canonical names so far, vocabulary.

    Names are whitespace-collapsed and de-duplicated ignoring case; the first ``cap`` seen are
    kept. First-seen rather than most recent, because a document's early entities are usually
    its subjects, and a stable prefix keeps the context — part of the extraction cache key —
    from changing on every chunk.
    """
    if cap < 0:
        raise ValueError(f"context name cap must not be negative, got {cap}")
    return DocumentContext(
        title=title,
        source=source,
        known_names=_thread_names(known_names, cap),
        vocabulary=tuple(vocabulary),
    )


def extend_context(
    context: DocumentContext, names: Iterable[str], cap: int = DEFAULT_CONTEXT_CAP
) -> DocumentContext:
    """``context`` with the canonical names resolved from one more chunk appended (capped)."""
    return replace(context, known_names=_thread_names((*context.known_names, *names), cap))
