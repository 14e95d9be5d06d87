"""Predicate normalisation, vocabulary snapping and exclusive groups (paper §4.5, §5.2).

Left alone, extraction produces about one predicate per relation. Three steps make
predicates queryable without changing what they mean:

1. :func:`normalize_predicate` — lowercase, underscore-joined, punctuation stripped, leading
   tense auxiliaries and articles removed, so ``was_appointed_knight_of`` and
   ``appointed_knight_of`` are one predicate. A negation word is kept (``never_worked_with``)
   because dropping it would invert the fact; :func:`split_negation` turns it into the flag.
2. :class:`Vocabulary` snapping — an exact vocabulary term, then the explicit alias map, then
   a *stem match*: same number of tokens, and each token equal or equal after removing one
   inflectional ending (``-s``, ``-es``, ``-ed``, ``-ing``, ``-e``; ``-ies``/``-ied`` → ``-y``;
   tokens of three letters or fewer must be identical). ``design`` and ``designs`` reach
   ``designed``; ``worked_at`` reaches ``works_at``. Because token counts and prepositions must
   agree, ``employed_by`` never reaches ``employs`` and ``educated_by`` never reaches
   ``taught``: inverses are never merged by rule, only by an alias the realm wrote down.
3. :func:`exclusive_group_of` — which declared group of mutually exclusive predicates, if any,
   a predicate belongs to.

Known limit of the stem rule: irregular forms collide or miss (``found``, the past of *find*,
meets ``founded``; ``taught`` never meets ``teaches``). The alias map is the remedy.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Vocabulary",
    "exclusive_group_of",
    "exclusive_groups_of",
    "group_index",
    "normalize_predicate",
    "split_negation",
    "stem_key",
]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_CONTRACTION = re.compile(r"n['’]t\b", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\W_]+")

_BE = frozenset({"is", "was", "were", "are", "am", "be", "been", "being"})
_HAVE = frozenset({"has", "have", "had", "having"})
_MODAL = frozenset(
    {"will", "would", "shall", "should", "can", "could", "may", "might", "must", "do", "does",
     "did", "ca", "wo"}
)  # fmt: skip
"""``ca``/``wo`` are what ``can't``/``won't`` leave once ``n't`` is split off."""
_ARTICLES = frozenset({"a", "an", "the"})
_NEGATIONS = frozenset({"not", "never"})
_FUNCTION_WORDS = _BE | _HAVE | _MODAL | _ARTICLES | _NEGATIONS
_IRREGULAR_PARTICIPLES = frozenset(
    {"been", "seen", "taken", "given", "written", "known", "shown", "grown", "drawn", "won",
     "made", "built", "taught", "bought", "sold", "told", "found", "left", "lost", "held",
     "met", "run", "become", "begun", "done", "gone", "brought", "thought", "fought", "sent",
     "spent", "kept", "paid", "said", "put", "set", "read", "led", "chosen", "driven",
     "spoken", "broken", "stolen", "risen", "fallen", "forgotten", "hidden", "beaten", "born"}
)  # fmt: skip
_SUFFIXES: tuple[tuple[str, str], ...] = (
    ("ies", "y"),
    ("ied", "y"),
    ("ing", ""),
    ("ed", ""),
    ("es", ""),
    ("s", ""),
    ("e", ""),
)
_MIN_STEM = 3


def _tokens(raw: str) -> list[str]:
    text = _CONTRACTION.sub(" not", raw)
    text = _CAMEL.sub("_", text).lower()
    return [t for t in _SEPARATORS.split(text) if t]


def _is_participle(token: str) -> bool:
    return token.endswith("ed") or token in _IRREGULAR_PARTICIPLES


def _strip_auxiliaries(tokens: list[str], *, through_negation: bool) -> tuple[list[str], bool]:
    """Drop leading auxiliaries and articles while a content word remains after them.

    ``has``/``have``/``had`` count as auxiliaries only before a participle, ``been`` or a
    negation, so ``has_child`` and ``has_subsidiary`` keep their meaning. With
    ``through_negation`` leading ``not``/``never`` are dropped too and reported.
    """
    content = [i for i, t in enumerate(tokens) if t not in _FUNCTION_WORDS]
    if not content:
        return tokens, False
    last_strippable = content[0]
    negated = False
    i = 0
    while i < last_strippable:
        token, following = tokens[i], tokens[i + 1]
        if token in _BE or token in _MODAL or token in _ARTICLES:
            i += 1
        elif token in _HAVE and (
            following in _BE or following in _NEGATIONS or _is_participle(following)
        ):
            i += 1
        elif token in _NEGATIONS and through_negation:
            negated = True
            i += 1
        else:
            break
    return tokens[i:], negated


def normalize_predicate(raw: str) -> str:
    """Lowercase, underscore-joined, punctuation stripped, leading auxiliaries removed.

    ``"Was Appointed Knight Of"`` → ``appointed_knight_of``; ``worksAt`` → ``works_at``;
    ``did_not_work_with`` → ``not_work_with`` (the negation survives; see
    :func:`split_negation`). Returns ``""`` when nothing alphanumeric is left.
    """
    tokens, _ = _strip_auxiliaries(_tokens(raw), through_negation=False)
    return "_".join(tokens)


@functools.lru_cache(maxsize=16384)
def split_negation(raw: str) -> tuple[str, bool]:
    """Normalise, moving a leading negation into the flag: ``never_worked_with`` → ``worked_with``.

    The paper stores denials as the positive predicate plus a flag, so that a traversal on
    ``worked_with`` also sees the denial and nobody has to parse English out of an identifier.
    Memoised: every relation of every chunk passes through here twice (gate, vocabulary),
    and a corpus says the same few predicates over and over.
    """
    tokens, negated = _strip_auxiliaries(_tokens(raw), through_negation=True)
    if negated:
        tokens, _ = _strip_auxiliaries(tokens, through_negation=False)
    return "_".join(tokens), negated


def _stem(token: str) -> str:
    if len(token) <= _MIN_STEM:
        return token
    for suffix, replacement in _SUFFIXES:
        if not token.endswith(suffix):
            continue
        stem = token[: -len(suffix)] + replacement
        if len(stem) < _MIN_STEM:
            continue
        if suffix in ("ed", "ing") and len(stem) > _MIN_STEM and stem[-1] == stem[-2]:
            if stem[-1] not in "aeiouslz":  # stopped → stop, but passed and called stay whole
                stem = stem[:-1]
        return stem
    return token


@functools.lru_cache(maxsize=16384)
def stem_key(predicate: str) -> tuple[str, ...]:
    """The key two predicates must share to be the same relation up to inflection (memoised:
    a realm's predicates are few and every relation of every chunk asks)."""
    return tuple(_stem(t) for t in predicate.split("_") if t)


@dataclass(frozen=True)
class Vocabulary:
    """A realm's controlled predicate vocabulary and alias map, with snapping precomputed."""

    terms: tuple[str, ...] = ()
    """Controlled predicates, normalised."""
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Explicit merges, normalised alias → target (``collaborated_with`` → ``worked_with``)."""
    _term_set: frozenset[str] = field(init=False, repr=False, compare=False)
    _by_stem: dict[tuple[str, ...], str] = field(init=False, repr=False, compare=False)
    _alias_by_stem: dict[tuple[str, ...], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        terms = tuple(dict.fromkeys(p for p in map(normalize_predicate, self.terms) if p))
        aliases = {normalize_predicate(a): normalize_predicate(t) for a, t in self.aliases.items()}
        aliases = {a: t for a, t in aliases.items() if a and t and a != t}
        by_stem: dict[tuple[str, ...], str] = {}
        for term in sorted(terms):  # sorted: the first term in code-point order wins a shared stem
            by_stem.setdefault(stem_key(term), term)
        alias_by_stem: dict[tuple[str, ...], str] = {}
        for alias in sorted(aliases):
            alias_by_stem.setdefault(stem_key(alias), aliases[alias])
        object.__setattr__(self, "terms", terms)
        object.__setattr__(self, "aliases", aliases)
        object.__setattr__(self, "_term_set", frozenset(terms))
        object.__setattr__(self, "_by_stem", by_stem)
        object.__setattr__(self, "_alias_by_stem", alias_by_stem)

    def snap(self, predicate: str) -> str:
        """The vocabulary form of an already normalised predicate, or the predicate itself.

        Order: exact term, exact alias, term by stem match, alias by stem match. Predicates
        matching none survive unchanged: a long tail of specific predicates is by design.
        """
        if predicate in self._term_set:
            return predicate
        target = self.aliases.get(predicate)
        if target is not None:
            return target
        key = stem_key(predicate)
        return self._by_stem.get(key) or self._alias_by_stem.get(key) or predicate

    def canonical(self, raw: str) -> tuple[str, bool]:
        """Normalise, fold negation into a flag, then snap: the full path of §4.5."""
        predicate, negated = split_negation(raw)
        return self.snap(predicate), negated


def exclusive_groups_of(predicate: str, groups: Sequence[Collection[str]]) -> frozenset[int]:
    """Indexes of every group containing ``predicate`` (groups may overlap, as presets do)."""
    p = normalize_predicate(predicate)
    return frozenset(
        i for i, group in enumerate(groups) if p in {normalize_predicate(g) for g in group}
    )


def exclusive_group_of(predicate: str, groups: Sequence[Collection[str]]) -> int | None:
    """Index of the first group containing ``predicate``, or ``None`` when it is in none."""
    found = exclusive_groups_of(predicate, groups)
    return min(found) if found else None


def group_index(groups: Iterable[Collection[str]]) -> dict[str, frozenset[int]]:
    """Predicate → indexes of the groups it belongs to, for resolving many relations at once."""
    index: dict[str, set[int]] = {}
    for i, group in enumerate(groups):
        for member in group:
            index.setdefault(normalize_predicate(member), set()).add(i)
    return {p: frozenset(ids) for p, ids in index.items()}
