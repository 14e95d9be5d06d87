"""``query_data``: the six retrieval modes of paper Table 3 over one realm.

A mode is a plan (:mod:`~tidegraph.query_service.plans`): which reads it makes is a row
there, not a branch here. The full-text channel searches the named things only (low-level
keywords: names, quoted phrases, identifiers, years), and is skipped when the query names
none: exact terms are where lexical search is decisive (paper §7.3), while a common theme
word matches a large share of the edges, costs a heap visit per match and ranks them by
chance. ``global`` ranks relations by similarity to the question steered by its themes
(fused with the named-thing search when there is one), and community reports by a blend
of similarity, rating and size when a space has any, so it never hard-fails before
communities are built (paper §6).

Relations the question asks about lead in every mode that returns relations: the predicate
focus (:mod:`~tidegraph.query_service.focus`) is a fourth candidate channel, and its hits
— relations of a named entity whose predicate the question names, in the role it asks —
are placed before the rest of the fused list. Entities matched only by vector are kept
down to a similarity floor. A symmetric predicate of the realm
(``RealmConfig.symmetric_predicates``) states one fact whichever way it is stored: both
directions fit the focus, and an answer carries the fact once. The indexer stores it once
per pair and space; merging here still joins the same fact across spaces, and both
directions in realms written before that rule, until a replay.

Two rerankings of the fused relations are request options, off by default (paper §7.4,
:mod:`~tidegraph.query_service.rerank`): node distance (a bounded breadth-first search from
the matched entities under the request's filters replaces the hop the channels report) and
maximal marginal relevance over the relations' embeddings. Both widen the candidate window
to twice the relations returned and act within the predicate-focus groups. What one matched
entity contributes to the walk is capped (``max_relation_edges``, paper §7.2).

A request uses one pooled connection and three pipelined rounds
(:mod:`~tidegraph.query_service.rounds`): seeds and the independent channels; the walk and
mention expansion from the seeds; details of what survived fusion. What an answer carries
of the rows is decided in :mod:`~tidegraph.query_service.hits`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg import AsyncConnection

from tidegraph.query_service import channels, hits, rounds
from tidegraph.query_service.channels import Scope
from tidegraph.query_service.embedding import QueryEmbedder, check_vectors
from tidegraph.query_service.focus import question_focus
from tidegraph.query_service.fusion import Fused, quota_interleave, rrf
from tidegraph.query_service.keywords import (
    KeywordModel,
    Keywords,
    extract_keywords,
    websearch_text,
)
from tidegraph.query_service.plans import (
    FOCUS,
    FULLTEXT,
    MODES,
    PLANS,
    RANKED,
    SIMILARITY,
    TRAVERSAL,
    Mode,
)
from tidegraph.query_service.rerank import rerank_groups
from tidegraph.schemas.api import QueryDataResponse
from tidegraph.schemas.names import name_key
from tidegraph.schemas.realm_config import parse_embedder
from tidegraph.store.realms import RealmInfo

__all__ = ["MODES", "Mode", "QueryDataResponse", "RetrievalLimits", "RetrievalParams"]

Fusion = Literal["rrf", "quota"]

_WORD = re.compile(r"[^\W_][\w.'’&-]*\w|[^\W_]")
_CHUNK_CHANNELS = ["similarity", "mentions"]


DEFAULT_RELATION_TOP_K = 25
"""Relations an answer carries when the request says neither ``relation_top_k`` nor a
``top_k`` above it (the paper measures on-topic share over these 25)."""


def relation_cap(top_k: int, relation_top_k: int | None) -> int:
    """Relations returned: as asked, else the larger of the default and ``top_k``."""
    return relation_top_k if relation_top_k is not None else max(DEFAULT_RELATION_TOP_K, top_k)


@dataclass(frozen=True)
class RetrievalParams:
    """One ``query_data`` request, already validated against the service limits."""

    query: str
    mode: Mode = "mix"
    space: str = "default"
    top_k: int = 10
    """Entities, chunks and community reports returned."""
    relation_top_k: int = DEFAULT_RELATION_TOP_K
    """Relations returned after fusion and de-duplication (see :func:`relation_cap`)."""
    hops: int = 2
    as_of: str | None = None
    """``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` (validated by the request model)."""
    as_believed_at: datetime | None = None
    include_superseded: bool = False
    relation_types: tuple[str, ...] | None = None
    fusion: Fusion = "rrf"
    similarity_share: float = 0.5
    """Quota fusion only: the similarity channel's share of the relation slots."""
    mmr_lambda: float | None = None
    """Maximal marginal relevance over the fused relations with this λ; ``None``: off."""
    node_distance: bool = False
    """Rank the fused relations by their graph distance from the matched entities."""
    max_relation_edges: int | None = None
    """Most relations one matched entity contributes to the walk; ``None``: the service's
    ``edge_cap``."""
    decompose: bool = False
    """Retrieve each sub-question of a multi-event question on its own and merge
    (:mod:`~tidegraph.query_service.decompose`)."""
    rerank: bool | None = None
    """Reorder the answer with the service's rerank endpoint
    (:mod:`~tidegraph.query_service.rerank_endpoint`); ``None``: whenever it has one."""


@dataclass(frozen=True)
class RetrievalLimits:
    """Service-side knobs that are not per request."""

    edge_cap: int = 40
    """Most relations one matched entity contributes to the walk."""
    channel_depth: int = 30
    """Candidates per relation channel."""
    rrf_k: int = 60
    community_weights: tuple[float, float, float] = (0.6, 0.25, 0.15)
    """Similarity, rating, size."""
    ef_search: tuple[int, int, int] = (100, 400, 64)
    """HNSW ``ef_search`` for entities (and communities), relations, chunks."""
    ef_search_hashing_relations: int = 1000
    """Relations' ``ef_search`` in a realm with the offline hashing embedder: its
    near-orthogonal vectors need a wider search of the sparse relation graph (m = 8) for
    the recall a model's embeddings reach at ``ef_search[1]``."""

    def ef_search_for(self, embedder: str) -> tuple[int, int, int]:
        """``ef_search`` for a realm pinned to ``embedder``."""
        entities, relations, chunks = self.ef_search
        if parse_embedder(embedder).kind == "hashing":
            relations = max(relations, self.ef_search_hashing_relations)
        return entities, relations, chunks

    entity_floor: float = 0.1
    """Least cosine similarity of an entity matched by vector: below it the nearest
    entities are noise (a negative similarity points away from the question), and are
    neither reported nor walked from."""


@dataclass(frozen=True)
class PreparedQuery:
    """What a question becomes before any table is read: keywords and query vectors."""

    keywords: Keywords
    vectors: dict[str, list[float]]
    """``query``, ``entity`` (sharpened by names) and ``theme`` (steered by themes)."""
    embed_ms: float


async def prepare(
    params: RetrievalParams,
    embedder: QueryEmbedder,
    dimension: int,
    keyword_model: KeywordModel | None = None,
) -> PreparedQuery:
    """Keywords and vectors; may call models, so callers hold no database connection."""
    started = time.perf_counter()
    keywords = await extract_keywords(params.query, keyword_model)
    texts = _query_texts(params.query, keywords)
    vectors = await embedder.embed(list(texts.values()))
    check_vectors(vectors, len(texts), dimension)
    return PreparedQuery(keywords, dict(zip(texts, vectors, strict=True)), _ms(started))


async def retrieve(
    conn: AsyncConnection[Any],
    realm: RealmInfo,
    embedder: QueryEmbedder,
    params: RetrievalParams,
    limits: RetrievalLimits = RetrievalLimits(),
    keyword_model: KeywordModel | None = None,
) -> QueryDataResponse:
    """Run one ``query_data`` request on ``conn`` (the embedder is already checked)."""
    if params.mode == "bypass":
        return await search(conn, realm, None, params, limits)
    prepared = await prepare(params, embedder, realm.dimension, keyword_model)
    return await search(conn, realm, prepared, params, limits)


async def search(
    conn: AsyncConnection[Any],
    realm: RealmInfo,
    prepared: PreparedQuery | None,
    params: RetrievalParams,
    limits: RetrievalLimits = RetrievalLimits(),
) -> QueryDataResponse:
    """The database part of ``query_data``: the mode's plan in three pipelined rounds."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    stats: dict[str, Any] = {"mode": params.mode, "fusion": params.fusion, "timings_ms": timings}
    plan = PLANS[params.mode]
    if not plan.reads or prepared is None:
        return QueryDataResponse(entities=[], relations=[], chunks=[], communities=[], stats=stats)
    keywords = prepared.keywords
    stats["keywords"] = {"low": keywords.low, "high": keywords.high, "source": keywords.source}
    timings["embed"] = prepared.embed_ms
    scope = await _scope(conn, realm.schema, params)
    at = rounds.Where(realm.schema, scope, limits.ef_search_for(realm.embedder))
    p = _bound(params, limits, prepared, scope, realm)

    t = time.perf_counter()
    found = await rounds.run(conn, rounds.first(plan, at, p), p)
    timings["seeds_and_channels"] = _ms(t)
    lists, focus_fit = _relation_lists(found, limits.rrf_k, stats)
    entities = hits.entities(
        found.get("by_name", []), found.get("by_vector", []), params.top_k, limits.entity_floor
    )
    p["seeds"] = [int(e.id) for e in entities]
    stats["seeds"] = len(p["seeds"])

    t = time.perf_counter()
    walked = await rounds.run(conn, rounds.second(plan, at, params.hops), p) if p["seeds"] else {}
    timings["walk"] = _ms(t)
    hops = {int(r[0]): int(r[1]) for r in walked.get(TRAVERSAL, [])}
    if TRAVERSAL in walked:
        lists[TRAVERSAL] = [int(r[0]) for r in walked[TRAVERSAL]]
    if plan.seeds:  # a focus hit is incident to a named entity, which is a seed
        for rid in focus_fit:
            hops.setdefault(rid, 1)
    fused = hits.focus_first(_fuse_relations(lists, params, limits), list(lists), focus_fit)
    chunk_lists = [_ids(found.get("chunks", [])), _ids(walked.get("mentions", []))]
    fused_chunks = rrf(chunk_lists, k=limits.rrf_k, limit=params.top_k)

    margin = params.relation_top_k if params.space == "*" else 10  # room for de-duplication
    reranked = params.node_distance or params.mmr_lambda is not None
    window = params.relation_top_k * (2 if reranked else 1) + margin
    p["ids"] = [f.key for f in fused[:window]]
    p["chunk_ids"] = [f.key for f in fused_chunks]
    bound = max(params.hops, 1) if params.node_distance and p["seeds"] else None
    t = time.perf_counter()
    details = await rounds.run(conn, rounds.third(at, p, bound, params.mmr_lambda is not None), p)
    timings["details"] = _ms(t)
    if reranked:
        fused = _reranked(fused[:window], focus_fit, details, hops, params, stats)

    relations = hits.relations(
        fused,
        details.get("relations", []),
        list(lists),
        hops,
        params.relation_top_k,
        realm.config.symmetric_predicates,
    )
    chunks = hits.chunks(fused_chunks, details.get("chunks", []), _CHUNK_CHANNELS)
    last_write = found.get("last_write")
    communities, warnings = hits.communities(
        found.get("communities", []),
        last_write[0][0] if last_write else None,
        params.top_k,
        limits.community_weights,
    )
    if plan.communities and not found.get("communities"):
        warnings.append(hits.NO_BUILD)
    stats["channels"] = {name: len(ids) for name, ids in lists.items()}
    stats["warnings"] = warnings
    timings["total"] = _ms(started)
    return QueryDataResponse(
        entities=entities, relations=relations, chunks=chunks, communities=communities, stats=stats
    )


async def _scope(conn: AsyncConnection[Any], schema: str, params: RetrievalParams) -> Scope:
    """The request's filters. Archived entities are withheld when the realm has any; at an
    instant, whatever is archived now is withheld."""
    archived = True
    if params.as_believed_at is None:
        row = await (await conn.execute(channels.has_archived(schema))).fetchone()
        archived = bool(row and row[0])
    return Scope(
        params.space,
        channels.valid_days(params.as_of),
        params.as_believed_at,
        params.include_superseded,
        params.relation_types,
        archived=archived,
    )


def _bound(
    params: RetrievalParams,
    limits: RetrievalLimits,
    prepared: PreparedQuery,
    scope: Scope,
    realm: RealmInfo,
) -> dict[str, Any]:
    """The statements' parameters: the scope, the query vectors, the named things and
    the predicate focus, the depths and caps."""
    vec = {name: channels.vector(v) for name, v in prepared.vectors.items()}
    names = _name_candidates(params.query, prepared.keywords)
    focus = question_focus(params.query, names)
    edge_cap = params.max_relation_edges or limits.edge_cap
    return channels.parameters(
        scope,
        qvec=vec["query"],
        evec=vec["entity"],
        gvec=vec["theme"],
        top_k=params.top_k,
        depth=max(limits.channel_depth, params.relation_top_k),
        hops=params.hops,
        cap=edge_cap,
        fanout=max(4, edge_cap // 4),
        over=params.top_k * 3,
        names=names,
        fts=channels_text(prepared.keywords.low),
        fnames=list(focus.roles),
        froles=list(focus.roles.values()),
        fterms=focus.query_text,
        symmetric=sorted(realm.config.symmetric_predicates),
    )


def _relation_lists(
    found: dict[str, list[Any]], rrf_k: int, stats: dict[str, Any]
) -> tuple[dict[str, list[int]], dict[int, bool]]:
    """The relation channels of round one, in the order answers name them, and the
    predicate focus's hits with whether each fits the role the question asks."""
    lists: dict[str, list[int]] = {}
    for name in (SIMILARITY, FULLTEXT):
        if name in found:
            lists[name] = _ids(found[name])
    if "ranked_similarity" in found:
        ranked = [_ids(found["ranked_similarity"]), _ids(found.get("ranked_fulltext", []))]
        lists[RANKED] = [f.key for f in rrf(ranked, k=rrf_k)]
    focus_fit: dict[int, bool] = {}
    if FOCUS in found:
        focus_fit = {int(r[0]): bool(r[1]) for r in found[FOCUS]}
        lists[FOCUS] = list(focus_fit)
        fitting = sum(focus_fit.values())
        stats["focus"] = {"fitting": fitting, "other_role": len(focus_fit) - fitting}
    return lists, focus_fit


def _reranked(
    window: list[Fused[int]],
    focus_fit: dict[int, bool],
    details: dict[str, list[Any]],
    hops: dict[int, int],
    params: RetrievalParams,
    stats: dict[str, Any],
) -> list[Fused[int]]:
    """The candidate window reranked by node distance and/or MMR within the focus groups;
    a distance found also improves the hop an answer reports."""
    distance = {int(r[0]): int(r[1]) for r in details.get("distances", [])}
    similarity = {(int(a), int(b)): float(x) for a, b, x in details.get("similarities", [])}
    reranked = rerank_groups(
        window,
        focus_fit,
        distance if params.node_distance else None,
        similarity,
        params.mmr_lambda,
    )
    for rid, d in distance.items():
        hops[rid] = min(hops.get(rid, d), d)
    stats["rerank"] = {
        "mmr_lambda": params.mmr_lambda,
        "node_distance": params.node_distance,
        "candidates": len(window),
        "reached": len(distance),
    }
    return reranked


def _ids(rows: list[Any]) -> list[int]:
    return [int(r[0]) for r in rows]


def channels_text(keywords: Sequence[str]) -> str:
    """The full-text query for a keyword list (empty when there is nothing to search)."""
    return websearch_text(tuple(keywords))


def _query_texts(query: str, keywords: Keywords) -> dict[str, str]:
    """Texts to embed: the query; the query sharpened by names; the query steered by themes."""
    return {
        "query": query,
        "entity": f"{query} {' '.join(keywords.low)}" if keywords.low else query,
        "theme": f"{query} {' '.join(keywords.high)}" if keywords.high else query,
    }


def _name_candidates(query: str, keywords: Keywords) -> list[str]:
    """Lowercase strings an entity name may equal: low-level keywords and short n-grams."""
    words = [name_key(w) for w in _WORD.findall(query)]
    out: dict[str, None] = {name_key(k): None for k in keywords.low}
    keyword_keys = {name_key(k) for k in keywords.all}
    for n in (4, 3, 2, 1):
        for i in range(len(words) - n + 1):
            gram = " ".join(words[i : i + n])
            if n > 1 or gram in keyword_keys:
                out.setdefault(gram, None)
    return list(out)[:64]


def _fuse_relations(
    lists: dict[str, list[int]], params: RetrievalParams, limits: RetrievalLimits
) -> list[Fused[int]]:
    """RRF over every channel, or the quota interleave of similarity against the walk (or
    the ranked list, when there is no walk) with the other channels appended behind."""
    names = list(lists)
    if params.fusion == "rrf":
        return rrf([lists[n] for n in names], k=limits.rrf_k)
    primary = TRAVERSAL if TRAVERSAL in lists else RANKED
    order = [primary, SIMILARITY, *[n for n in names if n not in (primary, SIMILARITY)]]
    fused = quota_interleave(
        lists.get(primary, []),
        lists.get(SIMILARITY, []),
        share=params.similarity_share,
        limit=params.relation_top_k * 2,
        extra=[lists[n] for n in order[2:]],
    )
    out = []
    for f in fused:
        pairs = [
            (names.index(order[c]), r)
            for c, r in zip(f.channels, f.ranks, strict=True)
            if order[c] in lists
        ]
        pairs.sort()
        out.append(Fused(f.key, f.score, tuple(c for c, _ in pairs), tuple(r for _, r in pairs)))
    return out


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)
