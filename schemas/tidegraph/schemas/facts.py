"""Facts supplied on a record: structure a source already knows, indexed without a model.

A ``DocumentVersion`` may carry ``facts`` in the extraction-output shape (CONTRACT.md,
"Extraction output"). Three rules live here because connectors and the indexer both need
them, and each must mean the same on both sides:

* :func:`render_facts` — the passage a record's facts read as. A record without prose
  carries it as its ``content`` (connectors fill it in), so the facts have a chunk to hang
  provenance, citations and naive retrieval on.
* :func:`canonical_facts` — one byte form per meaning: defaults written out, keys sorted,
  so ``{"name": "X"}`` and ``{"name": "X", "type": "Concept"}`` are the same facts.
* :func:`version_hash` — what makes a version "unchanged" (DESIGN invariant 3): the content
  hash alone for a record without facts (so nothing stored before changes meaning), else a
  hash over the content hash and the canonical facts, so the same facts again cost nothing
  and changed facts replace what the old version taught.
"""

from __future__ import annotations

import hashlib

import orjson

from tidegraph.schemas.extraction import CandidateEntity, CandidateRelation, ExtractionOutput
from tidegraph.schemas.hashing import CONTENT_HASH_PREFIX

__all__ = [
    "canonical_facts",
    "render_entity_line",
    "render_facts",
    "render_relation_line",
    "version_hash",
]


def canonical_facts(facts: ExtractionOutput) -> bytes:
    """The facts as sorted-key JSON with every default written out."""
    return orjson.dumps(facts.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)


def version_hash(content_hash: str, facts: ExtractionOutput | None) -> str:
    """``content_hash`` for a record without facts, else ``sha256:`` over both."""
    if facts is None:
        return content_hash
    digest = hashlib.sha256(content_hash.encode() + b"\n" + canonical_facts(facts))
    return CONTENT_HASH_PREFIX + digest.hexdigest()


def render_entity_line(entity: CandidateEntity) -> str:
    """``Name (Type): description. Also known as A, B.`` — one line per entity."""
    line = f"{entity.name} ({entity.type})"
    if entity.description:
        line += f": {entity.description.rstrip('.')}"
    if entity.aliases:
        line += f". Also known as {', '.join(entity.aliases)}"
    return line + "."


def render_relation_line(relation: CandidateRelation) -> str:
    """``Subject [not] predicate Object (from X to Y): description.`` — one line each."""
    verb = relation.predicate.replace("_", " ")
    line = f"{relation.subject} {'not ' if relation.negated else ''}{verb} {relation.object}"
    period = []
    if relation.valid_from:
        period.append(f"from {relation.valid_from}")
    if relation.valid_to:
        period.append(f"to {relation.valid_to}")
    if period:
        line += f" ({' '.join(period)})"
    if relation.description:
        line += f": {relation.description.rstrip('.')}"
    return line + "."


def render_facts(facts: ExtractionOutput) -> str:
    """The passage the facts read as: entities, then relations, one line each, in the
    record's order (so the same facts always render the same text)."""
    lines = [render_entity_line(e) for e in facts.entities]
    lines += [render_relation_line(r) for r in facts.relations]
    return "\n".join(lines)
