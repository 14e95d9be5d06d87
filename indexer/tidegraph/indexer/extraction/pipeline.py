"""The prepare phase: one document version → chunks, gated structure and embeddings.

Runs concurrently across documents (the consumer bounds it); within a document, chunks are
extracted side by side as soon as the names their context holds are known, then the
document pass gives short forms their full names (:mod:`~tidegraph.indexer.extraction.
fanout`, paper §4.1). Model calls are made with the document's priority
(:data:`~tidegraph.indexer.models.slots.call_priority`): documents in the order their
preparation began, chunks in their order, so the oldest is served first and the writer,
which takes documents in log order, rarely waits on one behind others already prepared.
Nothing here writes to the graph: the result is a :class:`PreparedDocument` the writer
applies.
Transient failures (model endpoint down) propagate and pause the partition; a chunk the
extractor cannot turn into valid output is recorded on the chunk, never papered over.

A record carrying ``facts`` is not extracted: its facts take the extractor's place and go
through the same acceptance (gates, predicate and vocabulary, validity), and what of them
is refused travels with the prepared document to the document's status.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from tidegraph.indexer.extraction.chunking import build_context, chunk_document
from tidegraph.indexer.extraction.fanout import (
    LOOKAHEAD,
    ChunkFacts,
    in_context_order,
    resolve_short_forms,
)
from tidegraph.indexer.extraction.interfaces import Chunk, Embedder, ExtractionFailed, Extractor
from tidegraph.indexer.extraction.prepared import (
    EntityFact,
    PreparedChunk,
    PreparedDocument,
    RelationFact,
)
from tidegraph.indexer.graph import (
    GATE_HINTS,
    Gate,
    GateConfig,
    Rejection,
    Vocabulary,
    apply_gates,
    normalize_period,
    render_entity,
    render_relation,
)
from tidegraph.indexer.models import call_priority
from tidegraph.schemas import (
    CandidateEntity,
    CandidateRelation,
    DocumentVersion,
    ExtractionOutput,
    render_entity_line,
    render_facts,
    render_relation_line,
)
from tidegraph.store import RealmInfo

ExtractorFor = Callable[[RealmInfo], Extractor]
EmbedderFor = Callable[[RealmInfo], Embedder]


@dataclass(frozen=True)
class PipelineConfig:
    """Chunking and gating parameters (part of what a replay with changes re-extracts)."""

    chunk_chars: int = 2000
    """Character budget per chunk."""
    overlap_chars: int = 200
    """Overlap carried into the next chunk, resumed at a sentence boundary."""
    context_names: int = 50
    """Canonical names threaded through a document's chunks, at most."""
    lookahead: int = LOOKAHEAD
    """Chunks extracted ahead of the last whose names a chunk's context holds
    (:func:`~tidegraph.indexer.extraction.fanout.threaded_before`); 0 threads every
    chunk's names into the next."""
    gates: GateConfig = field(default_factory=GateConfig)
    """Validation gate settings."""


class Pipeline:
    """Prepares document versions for the writer with the realm's extractor and embedder."""

    def __init__(
        self,
        extractor_for: ExtractorFor,
        embedder_for: EmbedderFor,
        config: PipelineConfig | None = None,
    ) -> None:
        self._extractor_for = extractor_for
        self._embedder_for = embedder_for
        self.config = config or PipelineConfig()
        self._vocabularies: dict[tuple[str, bytes], Vocabulary] = {}
        self._started = itertools.count()
        """Numbers documents as their preparation begins: the priority of their calls."""

    def _vocabulary(self, info: RealmInfo) -> Vocabulary:
        key = (info.schema, info.config.to_json())  # a swapped-in realm may change it
        vocab = self._vocabularies.get(key)
        if vocab is None:
            vocab = Vocabulary(info.config.vocabulary, info.config.predicate_aliases)
            self._vocabularies[key] = vocab
        return vocab

    async def prepare(self, record: DocumentVersion, info: RealmInfo) -> PreparedDocument:
        token = call_priority.set((next(self._started),))
        try:
            return await self._prepare(record, info)
        finally:
            call_priority.reset(token)

    async def _prepare(self, record: DocumentVersion, info: RealmInfo) -> PreparedDocument:
        assert record.content is not None and record.version_hash is not None
        embedder = self._embedder_for(info)
        vocab = self._vocabulary(info)
        # A NUL reads as a space (text pulled out of binary formats carries strays):
        # PostgreSQL text cannot hold one, and the same length keeps every offset.
        text = record.content.replace("\0", " ")
        chunks = chunk_document(text, self.config.chunk_chars, self.config.overlap_chars)
        refusals: tuple[str, ...] = ()
        if record.facts is not None:
            facts, refusals = self._supplied(record.facts, chunks, vocab)
        else:
            facts = await self._extracted(record, info, chunks, vocab)

        texts = [c.text for c, _, _, _ in facts]
        extra = sorted(
            {render_entity(e.name, e.description) for _, es, _, _ in facts for e in es}
            | {
                render_relation(
                    r.subject, r.predicate, r.object, r.negated, r.valid_from, r.valid_to
                )
                for _, _, rs, _ in facts
                for r in rs
            }
        )
        vectors = await embedder.embed(texts + extra) if texts or extra else []
        prepared = tuple(
            PreparedChunk(c.ordinal, c.text, vectors[i], es, rs, note, dict(c.metadata))
            for i, (c, es, rs, note) in enumerate(facts)
        )
        return PreparedDocument(
            space=record.space,
            doc_key=record.doc_key,
            content_hash=record.version_hash,
            source_version=record.source_version,
            order_key=record.effective_order_key,
            title=record.title,
            source=record.source,
            metadata=dict(record.metadata),
            chunks=prepared,
            vectors=dict(zip(extra, vectors[len(texts) :], strict=True)),
            refusals=refusals,
        )

    async def _extracted(
        self,
        record: DocumentVersion,
        info: RealmInfo,
        chunks: Sequence[Chunk],
        vocab: Vocabulary,
    ) -> list[ChunkFacts]:
        """Each chunk through the realm's extractor once the names its context holds are
        known, side by side; then the document pass."""
        extractor = self._extractor_for(info)
        document = call_priority.get()

        async def extract(chunk: Chunk, before: Sequence[ChunkFacts]) -> ChunkFacts:
            call_priority.set((*document, chunk.ordinal))  # this task's own context
            context = build_context(
                record.title,
                record.source,
                (e.name for _, entities, _, _ in before for e in entities),
                info.config.vocabulary,
                cap=self.config.context_names,
            )
            try:
                output = await extractor.extract(chunk, context)
            except ExtractionFailed as exc:
                return (chunk, (), (), exc.reason)
            accepted = self._accept(output, vocab)
            note = None
            if not accepted.entities and not accepted.relations:
                verbs = {r.predicate for r in accepted.off_vocabulary}
                note = why_nothing(accepted.gates, verbs, extractor.id)
            return (chunk, accepted.entities, accepted.relations, note)

        facts = await in_context_order(chunks, self.config.lookahead, extract)
        return resolve_short_forms(facts)

    def _supplied(
        self, supplied: ExtractionOutput, chunks: Sequence[Chunk], vocab: Vocabulary
    ) -> tuple[list[ChunkFacts], tuple[str, ...]]:
        """The record's own facts through the same gates and vocabulary as an extractor's
        output, no extractor called. They hang on the document's first chunk (the whole
        passage when the content is the facts' rendering, which fits one chunk unless the
        facts are long; that rendering when the content is empty); the other chunks are
        stored for retrieval with no structure."""
        if not chunks and (supplied.entities or supplied.relations):
            chunks = [Chunk(0, render_facts(supplied))]  # no content: their own passage
        accepted = self._accept(supplied, vocab)
        refusals = refused_facts(accepted)
        note = None
        if not accepted.entities and not accepted.relations:
            note = "its facts " + (
                "were all refused: " + "; ".join(refusals) if refusals else "state nothing"
            )
        facts: list[ChunkFacts] = [
            (c, (), (), None) if c.ordinal else (c, accepted.entities, accepted.relations, note)
            for c in chunks
        ]
        return facts, refusals

    def _accept(self, output: ExtractionOutput, vocab: Vocabulary) -> Accepted:
        """Gates, predicate normalisation and validity normalisation of one output."""
        gated = apply_gates(output, self.config.gates)
        entities = tuple(
            EntityFact(e.name, e.type, e.description, tuple(e.aliases)) for e in gated.entities
        )
        relations: list[RelationFact] = []
        off_vocabulary: list[CandidateRelation] = []
        for r in gated.relations:
            predicate, negated_by_word = vocab.canonical(r.predicate)
            if not predicate:
                off_vocabulary.append(r)
                continue
            valid_from, valid_to = normalize_period(r.valid_from, r.valid_to)
            relations.append(
                RelationFact(
                    r.subject,
                    predicate,
                    r.object,
                    r.negated or negated_by_word,
                    r.description,
                    r.confidence,
                    valid_from,
                    valid_to,
                )
            )
        return Accepted(entities, tuple(relations), gated.rejections, tuple(off_vocabulary))


@dataclass(frozen=True)
class Accepted:
    """What of one extraction output the gates and the vocabulary let through, and why the
    rest was refused."""

    entities: tuple[EntityFact, ...]
    relations: tuple[RelationFact, ...]
    rejections: tuple[Rejection, ...]
    """What the gates refused (whole records, or single aliases)."""
    off_vocabulary: tuple[CandidateRelation, ...]
    """Relations whose predicate the realm's vocabulary does not know."""

    @property
    def gates(self) -> list[Gate]:
        return sorted({rej.gate for rej in self.rejections})


def refused_facts(accepted: Accepted) -> tuple[str, ...]:
    """Each supplied fact that was refused, as its rendered line and why: what a document's
    status reports, so the source can correct the record."""
    out: list[str] = []
    for rej in accepted.rejections:
        rec = rej.record
        line = (
            render_entity_line(rec)
            if isinstance(rec, CandidateEntity)
            else render_relation_line(rec)
        )
        what = f"alias {rej.alias!r} of " if rej.alias is not None else ""
        out.append(f"{what}{line.rstrip('.')!r} refused by {rej.gate}: {rej.reason}")
    for r in accepted.off_vocabulary:
        out.append(
            f"{render_relation_line(r).rstrip('.')!r} refused: predicate {r.predicate!r} is not"
            " in the realm's vocabulary — add it to the vocabulary or its predicate_aliases"
        )
    return tuple(out)


def why_nothing(gates: Sequence[Gate], off_vocabulary: Collection[str], extractor: str) -> str:
    """Why a chunk yielded no structure: what was refused and what to do about it. Stored
    with the version, so it names nothing but the record's own content (a replay into
    another schema, or the same log in another realm, stores the same words)."""
    causes = []
    if off_vocabulary:
        causes.append(
            f"its verbs ({', '.join(sorted(off_vocabulary))}) are not in the realm's vocabulary"
            " — add them to the vocabulary or its predicate_aliases"
        )
    causes.extend(GATE_HINTS[g] for g in gates)
    if extractor.startswith("rules"):
        if not causes:
            causes.append(
                "the rules extractor found no sentence it reads (a capitalised name, a verb"
                " it knows such as 'worked with', 'founded', 'married', 'joined', then a"
                " capitalised name)"
            )
        causes.append(
            "the offline rules extractor reads only simple English patterns (README, 'What"
            " the rules extractor reads'); for free text switch the realm to a model:"
            " `tidegraph replay --realm REALM --extractor llm`"
        )
    elif not causes:
        causes.append(f"the model ({extractor}) returned no entity or relation for this text")
    return "; ".join(causes)
