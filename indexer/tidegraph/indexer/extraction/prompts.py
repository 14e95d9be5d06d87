"""The extraction prompt, versioned, and the JSON Schema of its answer.

The rules are those of the paper's section 4, written as instructions because most of them
are semantic judgements a gate cannot make afterwards (granularity, co-occurrence, which
surface form is an alias). The gates still run on everything the model returns; the prompt
only makes their rejections rare.

``PROMPT_VERSION`` is part of the extraction cache key: change it whenever the wording,
the schema or the message layout changes, or cached results of the old prompt would be
served as if the new one had produced them.

Message layout (the test server depends on the tags): one system message with the rules;
one user message with ``<document>`` context, optional ``<known_entities>`` and
``<vocabulary>``, and the chunk between ``<chunk>`` and ``</chunk>``. A gleaning request
adds ``<already_extracted>`` with what earlier passes found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import orjson
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema

from tidegraph.indexer.extraction.interfaces import DocumentContext
from tidegraph.schemas import ExtractionOutput

__all__ = [
    "EXTRACTION_SCHEMA",
    "PROMPT_VERSION",
    "VAGUE_CONNECTORS",
    "extraction_messages",
    "gleaning_messages",
    "response_format",
]

PROMPT_VERSION: Final = "extract-v1"

VAGUE_CONNECTORS: Final = (
    "relates_to",
    "related_to",
    "associated_with",
    "connected_to",
    "linked_to",
    "see_also",
    "involves",
    "involved_with",
    "mentioned_with",
    "appears_with",
    "has_relation_to",
    "is_related_to",
    "corresponds_to",
    "concerns",
    "about",
)
"""Connectors the prompt forbids: an edge so labelled says nothing a missing edge does not."""

_STRING = {"type": "string"}
_NULLABLE_STRING = {"type": ["string", "null"]}

EXTRACTION_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["entities", "relations"],
    "properties": {
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "type", "description", "aliases"],
                "properties": {
                    "name": _STRING,
                    "type": _STRING,
                    "description": _STRING,
                    "aliases": {"type": "array", "items": _STRING},
                },
            },
        },
        "relations": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": [
                    "subject",
                    "predicate",
                    "object",
                    "description",
                    "negated",
                    "confidence",
                    "valid_from",
                    "valid_to",
                ],
                "properties": {
                    "subject": _STRING,
                    "predicate": _STRING,
                    "object": _STRING,
                    "description": _STRING,
                    "negated": {"type": "boolean"},
                    "confidence": {"type": "number"},
                    "valid_from": _NULLABLE_STRING,
                    "valid_to": _NULLABLE_STRING,
                },
            },
        },
    },
}
"""``ExtractionOutput`` as a strict structured-output schema: every property required and no
extra ones, as OpenAI's strict mode demands; optional values are nullable instead."""


def response_format() -> ResponseFormatJSONSchema:
    """The ``response_format`` argument asking for :data:`EXTRACTION_SCHEMA`."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "extraction_output",
            "description": "Entities and relations stated in one chunk of a document.",
            "schema": EXTRACTION_SCHEMA,
            "strict": True,
        },
    }


_RULES: Final = f"""\
You extract a knowledge graph from one chunk of a document: the entities it names and the \
relations between them that the text states. Answer with one JSON object and nothing else.

Output shape:
{{"entities": [{{"name": str, "type": str, "description": str, "aliases": [str]}}],
 "relations": [{{"subject": str, "predicate": str, "object": str, "description": str,
                "negated": bool, "confidence": number 0..1,
                "valid_from": str | null, "valid_to": str | null}}]}}

Rules:
1. Names. When the document context lists known entities, refer to them by exactly those \
names, whatever form the chunk uses. Otherwise use the fullest proper name the text gives \
("Charles Babbage", not "Babbage"). Resolve pronouns and definite descriptions ("he", \
"his father", "the company") to the entity they refer to; if you cannot, leave them out. \
Never use a pronoun or a role phrase as a name.
2. Aliases. Record in "aliases" every other surface form the chunk uses for an entity \
(shortened names, initials, former names, abbreviations), never the name itself.
3. One entity per name. Two things joined by "and" are two entities ("Ada Lovelace and \
Charles Babbage" is two), except where the conjunction is part of a title.
4. Stable names. Before naming an entity, ask whether that exact name could appear in \
another document on the same subject. Emit the stable entity ("Boeing", "737 programme") \
and put movement, period and magnitude in the relation and its description, never in a \
name ("Boeing Q4 2005 net loss" is not an entity). Figures, amounts, percentages and dates \
are values, not entities.
5. Relations only where the text states one. Two entities appearing near each other is not \
a relation: if the text does not say how they are related, emit no relation for the pair. \
Every relation's subject and object must also appear in "entities".
6. Specific predicates: a lower_snake_case verb phrase in the active voice from the subject's \
point of view ("designed", "worked_with", "founded"). These vague connectors are forbidden: \
{", ".join(VAGUE_CONNECTORS)}.
7. Negation. When the text denies a relation, emit the positive predicate with \
"negated": true ("never worked with" is "worked_with", negated). Never invent a negative \
predicate such as "did_not_work_with".
8. Periods. Set "valid_from"/"valid_to" only when the text states when the relation held \
(a year, a month, a date), copied as the text gives it; otherwise null. Do not guess.
9. "confidence" is how plainly the text states the relation: 1.0 stated outright, lower \
when hedged ("reportedly", "may have").
10. "type" is a short class such as Person, Organization, Place, Work, Event, Artifact, \
Concept; "description" says what the chunk tells about the entity or relation, in a \
sentence."""

_VOCABULARY_RULE: Final = (
    "Prefer these predicates whenever one fits the stated relation; use another specific "
    "verb phrase only when none does:"
)

_GLEANING_RULE: Final = (
    "An earlier pass over this chunk already extracted the entities and relations in "
    "<already_extracted>. Some were probably missed. Return only the entities and "
    "relations that are stated in the chunk and missing from <already_extracted>, under "
    "the same rules, reusing the names used there. Do not repeat anything already "
    "extracted. If nothing was missed, return empty lists."
)


def extraction_messages(
    chunk_text: str, context: DocumentContext
) -> list[ChatCompletionMessageParam]:
    """The first-pass request for one chunk."""
    return [
        {"role": "system", "content": _RULES},
        {"role": "user", "content": _user_message(chunk_text, context, None)},
    ]


def gleaning_messages(
    chunk_text: str, context: DocumentContext, found: ExtractionOutput
) -> list[ChatCompletionMessageParam]:
    """A gleaning request: the same chunk, what was found, and a request for the rest."""
    return [
        {"role": "system", "content": _RULES},
        {"role": "user", "content": _user_message(chunk_text, context, found)},
    ]


def _user_message(chunk_text: str, context: DocumentContext, found: ExtractionOutput | None) -> str:
    parts = [_document_block(context)] if context.title or context.source else []
    if context.known_names:
        parts.append(
            "<known_entities>\nReuse these canonical names exactly:\n"
            + _bullets(context.known_names)
            + "\n</known_entities>"
        )
    if context.vocabulary:
        parts.append(
            f"<vocabulary>\n{_VOCABULARY_RULE}\n{_bullets(context.vocabulary)}\n</vocabulary>"
        )
    if found is not None:
        rendered = orjson.dumps(found.model_dump(mode="json"))
        parts.append(f"<already_extracted>\n{rendered.decode()}\n</already_extracted>")
    parts.append(f"<chunk>\n{chunk_text}\n</chunk>")
    if found is not None:
        parts.append(_GLEANING_RULE)
    else:
        parts.append("Extract the entities and relations stated in the chunk.")
    return "\n\n".join(parts)


def _document_block(context: DocumentContext) -> str:
    lines = ["<document>"]
    if context.title:
        lines.append(f"title: {context.title}")
    if context.source:
        lines.append(f"source: {context.source}")
    lines.append("</document>")
    return "\n".join(lines)


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {item}" for item in items)
