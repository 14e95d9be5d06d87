"""Dual-level query keywords (paper §7.2, after Guo et al. 2024).

Low-level keywords name concrete things (capitalised phrases, quoted strings, identifiers
such as part numbers or statutes); they sharpen the entity query vector and seed the walk
by exact name. High-level keywords are the remaining content words — themes — and steer
relation ranking in global mode. Both feed the full-text channel.

Keyword extraction is the one place a lexical fallback is acceptable: a weak keyword list
is never persisted and only widens retrieval. A model-backed extractor is an injected async
callable; when it fails or returns nothing usable, the lexical list is used and the
response says so (``source``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAX_KEYWORDS = 12
"""Per level; a longer list only dilutes full-text ranking."""


@dataclass(frozen=True)
class Keywords:
    """The two keyword levels of one query."""

    low: tuple[str, ...]
    """Concrete names, in the order the query gives them."""
    high: tuple[str, ...]
    """Themes (lowercase content words)."""
    source: str = "lexical"
    """``lexical`` or ``model``."""

    @property
    def all(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for k in (*self.low, *self.high):
            seen.setdefault(k, None)
        return tuple(seen)


KeywordModel = Callable[[str], Awaitable[Keywords]]
"""A model-backed extractor: query text → keywords (``source="model"``)."""

_STOP = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    either few for from further had has have having he her here hers him his how i if in
    into is it its itself just me more most my neither no nor not now of off on once only
    or other our ours out over own same she should so some such than that the their theirs
    them then there these they this those through to too under until up very was we were
    what when where which while who whom whose why will with would you your yours
    tell show give list describe explain find say said know known many much whether
    does did done get got make made way ways thing things anything something
    """.split()
)
_QUESTION_WORDS = frozenset(
    "what who whom whose which when where why how is are was were do does did can could "
    "should would will tell list name describe explain show give find".split()
)
_QUOTED = re.compile(r"\"([^\"]{1,200})\"|“([^”]{1,200})”")
_TOKEN = re.compile(r"[^\W_][\w.'’&/-]*", re.UNICODE)
_IDENTIFIER = re.compile(r"^(?=.*\d)[\w./§-]{2,}$|^[A-Z]{2,}[\w-]*$")


def lexical_keywords(query: str) -> Keywords:
    """Keywords from the query's surface alone: deterministic, no model."""
    low: list[str] = []
    for m in _QUOTED.finditer(query):
        phrase = (m.group(1) or m.group(2) or "").strip()
        if phrase:
            low.append(phrase)
    text = _QUOTED.sub(" , ", query)
    tokens: list[tuple[str, bool]] = []  # (token, punctuation before it)
    last_end = 0
    for m in _TOKEN.finditer(text):
        tok = _strip(m.group())
        if tok:
            tokens.append((tok, bool(text[last_end : m.start()].strip())))
        last_end = m.end()
    high: list[str] = []
    run: list[str] = []

    def close_run() -> None:
        if run:
            low.append(" ".join(run))
            run.clear()

    for i, (tok, broken) in enumerate(tokens):
        if broken:  # "Ada Lovelace, Charles Babbage" names two things, not one
            close_run()
        is_name = tok[:1].isupper() and not (i == 0 and tok.lower() in _QUESTION_WORDS)
        if _IDENTIFIER.match(tok) and not tok.isdigit() or is_name and tok.lower() not in _STOP:
            run.append(tok)
            continue
        close_run()
        word = tok.lower()
        if word not in _STOP and len(word) > 2 and not word.isdigit():
            high.append(word)
        elif word.isdigit() and len(word) == 4:
            low.append(word)  # a year is a concrete anchor
    close_run()
    return Keywords(_dedupe(low), _dedupe(high))


async def extract_keywords(query: str, model: KeywordModel | None = None) -> Keywords:
    """Model keywords when a model is given and answers usefully, lexical otherwise."""
    if model is not None:
        try:
            found = await model(query)
        except Exception as exc:  # noqa: BLE001 - keywords only widen retrieval (paper §7.2)
            log.warning("keyword model failed, using lexical keywords: %s", exc)
        else:
            low = _dedupe([k.strip() for k in found.low if k.strip()])
            high = _dedupe([k.strip().lower() for k in found.high if k.strip()])
            if low or high:
                return Keywords(low, high, "model")
    return lexical_keywords(query)


KEYWORD_PROMPT = (
    "Extract search keywords from the question below. Return only a JSON object "
    '{"low_level": [...], "high_level": [...]}: low_level lists the concrete things it '
    "names (people, organisations, places, products, identifiers, dates) exactly as "
    "written; high_level lists the themes or concepts it asks about, as short lowercase "
    "phrases. At most 8 of each.\n\nQuestion: "
)
"""What a model-backed :data:`KeywordModel` asks its chat model (the question follows)."""


def parse_model_keywords(text: str) -> Keywords:
    """The model's answer to :data:`KEYWORD_PROMPT`; raises ``ValueError`` when unusable."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("keyword model answered without a JSON object")
    try:
        obj = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"keyword model answered malformed JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError("keyword model answered JSON that is not an object")

    def strings(key: str) -> tuple[str, ...]:
        items = obj.get(key) or []
        if not isinstance(items, list):
            raise ValueError(f"keyword model's {key!r} is not a list")
        return tuple(str(x).strip() for x in items if isinstance(x, str | int) and str(x).strip())

    return Keywords(strings("low_level"), strings("high_level"), "model")


def websearch_text(keywords: tuple[str, ...]) -> str:
    """An OR of the keywords in ``websearch_to_tsquery`` syntax (phrases quoted)."""
    parts = []
    for k in keywords:
        clean = re.sub(r"[\"'()!:&|<>\\-]+", " ", k).strip()
        if not clean:
            continue
        parts.append(f'"{clean}"' if " " in clean else clean)
    return " or ".join(parts)


def _strip(token: str) -> str:
    return token.strip(".'’&/-")


def _dedupe(items: list[str]) -> tuple[str, ...]:
    seen: dict[str, str] = {}
    for item in items:
        seen.setdefault(item.lower(), item)
    return tuple(seen.values())[:MAX_KEYWORDS]
