"""Realm configuration (CONTRACT.md, "Realm configuration") and its presets.

A realm fixes, at creation, how predicates are normalised and superseded (vocabulary, alias
map, exclusive groups, functional predicates) and which extractor and embedder build it.
The embedder id includes its dimension and never changes afterwards: vectors of two
geometries cannot be compared.

Presets follow the paper (§4.5, §5.2, §8.10): ``biography`` a 35-term vocabulary,
``finance`` 32 predicates in 8 exclusive groups, ``narrative`` the relationship group
``{friend_of, enemy_of, rival_of, ally_of, opponent_of}``.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple, get_args

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tidegraph.schemas._validation import Problem, RecordValidationError, problems_from

PREDICATE_PATTERN = r"^[a-z][a-z0-9_]*$"
EMBEDDER_HELP = "llm:<model>:<dimension> or hashing:<dimension>"
MAX_DIMENSION = 16000
"""pgvector's limit for the ``vector`` type."""

_PREDICATE = re.compile(PREDICATE_PATTERN)
Extractor = Literal["llm", "rules"]
FunctionalSide = Literal["subject", "object"]
"""The end a functional predicate holds one of: ``subject`` — at most one current object
per subject (``lives_in``); ``object`` — at most one current subject per object
(``ceo_of``: a company has one chief executive)."""
FUNCTIONAL_SIDES: tuple[FunctionalSide, ...] = get_args(FunctionalSide)


class EmbedderSpec(NamedTuple):
    """A parsed embedder id."""

    kind: Literal["llm", "hashing"]
    """``llm``: an OpenAI-compatible embeddings endpoint; ``hashing``: offline, deterministic."""
    model: str | None
    """Model name for ``llm`` (may itself contain colons); ``None`` for ``hashing``."""
    dimension: int
    """Vector dimension, pinned for the realm's lifetime."""

    def __str__(self) -> str:
        if self.kind == "hashing":
            return f"hashing:{self.dimension}"
        return f"llm:{self.model}:{self.dimension}"


def parse_embedder(text: str) -> EmbedderSpec:
    """Parse ``llm:<model>:<dim>`` or ``hashing:<dim>``; raises ``ValueError`` naming the form."""
    kind, _, rest = text.partition(":")
    model: str | None
    if kind == "hashing":
        model, dim_text = None, rest
        spec_kind: Literal["llm", "hashing"] = "hashing"
    elif kind == "llm":
        spec_kind = "llm"
        model, _, dim_text = rest.rpartition(":")
        if not model:
            raise ValueError(f"embedder {text!r} names no model; expected {EMBEDDER_HELP}")
    else:
        raise ValueError(f"embedder {text!r}: expected {EMBEDDER_HELP}")
    if not dim_text.isascii() or not dim_text.isdigit() or not 1 <= int(dim_text) <= MAX_DIMENSION:
        raise ValueError(f"embedder {text!r}: dimension must be an integer in 1..{MAX_DIMENSION}")
    return EmbedderSpec(spec_kind, model, int(dim_text))


def _predicate(value: str, what: str) -> str:
    if not _PREDICATE.fullmatch(value):
        raise ValueError(f"{what} {value!r} must be a normalised predicate ({PREDICATE_PATTERN})")
    return value


class RealmConfig(BaseModel):
    """How a realm normalises, supersedes, extracts and embeds. Unknown keys are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="RealmConfig")

    vocabulary: tuple[str, ...] = Field(
        (), description="Controlled predicates the extractor is steered towards and snapped to."
    )
    predicate_aliases: dict[str, str] = Field(
        default_factory=dict, description="Explicit merges of unrelated wordings: alias → target."
    )
    exclusive_groups: tuple[frozenset[str], ...] = Field(
        (), description="Predicates that cannot co-hold on one ordered pair; later one wins."
    )
    symmetric_predicates: frozenset[str] = Field(
        frozenset(),
        description="Predicates that hold both ways (`worked_with`, `married_to` …): "
        "`A p B` and `B p A` state one fact, stored once per unordered pair (one edge, "
        "whose weight counts both directions' statements, superseded across directions), "
        "so answers carry it once, with both directions' documents, and a question naming "
        "either side asks about it in the role it gives. Empty by default; each preset "
        "names its own.",
    )
    functional_predicates: dict[str, FunctionalSide] = Field(
        default_factory=dict,
        description="Predicates with at most one current value, each with the end it is a "
        "function of: `subject` (one object per subject: `lives_in`) or `object` (one "
        "subject per object: `ceo_of`). Of the asserted relations with such a predicate "
        "that share that end, the latest by `order_key` is current and supersedes the "
        "others (mechanism `functional`); retracting it restores the one before. A denial "
        "only ever supersedes the assertion it denies. A symmetric predicate cannot be "
        "functional. Fixed at realm creation; each preset names its own.",
    )
    contradiction_model: bool = Field(
        False,
        description="Ask the model about the residue the declared rules cannot see: two "
        "asserted relations with one subject and one predicate (neither functional nor "
        "symmetric) and different objects, e.g. `lives_in Paris` and `lives_in Berlin` "
        "when `lives_in` is not declared functional. A yes makes the later one by "
        "`order_key` supersede the earlier (mechanism `model`). Answers are cached in the "
        "realm by the two rendered relations and the prompt version, so a replay asks "
        "nothing again; a model outage pauses the realm, never guesses. Needs a model "
        "endpoint; fixed at realm creation. Off by default.",
    )
    coverage_telemetry: bool = Field(
        False,
        description="Record, per query, a hash of the query text (never the text), the "
        "entities and communities the answer touched, and when (paper §6.1): what the "
        "coverage endpoints and retention read. A failed record is logged and counted, "
        "never fails the query. Off by default.",
    )
    extractor: Extractor = Field("rules", description="`llm` or the offline `rules` extractor.")
    embedder: str = Field("hashing:384", description=EMBEDDER_HELP + "; fixed at realm creation.")

    @field_validator("vocabulary")
    @classmethod
    def _vocabulary(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for p in value:
            _predicate(p, "vocabulary entry")
        if len(set(value)) != len(value):
            raise ValueError("vocabulary entries must be distinct")
        return value

    @field_validator("predicate_aliases")
    @classmethod
    def _aliases(cls, value: dict[str, str]) -> dict[str, str]:
        for alias, target in value.items():
            _predicate(alias, "alias")
            _predicate(target, "alias target")
            if target in value:
                raise ValueError(f"alias target {target!r} is itself an alias (no chains)")
        return value

    @field_validator("exclusive_groups")
    @classmethod
    def _groups(cls, value: tuple[frozenset[str], ...]) -> tuple[frozenset[str], ...]:
        for group in value:
            if len(group) < 2:
                raise ValueError("an exclusive group needs at least two distinct predicates")
            for p in group:
                _predicate(p, "exclusive group member")
        return value

    @field_validator("symmetric_predicates")
    @classmethod
    def _symmetric(cls, value: frozenset[str]) -> frozenset[str]:
        for p in value:
            _predicate(p, "symmetric predicate")
        return value

    @field_validator("functional_predicates")
    @classmethod
    def _functional(cls, value: dict[str, FunctionalSide]) -> dict[str, FunctionalSide]:
        for p in value:
            _predicate(p, "functional predicate")
        return value

    @model_validator(mode="after")
    def _functional_not_symmetric(self) -> RealmConfig:
        both = sorted(set(self.functional_predicates) & self.symmetric_predicates)
        if both:
            raise ValueError(
                f"{', '.join(both)}: a symmetric predicate cannot be functional"
                " (its two directions state one fact, so neither end is the key)"
            )
        return self

    @field_validator("embedder")
    @classmethod
    def _embedder(cls, value: str) -> str:
        return str(parse_embedder(value))

    @property
    def embedder_spec(self) -> EmbedderSpec:
        """The parsed ``embedder``."""
        return parse_embedder(self.embedder)

    def groups_of(self, predicate: str) -> tuple[frozenset[str], ...]:
        """The exclusive groups ``predicate`` belongs to."""
        return tuple(g for g in self.exclusive_groups if predicate in g)

    def differences(self, other: RealmConfig) -> list[str]:
        """How ``other`` differs from this configuration, one phrase per setting (``adds …``,
        ``drops …``, ``old → new``); empty when they agree.

        Order does not matter for vocabulary and groups, so the same file created twice
        compares equal however the database returned it.
        """
        found: list[str] = []
        if set(self.vocabulary) != set(other.vocabulary):
            found.append(_set_change("vocabulary", set(self.vocabulary), set(other.vocabulary)))
        if self.predicate_aliases != other.predicate_aliases:
            found.append(f"predicate_aliases {self.predicate_aliases} ≠ {other.predicate_aliases}")
        if set(self.exclusive_groups) != set(other.exclusive_groups):
            mine = {",".join(sorted(g)) for g in self.exclusive_groups}
            theirs = {",".join(sorted(g)) for g in other.exclusive_groups}
            found.append(_set_change("exclusive_groups", mine, theirs))
        if self.symmetric_predicates != other.symmetric_predicates:
            # how relations are stored (once per unordered pair), not only how answered
            found.append(
                _set_change(
                    "symmetric_predicates",
                    set(self.symmetric_predicates),
                    set(other.symmetric_predicates),
                )
            )
        if self.functional_predicates != other.functional_predicates:
            mine = {f"{p}:{side}" for p, side in self.functional_predicates.items()}
            theirs = {f"{p}:{side}" for p, side in other.functional_predicates.items()}
            found.append(_set_change("functional_predicates", mine, theirs))
        for name in ("contradiction_model", "extractor", "embedder"):
            if getattr(self, name) != getattr(other, name):
                found.append(f"{name} {getattr(self, name)!r} → {getattr(other, name)!r}")
        return found

    def to_json(self) -> bytes:
        """The contract's JSON form (groups as sorted lists, so output is stable)."""
        body = self.model_dump(mode="json")
        body["exclusive_groups"] = [sorted(g) for g in self.exclusive_groups]
        body["symmetric_predicates"] = sorted(self.symmetric_predicates)
        body["functional_predicates"] = dict(sorted(self.functional_predicates.items()))
        return orjson.dumps(body, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes | str) -> RealmConfig:
        """Parse a configuration file's content; raises :class:`RecordValidationError`."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            problem = Problem("$", f"malformed JSON ({exc})")
            raise RecordValidationError("realm config", [problem]) from None
        try:
            return cls.model_validate(obj)
        except ValidationError as exc:
            raise RecordValidationError("realm config", problems_from(exc)) from None


def _set_change(name: str, before: set[str], after: set[str], shown: int = 4) -> str:
    def listed(items: set[str]) -> str:
        ordered = sorted(items)
        more = f" (+{len(ordered) - shown} more)" if len(ordered) > shown else ""
        return " ".join(f"[{item}]" if "," in item else item for item in ordered[:shown]) + more

    parts = []
    if after - before:
        parts.append("adds " + listed(after - before))
    if before - after:
        parts.append("drops " + listed(before - after))
    return f"{name} {' and '.join(parts)}"


DEFAULT_REALM_CONFIG = RealmConfig()
"""Service defaults: no vocabulary, rules extractor, ``hashing:384`` embedder."""


def _g(*predicates: str) -> frozenset[str]:
    return frozenset(predicates)


_BIOGRAPHY_GROUPS: tuple[frozenset[str], ...] = (
    _g("works_at", "left"),
    _g("married_to", "divorced_from"),
    _g("member_of", "resigned_from"),
    _g("appointed_to", "dismissed_from"),
    _g("lives_in", "moved_from"),
    _g("friend_of", "rival_of"),
    _g("supported", "opposed"),
)
_BIOGRAPHY_VOCABULARY: tuple[str, ...] = (
    "born_in", "died_in", "lives_in", "moved_from", "educated_at", "studied_under", "taught",
    "mentored", "works_at", "left", "founded", "led", "member_of", "resigned_from",
    "married_to", "divorced_from", "parent_of", "child_of", "sibling_of", "friend_of",
    "rival_of", "worked_with", "designed", "invented", "wrote", "composed", "discovered",
    "published", "awarded", "influenced", "supported", "opposed", "succeeded", "appointed_to",
    "dismissed_from",
)  # fmt: skip
_BIOGRAPHY_ALIASES = {
    "collaborated_with": "worked_with",
    "employed_by": "works_at",
    "worked_for": "works_at",
    "spouse_of": "married_to",
    "studied_at": "educated_at",
    "attended": "educated_at",
    "authored": "wrote",
    "resided_in": "lives_in",
    "lived_in": "lives_in",
    "won": "awarded",
    "founder_of": "founded",
    "headed": "led",
}

_FINANCE_GROUPS: tuple[frozenset[str], ...] = (
    _g("generates_cash_flow", "consumes_cash"),
    _g("grounds", "certifies"),
    _g("increases_revenue", "reduces_revenue"),
    _g("reports_profit", "reports_loss"),
    _g("incurs_charge", "reverses_charge"),
    _g("acquires", "divests"),
    _g("raises_guidance", "lowers_guidance"),
    _g("increases_debt", "repays_debt"),
)
_FINANCE_VOCABULARY: tuple[str, ...] = (
    "generates_cash_flow", "consumes_cash", "grounds", "certifies", "increases_revenue",
    "reduces_revenue", "reports_profit", "reports_loss", "incurs_charge", "reverses_charge",
    "acquires", "divests", "raises_guidance", "lowers_guidance", "increases_debt",
    "repays_debt", "owns", "subsidiary_of", "competes_with", "supplies", "customer_of",
    "partners_with", "invests_in", "employs", "led_by", "headquartered_in", "operates_in",
    "produces", "regulates", "audits", "pays_dividend", "repurchases_shares",
)  # fmt: skip
_FINANCE_ALIASES = {
    "bought": "acquires",
    "sold": "divests",
    "competitor_of": "competes_with",
    "supplier_to": "supplies",
    "audited_by_firm": "audits",
    "collaborates_with": "partners_with",
    "manufactures": "produces",
}

_NARRATIVE_GROUPS: tuple[frozenset[str], ...] = (
    _g("friend_of", "enemy_of", "rival_of", "ally_of", "opponent_of"),
    _g("loves", "hates"),
    _g("married_to", "divorced_from"),
    _g("serves", "rebels_against"),
    _g("trusts", "distrusts"),
)
_NARRATIVE_VOCABULARY: tuple[str, ...] = (
    "friend_of", "enemy_of", "rival_of", "ally_of", "opponent_of", "loves", "hates",
    "married_to", "divorced_from", "parent_of", "child_of", "sibling_of", "serves",
    "rebels_against", "trusts", "distrusts", "mentor_of", "member_of", "leads", "rules",
    "betrayed", "rescued", "killed", "lives_in", "travels_to", "owns", "located_in",
)  # fmt: skip
_NARRATIVE_ALIASES = {
    "befriended": "friend_of",
    "fought_alongside": "ally_of",
    "fought_against": "opponent_of",
    "spouse_of": "married_to",
    "mentored": "mentor_of",
    "resides_in": "lives_in",
}

_SYMMETRIC = {
    "biography": _g(
        "worked_with", "married_to", "divorced_from", "sibling_of", "friend_of", "rival_of"
    ),
    "finance": _g("competes_with", "partners_with"),
    "narrative": _g(
        "friend_of", "enemy_of", "rival_of", "ally_of", "opponent_of", "married_to",
        "divorced_from", "sibling_of", "worked_with",
    ),
}  # fmt: skip

_FUNCTIONAL: dict[str, dict[str, FunctionalSide]] = {
    "biography": {"born_in": "subject", "died_in": "subject", "lives_in": "subject"},
    "finance": {"headquartered_in": "subject", "led_by": "subject"},
    "narrative": {"lives_in": "subject", "located_in": "subject", "rules": "object"},
}
"""Predicates of one current value in each preset: where someone lives, where a company is
headquartered and who leads it, where a place lies, who rules a realm."""

PresetName = Literal["biography", "finance", "narrative"]
PRESET_NAMES: tuple[PresetName, ...] = ("biography", "finance", "narrative")


def preset(
    name: PresetName, *, extractor: Extractor = "rules", embedder: str = "hashing:384"
) -> RealmConfig:
    """A preset's vocabulary, aliases and groups with the given extractor and embedder."""
    if name == "biography":
        vocab, aliases, groups = _BIOGRAPHY_VOCABULARY, _BIOGRAPHY_ALIASES, _BIOGRAPHY_GROUPS
    elif name == "finance":
        vocab, aliases, groups = _FINANCE_VOCABULARY, _FINANCE_ALIASES, _FINANCE_GROUPS
    elif name == "narrative":
        vocab, aliases, groups = _NARRATIVE_VOCABULARY, _NARRATIVE_ALIASES, _NARRATIVE_GROUPS
    else:
        raise ValueError(f"unknown preset {name!r}; expected one of {', '.join(PRESET_NAMES)}")
    return RealmConfig(
        vocabulary=vocab,
        predicate_aliases=dict(aliases),
        exclusive_groups=groups,
        symmetric_predicates=_SYMMETRIC[name],
        functional_predicates=dict(_FUNCTIONAL[name]),
        extractor=extractor,
        embedder=embedder,
    )
