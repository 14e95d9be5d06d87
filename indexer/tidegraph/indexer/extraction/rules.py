"""``rules:1``: a deterministic extractor from English sentence patterns, with no model.

It exists so that tidegraph runs end to end offline, and so that every write-path feature
has input that exercises it: typed entities, aliases, negation, stated periods, exclusive
predicates, vocabulary snapping, and records the gates must refuse. It is not meant to be
a good extractor: it reads capitalised name phrases and a fixed list of verb patterns.

Entities and types
    ``X, a mathematician, …`` / ``X is an English company`` give a type from a cue word
    (Person, Organization, Location, Work, Product, Event) and a description; relations
    imply some types (``married`` → two Persons, ``works at`` → an Organization).
Aliases
    ``X, also known as Y``, ``X (Y)``, ``X, called Y``, ``nicknamed "Y"``. A single-word name
    that ends exactly one multi-word name in ``context.known_names`` is written as that
    name, with the short form as alias; a known name is written in its known spelling.
Relations (predicate emitted)
    worked/works with → ``worked_with``; collaborated with → ``collaborated_with`` (for the
    alias map); designed → ``designed``, designs → ``designs`` (for vocabulary snapping);
    works at/for, joined, is employed by → ``works_at``; left, quit, no longer works at →
    ``left``; married, is married to → ``married_to``; founded → ``founded``; acquired,
    bought → ``acquired``; is/became a(n) ally/enemy/friend/rival/opponent/member/… of →
    ``ally_of``, ``enemy_of``, …; invented, wrote, taught, mentored, led, … similarly;
    passives (``Y was founded by X``) are turned round; ``is related to`` and friends
    produce the vague predicates the gates reject.
Negation
    never / not / did not / is not … → ``negated``.
Periods
    from … to/until …, between … and …, since …, until …, in … (a year, month or date) after
    the relation, or leading the sentence (``In 1834, …``).
Hedges
    may have, reportedly, allegedly, possibly, probably, perhaps … → confidence 0.2, below
    the default floor; plain statements get 0.9.
Pronouns
    ``He``/``She`` as subject resolve to the latest Person mentioned before them in the chunk
    (a Person subject, or a name typed Person by ``X, a mathematician``); otherwise, like
    ``his father`` or ``the company``, they are emitted as written for the gates to reject.

Every regular expression is compiled once; name phrases use possessive quantifiers so no
pattern backtracks over a run of capitalised words.
"""

# Long on purpose: the sentence patterns are data tuned together with the extractor that applies
# them.
from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass, field

from tidegraph.indexer.extraction.chunking import sentence_starts
from tidegraph.indexer.extraction.interfaces import Chunk, DocumentContext
from tidegraph.indexer.graph import normalize_date, short_forms
from tidegraph.schemas import CandidateEntity, CandidateRelation, ExtractionOutput

__all__ = ["HEDGED_CONFIDENCE", "STATED_CONFIDENCE", "RulesExtractor"]

STATED_CONFIDENCE = 0.9
"""Confidence of a plainly stated relation."""
HEDGED_CONFIDENCE = 0.2
"""Confidence of a hedged one ("may have", "reportedly"): below the default gate floor."""
_MAX_DESCRIPTION = 300

# --- name phrases --------------------------------------------------------------------------

_UP = "A-ZÀ-ÖØ-Þ"
_W_REST = r"(?:(?:r|rs|s|rof|t|ir)\.|\.|[\w'’\-]*+(?:&[\w'’\-]++)?)"
"""A capitalised word after its first letter: ``Dr.``, an initial ``C.``, ``O'Brien``, ``AT&T``."""
_W = rf"(?:[{_UP}]{_W_REST})"
_JOIN = r"(?:of(?:\s+the)?|van|von|de|da|di|du|der|den|del|della|la|le|bin|ibn|al|y|&)"
_NAME_TAIL = rf"(?:[ \t]+(?:{_JOIN}[ \t]+)?{_W})*+"  # names never cross a line break
_NAME = rf"(?:{_W}{_NAME_TAIL})"
# Patterns that scan a whole chunk start with one character class and a word-boundary check
# placed after it, so the regex engine can skip ahead to capital letters.
_START = rf"[{_UP}](?<!\w\w)"
_SCAN_NAME = rf"(?:{_START}{_W_REST}{_NAME_TAIL})"
_SCAN_SUBJECT = (
    rf"(?:{_START}(?:(?<=H)(?:is|er)\s+[a-z]+|(?<=T)heir\s+[a-z]+|(?<=I)ts\s+[a-z]+"
    rf"|(?<=T)he\s+(?:company|firm|man|woman|group|latter|former)(?!\w)"
    rf"|{_W_REST}{_NAME_TAIL}))"
)
_PRONOUN = (
    r"(?:He|She|They|It|(?:His|Her|Their|Its)\s+[a-z]+"
    r"|The\s+(?:company|firm|man|woman|group|latter|former))"
)
_OBJECT = rf"(?:(?:the\s+)?{_NAME})"
_OBJECTS = rf"{_OBJECT}(?:\s*,\s*{_OBJECT})*+(?:\s*,?\s+and\s+{_OBJECT})?"
_STARTERS = frozenset(
    {"the", "a", "an", "later", "however", "in", "on", "at", "after", "before", "then", "when",
     "while", "although", "though", "meanwhile", "eventually", "today", "also", "yet", "but",
     "and", "since", "during", "despite", "under", "by", "with", "from", "for", "as", "this",
     "that", "these", "those", "there", "here", "thus", "so", "still", "now", "once", "soon",
     "initially", "finally", "subsequently", "afterwards", "both", "each", "every", "until",
     "earlier", "first", "next", "instead", "indeed", "nevertheless", "moreover", "furthermore",
     "similarly", "likewise", "unlike", "like", "according", "some", "many", "most", "all",
     "if", "because", "whereas", "unfortunately", "fortunately", "notably", "together"}
)  # fmt: skip
_PRONOUNS = frozenset({"he", "she"})
"""Subjects resolved to the last Person named as a subject in the chunk."""
_NOT_NAMES = frozenset({"he", "she", "it", "they", "we", "i", "you", "this", "that", "there"})
_PRONOUN_RE = re.compile(_PRONOUN)

# --- relation patterns --------------------------------------------------------------------


@dataclass(frozen=True)
class _Verb:
    """One relation pattern: the verb phrase, what it emits, and the types it implies."""

    pattern: str
    predicate: str
    subject_type: str | None = None
    object_type: str | None = None
    passive: bool = False
    onset: bool = False
    """An event that starts a state (joined, married): "in 1835" dates its start only."""


_BE = r"(?:is|was|were|are|has\s+been|had\s+been|have\s+been)"
_PERSON, _ORG, _LOC, _WORK = "Person", "Organization", "Location", "Work"
_VERBS: tuple[_Verb, ...] = (
    _Verb(r"no\s+longer\s+(?:works?|worked)\s+(?:at|for)", "left", _PERSON, _ORG),
    _Verb(r"(?:worked|works|work|working)\s+(?:closely\s+)?(?:together\s+)?with", "worked_with"),
    _Verb(r"(?:collaborated|collaborates|collaborate)\s+with", "collaborated_with"),
    _Verb(r"(?:corresponded|corresponds|correspond)\s+with", "corresponded_with", _PERSON, _PERSON),
    _Verb(r"(?:studied|studies)\s+with", "studied_with", _PERSON, _PERSON),
    _Verb(r"(?:worked|works|work|working)\s+(?:at|for)", "works_at", _PERSON, _ORG),
    _Verb(rf"{_BE}\s+employed\s+(?:at|by)", "works_at", _PERSON, _ORG),
    _Verb(r"(?:re)?joined|joins|join", "works_at", _PERSON, _ORG, onset=True),
    _Verb(r"left|leaves|leave|quit|quits|departed\s+from", "left", _PERSON, _ORG, onset=True),
    _Verb(r"resigned\s+from", "resigned_from", _PERSON, _ORG, onset=True),
    _Verb(rf"{_BE}\s+married\s+to", "married_to", _PERSON, _PERSON),
    _Verb(r"married|marries|marry|wed", "married_to", _PERSON, _PERSON, onset=True),
    _Verb(rf"{_BE}\s+divorced\s+from", "divorced_from", _PERSON, _PERSON),
    _Verb(r"divorced", "divorced_from", _PERSON, _PERSON, onset=True),
    _Verb(rf"{_BE}\s+(?:designed|developed)\s+by", "designed", passive=True),
    _Verb(r"designed|design|developed|develop", "designed"),
    _Verb(r"designs|develops", "designs"),
    _Verb(rf"{_BE}\s+(?:co-?)?founded\s+by", "founded", _PERSON, _ORG, passive=True, onset=True),
    _Verb(r"(?:co-?)?founded|(?:co-?)?founds", "founded", _PERSON, _ORG, onset=True),
    _Verb(
        rf"{_BE}\s+(?:acquired|bought|purchased)\s+by", "acquired", _ORG, passive=True, onset=True
    ),
    _Verb(r"acquired|acquires|acquire|bought|buys|purchased", "acquired", _ORG, onset=True),
    _Verb(rf"{_BE}\s+invented\s+by", "invented", _PERSON, passive=True),
    _Verb(r"invented|invents", "invented", _PERSON),
    _Verb(rf"{_BE}\s+written\s+by", "wrote", _PERSON, _WORK, passive=True),
    _Verb(r"wrote|writes|authored", "wrote", _PERSON, _WORK),
    _Verb(r"(?:studied|studies)\s+at|(?:was|were)\s+educated\s+at", "educated_at", _PERSON, _ORG),
    _Verb(r"(?:studied|studies)\s+under", "studied_under", _PERSON, _PERSON),
    _Verb(r"taught|teaches", "taught", _PERSON),
    _Verb(r"mentored|mentors", "mentored", _PERSON, _PERSON),
    _Verb(r"influenced|influences", "influenced"),
    _Verb(r"succeeded|succeeds", "succeeded"),
    _Verb(r"supported|supports", "supported"),
    _Verb(r"opposed|opposes", "opposed"),
    _Verb(r"befriended", "friend_of", _PERSON, _PERSON),
    _Verb(r"betrayed|betrays", "betrayed"),
    _Verb(r"(?:led|leads|headed|heads)(?!\s+to\b)", "led"),
    _Verb(r"owns|owned", "owns"),
    _Verb(r"(?:was|were)\s+born\s+in", "born_in", _PERSON, _LOC, onset=True),
    _Verb(r"died\s+in", "died_in", _PERSON, _LOC, onset=True),
    _Verb(r"(?:lives|lived|resides|resided)\s+in", "lives_in", _PERSON, _LOC),
    _Verb(r"(?:is|was|were|are)\s+(?:closely\s+)?related\s+to", "related_to"),
    _Verb(r"(?:is|was|were|are)\s+(?:closely\s+)?associated\s+with", "associated_with"),
    _Verb(r"(?:is|was|were|are)\s+(?:closely\s+)?(?:connected|linked)\s+to", "connected_to"),
    _Verb(r"(?:is|was|were|are|became|remained)\s+allied\s+with|allied\s+with", "ally_of"),
)
_ROLE_NOUNS: dict[str, tuple[str, str | None, str | None]] = {
    "ally": ("ally_of", None, None),
    "allies": ("ally_of", None, None),
    "enemy": ("enemy_of", None, None),
    "enemies": ("enemy_of", None, None),
    "friend": ("friend_of", None, None),
    "friends": ("friend_of", None, None),
    "rival": ("rival_of", None, None),
    "rivals": ("rival_of", None, None),
    "opponent": ("opponent_of", None, None),
    "opponents": ("opponent_of", None, None),
    "member": ("member_of", None, _ORG),
    "members": ("member_of", None, _ORG),
    "mentor": ("mentor_of", _PERSON, _PERSON),
    "student": ("student_of", _PERSON, None),
    "pupil": ("student_of", _PERSON, None),
    "partner": ("partner_of", None, None),
    "colleague": ("colleague_of", _PERSON, _PERSON),
    "wife": ("married_to", _PERSON, _PERSON),
    "husband": ("married_to", _PERSON, _PERSON),
    "spouse": ("married_to", _PERSON, _PERSON),
    "son": ("child_of", _PERSON, _PERSON),
    "daughter": ("child_of", _PERSON, _PERSON),
    "child": ("child_of", _PERSON, _PERSON),
    "father": ("parent_of", _PERSON, _PERSON),
    "mother": ("parent_of", _PERSON, _PERSON),
    "parent": ("parent_of", _PERSON, _PERSON),
    "brother": ("sibling_of", _PERSON, _PERSON),
    "sister": ("sibling_of", _PERSON, _PERSON),
    "sibling": ("sibling_of", _PERSON, _PERSON),
    "founder": ("founded", _PERSON, _ORG),
    "co-founder": ("founded", _PERSON, _ORG),
    "employee": ("works_at", _PERSON, _ORG),
    "ceo": ("ceo_of", _PERSON, _ORG),
    "president": ("president_of", _PERSON, None),
    "director": ("director_of", _PERSON, None),
    "chairman": ("chairman_of", _PERSON, _ORG),
    "subsidiary": ("subsidiary_of", _ORG, _ORG),
}
_ROLE_ADJECTIVES = (
    r"close|old|lifelong|sworn|bitter|great|loyal|trusted|staunch|fierce|former|long-?time|"
    r"chief|main|major|key|fellow|best|early|eldest|youngest|only|second|first|new|founding|"
    r"active|bitterest|closest|oldest|greatest"
)
_COPULA = (
    r"(?:is|was|were|are|became|becomes|become|remained|remains|remain|has\s+been|had\s+been"
    r"|have\s+been|turned\s+into)"
)
_ROLE = (
    rf"(?P<cop>{_COPULA})\s+(?:(?P<cneg>not|never|no\s+longer)\s+)?(?:(?:a|an|the)\s+)?"
    rf"(?:(?:{_ROLE_ADJECTIVES})\s+)*"
    rf"(?P<role>{'|'.join(sorted(_ROLE_NOUNS, key=len, reverse=True))})\s+(?:of|to|with)"
)
_NEGATION = (
    r"never|not|did\s+not|didn['’]t|does\s+not|doesn['’]t|do\s+not|don['’]t|has\s+never"
    r"|had\s+never|have\s+never|has\s+not|had\s+not|hasn['’]t|hadn['’]t|was\s+not|wasn['’]t"
    r"|is\s+not|isn['’]t|were\s+not|are\s+not|would\s+never|will\s+never|could\s+never"
)
_ADVERBS = (
    r"also|later|then|eventually|subsequently|briefly|once|first|soon|still|now|again|"
    r"initially|famously|reportedly|allegedly|probably|possibly|perhaps|apparently|likely|"
    r"actually|ultimately|finally|formally|officially|secretly|openly|publicly|closely|"
    r"may\s+have|might\s+have|could\s+have|must\s+have|is\s+said\s+to\s+have|"
    r"was\s+said\s+to\s+have|is\s+believed\s+to\s+have|was\s+believed\s+to\s+have|"
    r"is\s+rumou?red\s+to\s+have|was\s+rumou?red\s+to\s+have|went\s+on\s+to"
)
_HEDGE = re.compile(
    r"\b(?:may|might|could|reportedly|allegedly|possibly|probably|perhaps|apparently|likely"
    r"|said|believed|rumou?red)\b"
)
_RELATION = re.compile(
    rf"(?P<subj>{_SCAN_SUBJECT})"
    r"(?:\s*\([^()]{1,60}\))?"  # "International Business Machines (IBM) acquired …"
    r"(?:\s*,\s*[^,.;:!?()]{1,80}?,)?"  # an appositive between subject and verb
    rf"(?:\s+(?:{_ADVERBS}))*"
    rf"(?:\s+(?P<neg>{_NEGATION}))?"
    r"(?:\s+(?:has|have|had|will|would))?"
    rf"(?:\s+(?:{_ADVERBS}))*"
    r"\s+(?P<verb>"
    + "|".join(f"(?P<v{i}>{v.pattern})" for i, v in enumerate(_VERBS))
    + rf"|{_ROLE})"
    rf"\s+(?P<objs>{_OBJECTS})"
)
_SPLIT_OBJECTS = re.compile(r"\s*,\s*(?:and\s+)?|\s+and\s+")
_CLAUSE_BREAK = re.compile(r";|,\s*(?:who|which|whose|where|while|but|although|though|whereas)\b")

# --- entities: types, descriptions, aliases -------------------------------------------------

_TYPE_CUES: dict[str, str] = {
    **dict.fromkeys(
        "mathematician scientist engineer inventor writer author poet novelist philosopher "
        "physicist chemist astronomer economist politician statesman diplomat king queen "
        "prince princess duke duchess countess count earl lord lady baron emperor empress "
        "artist painter sculptor composer musician actor actress singer director "
        "entrepreneur businessman businesswoman founder executive ceo professor teacher "
        "student doctor physician surgeon lawyer judge soldier general admiral officer "
        "captain knight explorer journalist programmer developer designer architect banker "
        "investor man woman person boy girl daughter son father mother wife husband brother "
        "sister child detective wizard witch warrior merchant farmer priest bishop monk nun "
        "researcher analyst economist historian biologist botanist geologist linguist "
        "translator editor publisher critic pianist violinist conductor chef pilot sailor "
        "nurse manager chairman president minister senator governor mayor".split(),
        _PERSON,
    ),
    **dict.fromkeys(
        "company corporation firm startup business bank university college school institute "
        "institution society association organisation organization agency government ministry "
        "party club team foundation charity manufacturer retailer publisher laboratory lab "
        "conglomerate subsidiary airline enterprise studio band army navy guild council "
        "committee academy observatory museum library hospital consultancy partnership "
        "cooperative union league order brand carmaker automaker bakery brewery".split(),
        _ORG,
    ),
    **dict.fromkeys(
        "city town village country nation state province region island river mountain "
        "kingdom capital county port continent district valley lake sea ocean desert "
        "forest peninsula colony republic empire".split(),
        _LOC,
    ),
    **dict.fromkeys(
        "book novel poem play film movie paper essay treatise article song album opera "
        "symphony painting series magazine newspaper journal report manuscript".split(),
        _WORK,
    ),
    **dict.fromkeys(
        "engine machine computer device instrument tool product program programme software "
        "system vehicle car aircraft ship locomotive telescope calculator loom".split(),
        "Product",
    ),
    **dict.fromkeys("war battle conference treaty election expedition revolution".split(), "Event"),
}
_DESCRIPTION_END = r"(?=\s*(?:[,.;:()]|$|\s(?:who|which|that|and|from|since|until|between)\s))"
_APPOSITIVE = re.compile(
    rf"(?P<name>{_SCAN_NAME}),\s+(?P<desc>(?:a|an|the)\s+[^,.;:()]{{1,80}}?){_DESCRIPTION_END}"
)
_COPULA_TYPE = re.compile(
    rf"(?P<name>{_SCAN_NAME})\s+(?:is|was)\s+(?P<desc>(?:a|an|the)\s+[^,.;:()]{{1,80}}?)"
    rf"{_DESCRIPTION_END}"
)
_QUOTED = r"[\"“'‘](?P<qalias>[^\"”'’]{1,80})[\"”'’]"
_ALIAS = re.compile(
    rf"(?P<name>{_SCAN_NAME})\s*(?:,\s*|\(\s*)(?:also\s+|better\s+|commonly\s+|widely\s+|often\s+)?"
    rf"(?:known\s+as|called|nicknamed|dubbed|a\.?k\.?a\.?)\s+(?:{_QUOTED}|(?:the\s+)?(?P<alias>{_NAME}))"
)
_PARENTHESISED = re.compile(rf"(?P<name>{_SCAN_NAME})\s+\((?P<alias>{_NAME})\)")

# --- periods --------------------------------------------------------------------------------

_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?"
)
_DATE = (
    rf"(?:(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?)?{_MONTH},?\s+\d{{4}}"
    rf"|{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"
    r"|(?<![\d$€£.,])\d{4}(?:-\d{2}(?:-\d{2})?)?(?![\d%]))"
)
_PERIOD = re.compile(
    rf"\b(?i:from)\s+(?P<from>{_DATE})(?:\s*(?:to|until|till|through|[-–—])\s*(?P<to>{_DATE}))?"
    rf"|\b(?i:between)\s+(?P<bfrom>{_DATE})\s+and\s+(?P<bto>{_DATE})"
    rf"|\b(?i:since)\s+(?P<since>{_DATE})"
    rf"|\b(?i:until|till|up\s+to)\s+(?P<until>{_DATE})"
    rf"|\b(?i:in|during|on)\s+(?P<in>{_DATE})"
    rf"|\((?P<rfrom>{_DATE})\s*[-–—]\s*(?P<rto>{_DATE})\)"
)


def _period(text: str, onset: bool) -> tuple[str | None, str | None] | None:
    """The first stated period in ``text``; a point date bounds both ends unless ``onset``."""
    m = _PERIOD.search(text)
    if m is None:
        return None
    g = m.groupdict()
    if g["from"] is not None:
        return normalize_date(g["from"]), normalize_date(g["to"])
    if g["bfrom"] is not None:
        return normalize_date(g["bfrom"]), normalize_date(g["bto"])
    if g["since"] is not None:
        return normalize_date(g["since"]), None
    if g["until"] is not None:
        return None, normalize_date(g["until"])
    if g["in"] is not None:
        point = normalize_date(g["in"])
        return point, None if onset else point
    return normalize_date(g["rfrom"]), normalize_date(g["rto"])


# --- the extractor --------------------------------------------------------------------------


def _trim_name(raw: str) -> str:
    """Drop sentence starters, a leading article, a possessive ending and a final full stop."""
    if " " not in raw and not raw.endswith(("s", ".")):
        return raw
    words = raw.split()
    while len(words) > 1 and words[0].lower() in _STARTERS:
        words.pop(0)
    last = words[-1]
    if len(last) == 2 and last.endswith("."):  # an initial cannot end a name: it is a full stop
        words[-1] = last[0]
    name = " ".join(words)
    for ending in ("'s", "’s"):
        if name.endswith(ending):
            name = name[: -len(ending)]
    return name


_HEAD_END = frozenset({"of", "for", "to", "who", "which", "at", "in", "with", "from", "by"})


def _type_of(description: str) -> str | None:
    """Type of the head noun: the last cue word before a preposition or relative pronoun."""
    found = None
    for word in re.findall(r"[a-z][a-z\-]*", description.lower()):
        if word in _HEAD_END:
            break
        found = _TYPE_CUES.get(word, found)
    return found


@functools.lru_cache(maxsize=128)
def _known_index(known: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str]]:
    """Known names by lowercase form, and by the short form each stands for
    (:func:`~tidegraph.indexer.graph.resolution.short_forms`)."""
    return {n.lower(): n for n in known}, short_forms(known)


@dataclass
class _Entity:
    name: str
    type: str | None = None
    type_cued: bool = False
    description: str = ""
    aliases: list[str] = field(default_factory=list)


class _Collector:
    """Entities of one chunk, keyed by lowercased name, in order of first mention."""

    def __init__(self, context: DocumentContext) -> None:
        self.entities: dict[str, _Entity] = {}
        self.exact, self.by_last = _known_index(context.known_names)
        self.people: list[tuple[int, str]] = []
        """(offset, name) of each mention typed Person, in text order: pronoun antecedents."""

    def canonical(self, raw: str) -> str:
        name = _trim_name(raw)
        key = name.lower()
        if key in self.exact:
            return self.exact[key]
        if " " not in name and key in self.by_last:
            full = self.by_last[key]
            self.add(full).aliases.append(name)
            return full
        return name

    def add(self, name: str) -> _Entity:
        entity = self.entities.get(name.lower())
        if entity is None:
            entity = self.entities[name.lower()] = _Entity(name)
        return entity

    def typed(self, name: str, entity_type: str | None, *, cued: bool = False) -> None:
        if entity_type is None:
            return
        entity = self.add(name)
        if entity.type is None or (cued and not entity.type_cued):
            entity.type, entity.type_cued = entity_type, cued

    def output(self) -> list[CandidateEntity]:
        return [
            CandidateEntity(
                name=e.name,
                type=e.type or "Concept",
                description=e.description,
                aliases=list(dict.fromkeys(a for a in e.aliases if a.lower() != e.name.lower())),
            )
            for e in self.entities.values()
        ]


class RulesExtractor:
    """The offline :class:`~tidegraph.indexer.extraction.interfaces.Extractor` (``rules:1``)."""

    @property
    def id(self) -> str:
        """Recorded in the realm's metadata."""
        return "rules:1"

    async def extract(self, chunk: Chunk, context: DocumentContext) -> ExtractionOutput:
        """Candidates for one chunk; an empty output when nothing matches (the store decides)."""
        return self.extract_text(chunk.text, context)

    def extract_text(self, text: str, context: DocumentContext | None = None) -> ExtractionOutput:
        """:meth:`extract` on plain text, synchronously."""
        found = _Collector(context or DocumentContext())
        self._entities(text, found)
        relations = self._relations(text, found)
        return ExtractionOutput(entities=found.output(), relations=relations)

    def _entities(self, text: str, found: _Collector) -> None:
        if ", a" in text or ", the" in text:
            for m in _APPOSITIVE.finditer(text):
                self._describe(found, m)
        if " is a" in text or " was a" in text or " is the" in text or " was the" in text:
            for m in _COPULA_TYPE.finditer(text):
                self._describe(found, m)
        found.people.sort()
        if "known as" in text or "called" in text or "nicknamed" in text or "dubbed" in text:
            for m in _ALIAS.finditer(text):
                alias = m["qalias"] or m["alias"]
                if alias:
                    found.add(found.canonical(m["name"])).aliases.append(" ".join(alias.split()))
        if "(" in text:
            for m in _PARENTHESISED.finditer(text):
                found.add(found.canonical(m["name"])).aliases.append(_trim_name(m["alias"]))

    @staticmethod
    def _describe(found: _Collector, m: re.Match[str]) -> None:
        description = m["desc"]
        entity_type = _type_of(description)
        if entity_type is None:
            return
        name = found.canonical(m["name"])
        if name.lower() in _NOT_NAMES:
            return
        if entity_type == _PERSON:
            found.people.append((m.start(), name))
        found.typed(name, entity_type, cued=True)
        entity = found.add(name)
        if len(description) > len(entity.description):
            entity.description = " ".join(description.split())

    def _relations(self, text: str, found: _Collector) -> list[CandidateRelation]:
        matches: list[re.Match[str]] = []
        position = 0
        while (m := _RELATION.search(text, position)) is not None:
            matches.append(m)
            position = self._resume(text, m)
        if not matches:
            return []
        starts = sentence_starts(text)
        relations: list[CandidateRelation] = []
        last_person: tuple[int, str] | None = None
        for k, m in enumerate(matches):
            verb = self._verb(m)
            antecedent = _latest((last_person, _mention_before(found.people, m.start())))
            subject, is_name = self._subject(m["subj"], found, antecedent)
            objects = [found.canonical(o) for o in self._objects(text, m)]
            if not objects:
                continue
            if is_name:
                found.typed(subject, verb.subject_type if not verb.passive else None)
                if found.add(subject).type == _PERSON:
                    last_person = (m.start(), subject)
            sentence_start, sentence_end = _enclosing(starts, m.start(), len(text))
            clause_end = sentence_end
            if k + 1 < len(matches):
                clause_end = min(clause_end, matches[k + 1].start())
            tail = text[m.end("objs") : clause_end]
            if (brk := _CLAUSE_BREAK.search(tail)) is not None:
                tail = tail[: brk.start()]
            onset = verb.onset or (m["cop"] or "").startswith(("bec", "turn"))
            period = _period(tail, onset) or _period(text[sentence_start : m.start()], onset)
            valid_from, valid_to = period if period is not None else (None, None)
            negated = m["neg"] is not None or m["cneg"] is not None
            hedged = _HEDGE.search(text, m.end("subj"), m.start("verb")) is not None
            sentence = " ".join(text[sentence_start:sentence_end].split())
            for obj in objects:
                s, o = (obj, subject) if verb.passive else (subject, obj)
                if verb.passive:
                    found.typed(s, verb.subject_type)
                    found.add(s)
                found.typed(o, verb.object_type)
                found.add(o)
                relations.append(
                    CandidateRelation(
                        subject=s,
                        predicate=verb.predicate,
                        object=o,
                        description=sentence[:_MAX_DESCRIPTION],
                        negated=negated,
                        confidence=HEDGED_CONFIDENCE if hedged else STATED_CONFIDENCE,
                        valid_from=valid_from,
                        valid_to=valid_to,
                    )
                )
        return relations

    @staticmethod
    def _resume(text: str, m: re.Match[str]) -> int:
        """Where to search next: before a final ``and Y`` that is the next clause's subject."""
        objs = m["objs"]
        cut = objs.rfind(" and ")
        if cut >= 0:
            tail = m.start("objs") + cut + len(" and ")
            if _RELATION.match(text, tail):
                return tail
        return m.end()

    @staticmethod
    def _verb(m: re.Match[str]) -> _Verb:
        role = m["role"]
        if role is not None:
            predicate, subject_type, object_type = _ROLE_NOUNS[role.lower()]
            return _Verb("", predicate, subject_type, object_type)
        for i, verb in enumerate(_VERBS):
            if m[f"v{i}"] is not None:
                return verb
        raise AssertionError("a relation match names no verb")  # pragma: no cover

    @staticmethod
    def _subject(raw: str, found: _Collector, last_person: str | None) -> tuple[str, bool]:
        """The subject as written or resolved, and whether it is a name (not a pronoun)."""
        if _PRONOUN_RE.fullmatch(raw):
            pronoun = " ".join(raw.split())
            if pronoun.lower() in _PRONOUNS and last_person is not None:
                return last_person, True
            return pronoun, False
        return found.canonical(raw), True

    def _objects(self, text: str, m: re.Match[str]) -> list[str]:
        objs = m["objs"]
        resume = self._resume(text, m)
        if resume != m.end():
            objs = text[m.start("objs") : resume].rstrip()
            objs = objs[: -len("and")].rstrip() if objs.endswith("and") else objs
        parts = [part for part in map(str.strip, _SPLIT_OBJECTS.split(objs)) if part]
        # "worked with Babbage's son": a role of someone, not a named object
        return [_trim_name(p) for p in parts if not p.endswith(("'s", "’s"))]


def _mention_before(people: list[tuple[int, str]], position: int) -> tuple[int, str] | None:
    """The last Person mention starting before ``position``."""
    k = bisect.bisect_left(people, (position, ""))
    return people[k - 1] if k else None


def _latest(mentions: tuple[tuple[int, str] | None, ...]) -> str | None:
    """The name of the latest of the given mentions, if any."""
    present = [m for m in mentions if m is not None]
    return max(present)[1] if present else None


def _enclosing(starts: list[int], position: int, length: int) -> tuple[int, int]:
    """``(start, end)`` of the sentence containing ``position``."""
    k = bisect.bisect_right(starts, position)
    return (starts[k - 1] if k else 0), (starts[k] if k < len(starts) else length)
