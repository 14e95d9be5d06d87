"""Entity resolution within one space: by canonical name, then alias (paper §4.6).

Two records are the same entity when they share a surface form — a name or an alias,
compared case-insensitively. Merging follows the paper's rule that a more specific value
never loses to a placeholder:

- The longest *name* becomes canonical and the others are demoted to aliases, so
  ``Babbage`` upgrades to ``Charles Babbage`` and never the reverse. Aliases never become
  canonical by length alone (an extractor's alias may be a long epithet); one that later
  arrives as a name competes like any other. Equal lengths: the lexicographically smallest
  lowercased form wins.
- Each case-insensitive form keeps one spelling: mixed case over all-lower or all-upper
  (``Charles Babbage`` over ``charles babbage``), then the smallest in code-point order.
- A bare ``Concept`` never overwrites a specific type; two specific types resolve to the
  alphabetically first, an arbitrary but order-free choice.
- The longest description wins; equal lengths, the lexicographically smallest.
- Aliases are the union of every surface form seen, minus the canonical name.

Each rule picks an extreme of a total order over the values seen, so :func:`merge_records` is
commutative and associative. Matching is symmetric (a new name may hit a stored alias, and a
new alias a stored name), and a candidate that matches two stored records merges them. So
the entities of a space are the connected components of "shares a surface form" over
everything ever mentioned, and their records do not depend on arrival order — the
property the tests check over permutations. It relies on the store keeping each
lowercased surface form on at most one record, which resolving through this module
maintains.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tidegraph.schemas import CandidateEntity

__all__ = [
    "CONCEPT",
    "EntityRecord",
    "Resolution",
    "Resolved",
    "merge_records",
    "pick_description",
    "pick_type",
    "resolve_chunk",
    "short_forms",
    "surface_forms",
]

CONCEPT = "Concept"
"""The placeholder type of stubs and unspecified entities."""


def _clean(text: str) -> str:
    return " ".join(text.split())


def _spelling_key(spelling: str) -> tuple[bool, str]:
    return (spelling.islower() or spelling.isupper(), spelling)


def _canonical_key(form: str) -> tuple[int, str]:
    return (-len(form), form)


def _description_key(description: str) -> tuple[int, str]:
    return (-len(description), description)


def _is_concept(entity_type: str) -> bool:
    return not entity_type or entity_type.lower() == CONCEPT.lower()


def pick_type(types: Iterable[str]) -> str:
    """The type a set of statements settles on: the alphabetically first specific one (an
    order-free choice), ``Concept`` when none is specific."""
    specific = sorted(t for t in types if not _is_concept(t))
    return specific[0] if specific else CONCEPT


def pick_description(descriptions: Iterable[str]) -> str:
    """The description a set of statements settles on: the longest, equal lengths the
    smallest in code-point order; empty when there is none."""
    return min(descriptions, key=_description_key, default="")


@dataclass(frozen=True)
class EntityRecord:
    """An entity's resolvable values; equal records are the same stored state."""

    name: str
    """Canonical name, whitespace-collapsed."""
    type: str = CONCEPT
    """Entity type; ``Concept`` means unspecified."""
    description: str = ""
    """The longest description seen."""
    aliases: tuple[str, ...] = ()
    """Other surface forms, one spelling per lowercased form, sorted; never the name."""

    def __post_init__(self) -> None:
        name = _clean(self.name)
        if not name:
            raise ValueError("an entity record needs a non-empty name")
        spellings: dict[str, str] = {}
        for alias in map(_clean, self.aliases):
            key = alias.lower()
            if not alias:
                continue
            if key == name.lower():  # a better spelling of the name itself
                name = min(name, alias, key=_spelling_key)
                continue
            best = spellings.get(key)
            if best is None or _spelling_key(alias) < _spelling_key(best):
                spellings[key] = alias
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "type", _clean(self.type) or CONCEPT)
        object.__setattr__(self, "description", self.description.strip())
        object.__setattr__(self, "aliases", tuple(sorted(spellings.values())))

    @classmethod
    def from_candidate(cls, candidate: CandidateEntity) -> EntityRecord:
        """The record a single accepted candidate would create."""
        return cls(candidate.name, candidate.type, candidate.description, tuple(candidate.aliases))

    @property
    def forms(self) -> frozenset[str]:
        """Lowercased name and aliases: what this record can be found by."""
        return surface_forms(self)


def short_forms(names: Iterable[str]) -> dict[str, str]:
    """Single words that stand for a longer name, lowercased → that name: the last word
    of exactly one of the multi-word ``names`` (``babbage`` → ``Charles Babbage``). A word
    that ends two different names stands for neither.

    The rule by which a short form in a text is taken for a name the same document already
    gave in full: the rules extractor applies it to the names threaded to a chunk, the
    extraction pipeline to the names of a whole document after extracting its chunks."""
    found: dict[str, str] = {}
    ambiguous: set[str] = set()
    for name in names:
        words = name.split()
        if len(words) > 1:
            last = words[-1].lower()
            if found.setdefault(last, name) != name:
                ambiguous.add(last)
    return {word: name for word, name in found.items() if word not in ambiguous}


def surface_forms(record: EntityRecord | CandidateEntity) -> frozenset[str]:
    """Lowercased, whitespace-collapsed name and aliases of a record or candidate."""
    forms = {_clean(record.name).lower(), *(_clean(a).lower() for a in record.aliases)}
    forms.discard("")
    return frozenset(forms)


def merge_records(records: Iterable[EntityRecord]) -> EntityRecord:
    """One record for entities known to be the same; any order, any grouping, same result."""
    items = list(records)
    if not items:
        raise ValueError("nothing to merge")
    spellings: dict[str, str] = {}
    for record in items:
        for form in (record.name, *record.aliases):
            key = form.lower()
            best = spellings.get(key)
            if best is None or _spelling_key(form) < _spelling_key(best):
                spellings[key] = form
    canonical = min((r.name.lower() for r in items), key=_canonical_key)
    return EntityRecord(
        name=spellings[canonical],
        type=pick_type(r.type for r in items),
        description=pick_description(r.description for r in items),
        aliases=tuple(s for k, s in spellings.items() if k != canonical),
    )


@dataclass(frozen=True)
class Resolved:
    """One entity after resolving a chunk: what to write and which stored rows it replaces."""

    record: EntityRecord
    """The merged values to store."""
    existing: EntityRecord | None
    """The stored record to update in place (its row keeps its id); ``None`` inserts a new one."""
    absorbed: tuple[EntityRecord, ...] = ()
    """Other stored records this candidate proved to be the same entity: re-point their
    mentions and relations to ``existing`` and remove them."""

    @property
    def changed(self) -> bool:
        """Whether the store has anything to write for this entity."""
        return self.existing != self.record or bool(self.absorbed)


@dataclass(frozen=True)
class Resolution:
    """The entities of one chunk after resolution, and where each surface form now points."""

    entities: tuple[Resolved, ...]
    """One per distinct entity the chunk mentions, ordered by lowercased canonical name."""
    _by_form: Mapping[str, EntityRecord] = field(repr=False, compare=False)

    def lookup(self, name: str) -> EntityRecord:
        """The resolved record a candidate surface form (e.g. a relation endpoint) names."""
        return self._by_form[_clean(name).lower()]

    def canonical(self, name: str) -> str:
        """Canonical name for a surface form of this chunk; ``KeyError`` if it named nothing."""
        return self.lookup(name).name

    def same_entity(self, a: str, b: str) -> bool:
        """Whether two surface forms resolved to one entity (a self-loop after resolution)."""
        return self.canonical(a).lower() == self.canonical(b).lower()


def resolve_chunk(
    candidates: Sequence[CandidateEntity | EntityRecord],
    lookup: Mapping[str, EntityRecord],
) -> Resolution:
    """Resolve a chunk's accepted candidates against stored records of the same space.

    ``lookup`` maps a lowercased surface form (name or alias) to the stored record carrying
    it; the store may fill it with just the rows found for the candidates' forms (see
    :func:`surface_forms`). Candidates that share a form with each other merge as well.
    """
    records = [
        c if isinstance(c, EntityRecord) else EntityRecord.from_candidate(c) for c in candidates
    ]
    nodes: list[EntityRecord] = list(records)
    stored: dict[str, int] = {}  # lowercased stored name → node index
    pending = [form for record in records for form in record.forms]
    while pending:
        found = lookup.get(pending.pop())
        if found is not None and found.name.lower() not in stored:
            stored[found.name.lower()] = len(nodes)
            nodes.append(found)
            pending.extend(found.forms)

    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for form in node.forms:
            j = owner.setdefault(form, i)
            if root(i) != root(j):
                parent[root(i)] = root(j)

    components: dict[int, list[int]] = {}
    for i in range(len(nodes)):
        components.setdefault(root(i), []).append(i)

    is_stored = set(stored.values())
    resolved: list[Resolved] = []
    by_form: dict[str, EntityRecord] = {}
    for members in components.values():
        if not any(i < len(records) for i in members):
            continue  # stored records no candidate reached
        merged = merge_records(nodes[i] for i in members)
        existing = sorted(
            (nodes[i] for i in members if i in is_stored),
            key=lambda r: (r.name.lower() != merged.name.lower(), _canonical_key(r.name.lower())),
        )
        resolved.append(Resolved(merged, existing[0] if existing else None, tuple(existing[1:])))
        for i in members:
            for form in nodes[i].forms:
                by_form[form] = merged
    resolved.sort(key=lambda r: r.record.name.lower())
    return Resolution(tuple(resolved), by_form)
