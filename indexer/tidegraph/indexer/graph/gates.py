"""The validation gates of paper Table 2: what of an extractor's output may become graph structure.

The extractor is untrusted; these checks are deterministic and stated as rejections, never
repairs. A record that cannot be made into a well-formed assertion is dropped and reported
as a :class:`Rejection` (record, gate, reason), never guessed at.

Entity names (and each alias) are checked in this order, first failure reported:

- ``empty_name`` — nothing left after collapsing whitespace (a precondition, not in Table 2).
- ``over_long_name`` — longer than ``GateConfig.max_name_length`` (200): a table row returned
  as a name would overflow the unique index.
- ``pronominal_name`` — a pronoun (``he``, ``they``, ``this``; an all-capitals ``US`` or
  ``IT`` is an acronym and passes), a possessive or demonstrative determiner followed only by
  lowercase words (``his father``, ``this company``; ``My Fair Lady`` passes), or ``the`` plus
  lowercase words ending in a generic referent (``the company``, ``the young man``).
- ``bare_quantity`` — an amount with optional currency, sign, scale and unit
  (``$18.4 billion``, ``2.5%``, ``$1,326``, ``42``, ``EUR 3m``). A bare year such as ``1984``
  is rejected too: a date is a relation's period, not a vertex.
- ``conjunctive_name`` — a bare conjunction of proper-noun phrases, read strictly: every
  conjunct joined by ``and``/``&``/commas is two or more capitalised words (name particles
  such as ``van`` or ``de`` allowed inside). ``Ada Lovelace and Charles Babbage`` is
  rejected; ``Procter and Gamble``, ``War and Peace``, ``Romeo and Juliet`` (one-word
  conjuncts) and ``Harry Potter and the Philosopher's Stone`` (a lowercase word) survive
  as the single named things they usually are.
- ``possessive_name`` — opt-in (``GateConfig.reject_possessive``): a possessive followed only
  by lowercase words, ``Babbage's father``. Off by default because it also rejects
  ``Ampère's force law``.

A rejected alias only drops that alias; the entity survives. Relations are checked in this
order: ``orphaned_endpoint`` (an endpoint fails a name gate or names a rejected entity — a
stub would reintroduce it), ``vague_predicate`` (after normalisation, matched up to
inflection; an empty predicate counts), ``self_loop`` (the same name, or two names of one
entity in this chunk), ``confidence_floor``.

Accepted records come back in canonical form: names whitespace-collapsed, predicates
normalised with a leading negation folded into the ``negated`` flag (``never_worked_with`` →
``worked_with``, negated), validity dates normalised (vague ones become ``None``). Endpoints
the extractor did not return as entities come back as bare ``Concept`` stubs. Snapping onto
a realm vocabulary is a separate step (:class:`tidegraph.indexer.graph.predicates.Vocabulary`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from tidegraph.indexer.graph.predicates import split_negation, stem_key
from tidegraph.indexer.graph.validity import normalize_period
from tidegraph.schemas import CandidateEntity, CandidateRelation, ExtractionOutput

__all__ = [
    "DEFAULT_CONFIDENCE_FLOOR",
    "VAGUE_PREDICATES",
    "Gate",
    "GateConfig",
    "GateResult",
    "Rejection",
    "apply_gates",
    "check_name",
]

DEFAULT_CONFIDENCE_FLOOR = 0.3
"""Below this a relation is a hedge, not a fact. Not 0.0, which would make the gate inert;
low enough that any assertion an extractor states with some conviction passes."""

VAGUE_PREDICATES = frozenset(
    {"relates_to", "related_to", "related", "relation", "relationship", "relationship_with",
     "has_relation", "has_relation_to", "has_relation_with", "has_relationship",
     "has_relationship_with", "associated_with", "association_with", "see_also",
     "connected_to", "connected_with", "connection_to", "connection_with", "linked_to",
     "linked_with", "link_to", "involves", "involved_with", "co_occurs_with", "occurs_with",
     "appears_with", "mentioned_with", "mentions", "pertains_to", "refers_to", "about",
     "has", "is"}
)  # fmt: skip
"""Connectors so generic that an edge labelled with one is indistinguishable from no edge."""


class Gate(StrEnum):
    """The gate that rejected a record; values are stable names for reports and metrics."""

    EMPTY_NAME = "empty_name"
    OVER_LONG_NAME = "over_long_name"
    PRONOMINAL_NAME = "pronominal_name"
    BARE_QUANTITY = "bare_quantity"
    CONJUNCTIVE_NAME = "conjunctive_name"
    POSSESSIVE_NAME = "possessive_name"
    ORPHANED_ENDPOINT = "orphaned_endpoint"
    VAGUE_PREDICATE = "vague_predicate"
    SELF_LOOP = "self_loop"
    CONFIDENCE_FLOOR = "confidence_floor"


GATE_HINTS: dict[Gate, str] = {
    Gate.EMPTY_NAME: "a name was empty",
    Gate.OVER_LONG_NAME: "a name was longer than the longest accepted",
    Gate.PRONOMINAL_NAME: "a pronoun or generic reference ('he', 'the company') stood where a"
    " name should, with no earlier name to resolve it to",
    Gate.BARE_QUANTITY: "a bare number or quantity stood where a name should",
    Gate.CONJUNCTIVE_NAME: "two names joined by 'and' were read as one",
    Gate.POSSESSIVE_NAME: "a possessive phrase ('his father') stood where a name should",
    Gate.ORPHANED_ENDPOINT: "a relation lost an end to another gate",
    Gate.VAGUE_PREDICATE: "the verb was too vague to mean anything ('is related to', 'has')",
    Gate.SELF_LOOP: "a relation joined a name to itself",
    Gate.CONFIDENCE_FLOOR: "the statement was hedged ('reportedly', 'may have') and fell below"
    " the confidence floor",
}
"""Why a gate refuses, in words for a failed document's reason."""


@dataclass(frozen=True)
class GateConfig:
    """Tunable parts of the gates; the defaults are the paper's."""

    confidence_floor: float = DEFAULT_CONFIDENCE_FLOOR
    """Relations with a confidence below this are rejected (a NaN confidence always is)."""
    max_name_length: int = 200
    """Longest entity name or alias accepted, in characters after whitespace collapsing."""
    reject_possessive: bool = False
    """Opt in to the possessive role-phrase gate (``Babbage's father``)."""
    vague_predicates: frozenset[str] = VAGUE_PREDICATES
    """Normalised predicates rejected as vague; matching ignores inflection."""
    _vague_keys: frozenset[tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys = frozenset(stem_key(split_negation(p)[0]) for p in self.vague_predicates)
        object.__setattr__(self, "_vague_keys", keys)

    def is_vague(self, predicate: str) -> bool:
        """Whether a normalised predicate is one of the vague connectors (up to inflection)."""
        return not predicate or stem_key(predicate) in self._vague_keys


@dataclass(frozen=True)
class Rejection:
    """One record a gate refused, for the indexing report."""

    record: CandidateEntity | CandidateRelation
    """The record as the extractor returned it."""
    gate: Gate
    """Which gate refused it."""
    reason: str
    """Human-readable detail naming the offending value."""
    alias: str | None = None
    """Set when only this alias of an otherwise accepted entity was dropped."""


@dataclass(frozen=True)
class GateResult:
    """What survived the gates for one chunk, and what did not."""

    entities: tuple[CandidateEntity, ...]
    """Accepted entities in canonical form, followed by the ``Concept`` stubs."""
    relations: tuple[CandidateRelation, ...]
    """Accepted relations in canonical form."""
    rejections: tuple[Rejection, ...]
    """Refused entities and aliases, then refused relations, each in input order."""
    stubs: tuple[str, ...] = ()
    """Names of the ``Concept`` stubs created for endpoints without an entity record."""


_PRONOUNS = frozenset(
    {"i", "me", "my", "mine", "myself", "you", "your", "yours", "yourself", "he", "him", "his",
     "himself", "she", "her", "hers", "herself", "it", "its", "itself", "we", "us", "our",
     "ours", "ourselves", "they", "them", "their", "theirs", "themselves", "this", "that",
     "these", "those", "who", "whom", "whose", "which", "what", "someone", "somebody",
     "something", "anyone", "anybody", "anything", "everyone", "everybody", "everything",
     "nobody", "nothing", "one", "another", "other", "others", "each", "both", "either",
     "neither", "former", "latter", "the former", "the latter", "the same", "here", "there"}
)  # fmt: skip
_DETERMINERS = frozenset(
    {"my", "your", "his", "her", "its", "our", "their", "this", "that", "these", "those",
     "such", "said", "whose"}
)  # fmt: skip
_GENERIC_REFERENTS = frozenset(
    {"company", "companies", "firm", "business", "corporation", "organisation", "organization",
     "group", "team", "agency", "government", "institution", "entity", "man", "men", "woman",
     "women", "boy", "girl", "child", "children", "person", "people", "couple", "family",
     "author", "writer", "king", "queen", "father", "mother", "son", "daughter", "brother",
     "sister", "husband", "wife", "parents", "friend", "country", "city", "project",
     "product", "device", "machine", "book", "paper", "report", "study", "article",
     "document", "subject", "individual", "party", "parties", "latter", "former", "same",
     "other", "others", "chairman", "ceo", "founder", "board", "management", "segment",
     "subsidiary", "partner", "client", "customer", "user", "users", "researchers",
     "scientist", "inventor", "engineer", "mathematician"}
)  # fmt: skip
_CURRENCY = r"(?:(?i:usd|us\$|eur|gbp|jpy|chf|cad|aud|cny|inr)\s?|[$€£¥₹])"
_NUMBER = r"[+\-−]?\d[\d,.\u00a0 ]*"
_SCALE = r"(?i:thousand|million|billion|trillion|bn|mn|tn|mm|bps)"
_UNIT = (
    r"(?i:%|percent|per\s?cent|pct|percentage\s+points?|pp|basis\s+points?|dollars?|euros?"
    r"|pounds?|yen|shares?|units?|usd|eur|gbp)"
)
_QUANTITY = re.compile(
    # After a currency a one-letter scale may be either case ($3M); without one it must be
    # lowercase (42k), so that 3M the company is still a name.
    rf"[(~≈]?\s*(?:{_CURRENCY}\s*{_NUMBER}(?:\s*(?:{_SCALE}|[mkbMKB]))?"
    rf"|{_NUMBER}(?:\s*(?:{_SCALE}|[mkbx]))?)(?:\s*{_UNIT})?\s*\)?"
)
_WORD = r"(?:[A-ZÀ-ÖØ-Þ][\w'’.\-&]*)"
_PARTICLE = r"(?:van|von|de|der|den|da|di|du|del|della|des|la|le|bin|ibn|al|el|y|dos|das|ter)"
_PROPER_PHRASE = rf"{_WORD}(?:\s+(?:{_PARTICLE}\s+)*{_WORD})+"
_CONJUNCTION = re.compile(
    rf"{_PROPER_PHRASE}(?:\s*,\s*{_PROPER_PHRASE})*\s*,?\s+(?:and|&)\s+{_PROPER_PHRASE}"
)
_POSSESSIVE = re.compile(r".*\S(?:'s|’s|s'|s’)(?:\s+[a-z][\w\-]*)+")


def _clean(name: str) -> str:
    return " ".join(name.split())


def check_name(name: str, config: GateConfig) -> tuple[Gate, str] | None:
    """The first name gate ``name`` fails, with a reason, or ``None`` when it passes."""
    cleaned = _clean(name)
    if not cleaned:
        return Gate.EMPTY_NAME, "name is empty"
    if len(cleaned) > config.max_name_length:
        limit = config.max_name_length
        return Gate.OVER_LONG_NAME, f"name is {len(cleaned)} characters, over {limit}"
    if _is_pronominal(cleaned):
        return Gate.PRONOMINAL_NAME, f"{cleaned!r} refers to something named elsewhere"
    if _QUANTITY.fullmatch(cleaned):
        return Gate.BARE_QUANTITY, f"{cleaned!r} is a figure, not an entity"
    if _CONJUNCTION.fullmatch(cleaned):
        return Gate.CONJUNCTIVE_NAME, f"{cleaned!r} names several entities"
    if config.reject_possessive and _POSSESSIVE.fullmatch(cleaned):
        return Gate.POSSESSIVE_NAME, f"{cleaned!r} names a role, not an entity"
    return None


def _is_pronominal(name: str) -> bool:
    lowered = name.lower().strip(".,;:!?\"'“”‘’()")
    if lowered in _PRONOUNS:
        return len(name) == 1 or not name.isupper()  # "US", "IT" are acronyms
    words = lowered.split()
    rest = name.split()[1:]
    if len(words) < 2 or any(not w[:1].islower() for w in rest):
        return False
    if words[0] in _DETERMINERS:
        return True
    return words[0] == "the" and words[-1] in _GENERIC_REFERENTS


def apply_gates(output: ExtractionOutput, config: GateConfig | None = None) -> GateResult:
    """Run every gate over one chunk's extraction output (paper §4.3, Table 2)."""
    config = config or GateConfig()
    rejections: list[Rejection] = []
    verdicts: dict[str, tuple[Gate, str] | None] = {}

    def verdict(name: str) -> tuple[Gate, str] | None:
        if name not in verdicts:
            verdicts[name] = check_name(name, config)
        return verdicts[name]

    entities: list[CandidateEntity] = []
    rejected_names: dict[str, tuple[Gate, str]] = {}
    for entity in output.entities:
        failed = verdict(entity.name)
        if failed is not None:
            rejections.append(Rejection(entity, failed[0], failed[1]))
            rejected_names.setdefault(_clean(entity.name).lower(), failed)
            continue
        name = _clean(entity.name)
        aliases: dict[str, str] = {}
        for alias in entity.aliases:
            cleaned = _clean(alias)
            if not cleaned or cleaned.lower() == name.lower() or cleaned.lower() in aliases:
                continue
            alias_failed = verdict(cleaned)
            if alias_failed is not None:
                reason = f"alias dropped: {alias_failed[1]}"
                rejections.append(Rejection(entity, alias_failed[0], reason, alias=alias))
                continue
            aliases[cleaned.lower()] = cleaned
        entity_type = _clean(entity.type) or "Concept"
        entities.append(
            CandidateEntity(
                name=name,
                type=entity_type,
                description=entity.description.strip(),
                aliases=list(aliases.values()),
            )
        )

    owners: dict[str, set[int]] = {}
    for i, entity in enumerate(entities):
        for form in (entity.name, *entity.aliases):
            owners.setdefault(form.lower(), set()).add(i)

    relations: list[CandidateRelation] = []
    stubs: dict[str, str] = {}
    for relation in output.relations:
        accepted = _gate_relation(relation, config, verdict, rejected_names, owners)
        if isinstance(accepted, Rejection):
            rejections.append(accepted)
            continue
        relations.append(accepted)
        for endpoint in (accepted.subject, accepted.object):
            key = endpoint.lower()
            if key not in owners and key not in stubs:
                stubs[key] = endpoint
    entities.extend(CandidateEntity(name=stub, type="Concept") for stub in stubs.values())
    return GateResult(tuple(entities), tuple(relations), tuple(rejections), tuple(stubs.values()))


def _gate_relation(
    relation: CandidateRelation,
    config: GateConfig,
    verdict: Callable[[str], tuple[Gate, str] | None],
    rejected_names: dict[str, tuple[Gate, str]],
    owners: dict[str, set[int]],
) -> CandidateRelation | Rejection:
    subject, obj = _clean(relation.subject), _clean(relation.object)
    for role, endpoint in (("subject", subject), ("object", obj)):
        failed = verdict(endpoint) or rejected_names.get(endpoint.lower())
        if failed is not None:
            reason = f"{role} rejected by {failed[0].value}: {failed[1]}"
            return Rejection(relation, Gate.ORPHANED_ENDPOINT, reason)
    predicate, denied = split_negation(relation.predicate)
    if config.is_vague(predicate):
        shown = predicate or relation.predicate
        return Rejection(relation, Gate.VAGUE_PREDICATE, f"{shown!r} names no specific relation")
    subject_owners = owners.get(subject.lower(), set())
    if subject.lower() == obj.lower() or subject_owners & owners.get(obj.lower(), set()):
        return Rejection(relation, Gate.SELF_LOOP, f"{subject!r} and {obj!r} are one entity")
    confidence = relation.confidence
    if math.isnan(confidence) or confidence < config.confidence_floor:
        floor = config.confidence_floor
        return Rejection(relation, Gate.CONFIDENCE_FLOOR, f"confidence {confidence} < {floor}")
    valid_from, valid_to = normalize_period(relation.valid_from, relation.valid_to)
    return CandidateRelation(
        subject=subject,
        predicate=predicate,
        object=obj,
        description=relation.description.strip(),
        negated=relation.negated or denied,
        confidence=confidence,
        valid_from=valid_from,
        valid_to=valid_to,
    )
