"""The model-backed extractor: one chunk in, candidate entities and relations out.

What can go wrong, and what each outcome means to the consumer:

- The endpoint is down or rate-limited past the call's deadline: ``LLMUnavailable``
  propagates (``retriable``); the partition pauses and the chunk is extracted again later.
  This holds in gleaning passes too: a chunk is never handed on half-extracted because of
  an outage, since its result would then be cached under a key that promises gleaning.
- The endpoint is misconfigured (401/403/404): ``LLMEndpointMisconfigured`` propagates, so a
  wrong key stops the run instead of marking every document failed.
- The answer does not parse or validate: one failed attempt. Up to ``output_attempts``
  attempts are made within one deadline, then the chunk raises ``ExtractionFailed``
  (permanent for that chunk; the indexer skips and reports it). A 4xx for this request
  also raises ``ExtractionFailed`` at once.
- A gleaning pass fails on its output or is rejected: the result so far is kept (paper
  §4.2 — the first pass already succeeded; discarding it would trade a partial result for
  none). A gleaning pass that adds nothing ends gleaning early. Passes are merged with
  :func:`merge_outputs`, which also folds duplicates within one answer.

Structured output: the request carries ``response_format`` with :data:`EXTRACTION_SCHEMA`.
An endpoint that refuses it (400/422) is asked once more without it; when that succeeds
the endpoint is remembered as not supporting ``json_schema`` (per client and model) and
later calls go straight to the tolerant parse (:func:`parse_extraction`).

The parse is tolerant of form and strict about content: code fences, prose around the
object and trailing junk are ignored; ``null`` for an optional field means its default;
an individual entity or relation that does not validate is dropped like a gated record,
but an answer whose lists are not lists, or all of whose items are invalid, is a failed
attempt. An empty answer is returned as empty: whether a chunk that yields nothing fails is
decided after the gates, by the indexer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import orjson
from openai.types.chat import ChatCompletionMessageParam
from pydantic import ValidationError

from tidegraph.indexer.extraction.interfaces import Chunk, DocumentContext, ExtractionFailed
from tidegraph.indexer.extraction.prompts import (
    PROMPT_VERSION,
    extraction_messages,
    gleaning_messages,
    response_format,
)
from tidegraph.indexer.models import (
    LLMBadOutput,
    LLMEndpointMisconfigured,
    LLMRequestRejected,
    ModelMetrics,
    model_metrics,
)
from tidegraph.indexer.models.client import ChatResult, LLMClient
from tidegraph.schemas import CandidateEntity, CandidateRelation, ExtractionOutput

__all__ = [
    "CachingExtractor",
    "ExtractionCache",
    "InvalidOutput",
    "LLMExtractor",
    "cache_key",
    "merge_outputs",
    "outermost_object",
    "parse_extraction",
]

log = logging.getLogger(__name__)

_CACHE_KEY_VERSION = 1
_SCHEMA_REFUSED_STATUS = frozenset({400, 422})
_MAX_OBJECT_STARTS = 64

_M = TypeVar("_M", CandidateEntity, CandidateRelation)


class InvalidOutput(ValueError):
    """A chat answer that is not a usable extraction (one failed attempt, not an error)."""


def cache_key(
    chunk_text: str,
    context: DocumentContext,
    model: str,
    prompt_version: str,
    params: Mapping[str, object],
) -> str:
    """Content address of one extraction: sha256 (hex) over a canonical JSON of its inputs.

    Everything that can change the model's answer is in it — the chunk, the whole document
    context (title, source, known names in order, vocabulary), the model, the prompt version
    and the parameters — so a changed input can never be answered from the cache, while an
    unchanged chunk of a changed document, or a replay, always is.
    """
    payload = {
        "v": _CACHE_KEY_VERSION,
        "chunk": chunk_text,
        "context": dataclasses.asdict(context),
        "model": model,
        "prompt_version": prompt_version,
        "params": dict(params),
    }
    return hashlib.sha256(orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)).hexdigest()


def parse_extraction(text: str) -> ExtractionOutput:
    """The extraction in a model's answer, or :class:`InvalidOutput` saying why not."""
    obj = outermost_object(text)
    entities = _items(obj, "entities", CandidateEntity)
    relations = _items(obj, "relations", CandidateRelation)
    return ExtractionOutput(entities=entities, relations=relations)


def outermost_object(text: str) -> dict[str, Any]:
    """The first JSON object that decodes from some ``{`` on: skips fences, prose, junk."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    tried = 0
    while start != -1 and tried < _MAX_OBJECT_STARTS:
        tried += 1
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    snippet = text[:80].replace("\n", " ")
    raise InvalidOutput(f"no JSON object in the answer (starts {snippet!r})")


def _items(obj: Mapping[str, Any], field: str, model: type[_M]) -> list[_M]:
    raw = obj.get(field)
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidOutput(f"{field!r} is {type(raw).__name__}, not a list")
    valid: list[_M] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        try:
            valid.append(model.model_validate({k: v for k, v in item.items() if v is not None}))
        except ValidationError:
            continue
    if raw and not valid:
        raise InvalidOutput(f"none of the {len(raw)} {field} validates")
    if len(valid) < len(raw):
        log.debug("dropped %d invalid %s of %d", len(raw) - len(valid), field, len(raw))
    return valid


def merge_outputs(*outputs: ExtractionOutput) -> ExtractionOutput:
    """Union of passes: entities deduplicated by lower(name), relations by
    (subject, predicate, object, negated) case-insensitively; the earlier record wins,
    except that aliases are unioned, a specific type replaces ``Concept`` and a longer
    description replaces a shorter one (the resolution policy of paper §4.6)."""
    entities: dict[str, CandidateEntity] = {}
    relations: dict[tuple[str, str, str, bool], CandidateRelation] = {}
    for output in outputs:
        for entity in output.entities:
            key = entity.name.strip().lower()
            seen = entities.get(key)
            entities[key] = entity if seen is None else _merge_entity(seen, entity)
        for relation in output.relations:
            rkey = (
                relation.subject.strip().lower(),
                relation.predicate.strip().lower(),
                relation.object.strip().lower(),
                relation.negated,
            )
            relations.setdefault(rkey, relation)
    return ExtractionOutput(entities=list(entities.values()), relations=list(relations.values()))


def _merge_entity(kept: CandidateEntity, other: CandidateEntity) -> CandidateEntity:
    name_key = kept.name.strip().lower()
    aliases: dict[str, str] = {}
    for alias in [*kept.aliases, other.name, *other.aliases]:
        if alias.strip().lower() != name_key:
            aliases.setdefault(alias.strip().lower(), alias)
    return kept.model_copy(
        update={
            "aliases": list(aliases.values()),
            "type": other.type if kept.type == "Concept" else kept.type,
            "description": max(kept.description, other.description, key=len),
        }
    )


class LLMExtractor:
    """The :class:`~tidegraph.indexer.extraction.interfaces.Extractor` backed by a chat model.

    One instance per realm (the realm labels its metrics); the :class:`LLMClient` — one
    endpoint and its in-flight bound — is shared.
    """

    def __init__(
        self,
        client: LLMClient,
        *,
        realm: str,
        model: str | None = None,
        gleaning: int = 1,
        output_attempts: int = 3,
        structured_output: bool = True,
        metrics: ModelMetrics | None = None,
    ) -> None:
        if gleaning < 0 or output_attempts < 1:
            raise ValueError("gleaning must be >= 0 and output_attempts >= 1")
        self._client = client
        self.realm = realm
        self.model = model or client.settings.model
        self.gleaning = gleaning
        self.output_attempts = output_attempts
        self._structured = structured_output
        self._metrics = metrics if metrics is not None else model_metrics()

    @property
    def id(self) -> str:
        return f"llm:{self.model}:{PROMPT_VERSION}"

    @property
    def params(self) -> dict[str, object]:
        """The parameters that shape the answer, hence part of the cache key."""
        settings = self._client.settings
        return {
            "temperature": settings.temperature,
            "max_tokens": settings.max_tokens,
            "gleaning": self.gleaning,
        }

    def cache_key(self, chunk: Chunk, context: DocumentContext) -> str:
        """This extractor's cache key for ``chunk`` under ``context``."""
        return cache_key(chunk.text, context, self.model, PROMPT_VERSION, self.params)

    async def extract(self, chunk: Chunk, context: DocumentContext) -> ExtractionOutput:
        first = await self._pass(
            extraction_messages(chunk.text, context), self.output_attempts, chunk, "extraction"
        )
        result = merge_outputs(first)  # deduplicated, so "nothing new" below is exact
        for number in range(1, self.gleaning + 1):
            try:
                extra = await self._pass(
                    gleaning_messages(chunk.text, context, result), 1, chunk, "gleaning"
                )
            except ExtractionFailed as exc:
                log.warning(
                    "gleaning pass %d of chunk %d failed, keeping earlier passes: %s",
                    number,
                    chunk.ordinal,
                    exc.reason,
                )
                break
            merged = merge_outputs(result, extra)
            if merged == result:
                break  # nothing new: further passes would only repeat themselves
            result = merged
        return result

    async def _pass(
        self,
        messages: list[ChatCompletionMessageParam],
        attempts: int,
        chunk: Chunk,
        what: str,
    ) -> ExtractionOutput:
        """Up to ``attempts`` requests within one deadline until an answer validates.

        The deadline is charged with the time the calls took once they had an in-flight
        slot (``ChatResult.elapsed``), not with time queued behind other chunks: a chunk
        that waited for a slot keeps its retries for a bad answer.
        """
        budget = self._client.settings.deadline
        spent = 0.0
        reason = "deadline spent before the first attempt"
        for _ in range(attempts):
            remaining = budget - spent
            if remaining <= 0:
                break
            started = time.monotonic()
            try:
                reply = await self._complete(messages, remaining)
            except LLMEndpointMisconfigured:
                raise
            except LLMRequestRejected as exc:
                raise ExtractionFailed(
                    f"{what} of chunk {chunk.ordinal} rejected by the endpoint: {exc}"
                ) from exc
            except LLMBadOutput as exc:
                spent += time.monotonic() - started
                reason = exc.reason
                continue
            spent += reply.elapsed
            try:
                return parse_extraction(reply.content)
            except InvalidOutput as exc:
                self._metrics.failure(self.realm, "chat", "invalid_output")
                reason = str(exc)
                if reply.finish_reason == "length":
                    reason += " (answer cut off at the token limit)"
        raise ExtractionFailed(
            f"{what} of chunk {chunk.ordinal}: no valid answer from {self.model} after "
            f"{attempts} attempt(s): {reason}"
        )

    async def _complete(
        self, messages: list[ChatCompletionMessageParam], budget: float
    ) -> ChatResult:
        """One chat call, with structured output when the endpoint takes it."""
        client = self._client
        if not (self._structured and client.json_schema_supported(self.model)):
            return await client.chat(messages, realm=self.realm, model=self.model, deadline=budget)
        try:
            return await client.chat(
                messages,
                realm=self.realm,
                model=self.model,
                response_format=response_format(),
                deadline=budget,
            )
        except LLMEndpointMisconfigured:
            raise
        except LLMRequestRejected as exc:
            if exc.status_code not in _SCHEMA_REFUSED_STATUS:
                raise
            refused = exc
        # Ask again without the schema (a refusal is immediate, so the budget is intact).
        # If that is rejected too, the schema was not the problem and the rejection
        # propagates; if it succeeds, remember the endpoint.
        reply = await client.chat(messages, realm=self.realm, model=self.model, deadline=budget)
        client.mark_json_schema_unsupported(self.model)
        log.warning(
            "%s refuses json_schema output for %s (%s); using tolerant JSON parsing",
            client.endpoint,
            self.model,
            refused.detail,
        )
        return reply


class ExtractionCache(Protocol):
    """Where extraction results are kept by :func:`cache_key` (PostgreSQL in production)."""

    async def get(self, key: str) -> ExtractionOutput | None: ...

    async def put(self, key: str, output: ExtractionOutput) -> None: ...


class CachingExtractor:
    """An :class:`LLMExtractor` behind an :class:`ExtractionCache`: a hit costs no call.

    Only successful extractions are stored; a chunk that failed is tried again next time
    (a fixed prompt or model then gets its chance without a cache flush).
    """

    def __init__(
        self,
        inner: LLMExtractor,
        cache: ExtractionCache,
        *,
        metrics: ModelMetrics | None = None,
    ) -> None:
        self._inner = inner
        self._cache = cache
        self._metrics = metrics if metrics is not None else model_metrics()

    @property
    def id(self) -> str:
        return self._inner.id

    async def extract(self, chunk: Chunk, context: DocumentContext) -> ExtractionOutput:
        key = self._inner.cache_key(chunk, context)
        cached = await self._cache.get(key)
        if cached is not None:
            self._metrics.cache_hit(self._inner.realm)
            return cached
        self._metrics.cache_miss(self._inner.realm)
        output = await self._inner.extract(chunk, context)
        await self._cache.put(key, output)
        return output
