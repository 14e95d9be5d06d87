"""``query_data``: the six retrieval modes of paper Table 3 over one realm.

=======  ========  ======  ===========================================  ===========
mode     entities  chunks  relations                                    communities
=======  ========  ======  ===========================================  ===========
mix      yes       yes     traversal + similarity + full-text (RRF)     no
local    yes       yes     same, entity-centred (see below)             no
global   no        no      ranked: similarity + full-text on themes     yes
hybrid   yes       yes     traversal + similarity + full-text + ranked  yes
naive    no        yes     no                                           no
bypass   no        no      no                                           no
=======  ========  ======  ===========================================  ===========

``local`` differs from ``mix`` in where its passages come from: only mention expansion,
so every passage is about a matched entity; ``mix`` also ranks chunks by query similarity.
The full-text channel searches the named things only (low-level keywords: names, quoted
phrases, identifiers, years), and is skipped when the query names none: exact terms are
where lexical search is decisive (paper §7.3), while a common theme word matches a large
share of the edges, costs a heap visit per match and ranks them by chance. ``global``
ranks relations by similarity to the question steered by its themes (fused with the
named-thing search when there is one), and community reports by a blend of similarity,
rating and size when a space has any, so it never hard-fails before communities are built
(paper §6).

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

A request uses one pooled connection and three pipelined rounds: seeds and the independent
channels; the walk and mention expansion from the seeds; details of what survived fusion.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from psycopg import AsyncConnection

from tidegraph.query_service import channels
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
from tidegraph.query_service.rerank import rerank_groups
from tidegraph.schemas.names import name_key
from tidegraph.schemas.realm_config import parse_embedder
from tidegraph.store.realms import RealmInfo

Mode = Literal["mix", "local", "global", "hybrid", "naive", "bypass"]
MODES: tuple[Mode, ...] = ("mix", "local", "global", "hybrid", "naive", "bypass")
Fusion = Literal["rrf", "quota"]

TRAVERSAL, SIMILARITY, FULLTEXT, RANKED = "traversal", "similarity", "fulltext", "ranked"
FOCUS = "predicate"
_WORD = re.compile(r"[^\W_][\w.'’&-]*\w|[^\W_]")


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
class EntityHit:
    id: str
    space: str
    name: str
    type: str
    description: str
    aliases: list[str]
    matched: str
    """``name`` (named in the query) or ``vector``."""
    score: float


@dataclass(frozen=True)
class RelationHit:
    id: str
    space: str
    subject: str
    predicate: str
    object: str
    negated: bool
    valid_from: str | None
    valid_to: str | None
    t_created: datetime
    t_expired: datetime | None
    superseded_by: str | None
    status: str
    """Belief state in the view read: ``current`` or ``superseded``."""
    weight: int
    hop: int | None
    """Hops from the nearest matched entity; ``None`` when the walk did not reach it."""
    channels: list[str]
    doc_keys: list[str]
    score: float
    order_key: str | None = None
    """Document order (publication date …) of the latest live document asserting it: what
    decides, between conflicting statements, which is the most recent."""
    superseded_via: str | None = None
    """How it was superseded: ``negation``, ``exclusive_group`` or ``functional``."""


@dataclass(frozen=True)
class ChunkHit:
    id: str
    space: str
    doc_key: str
    ordinal: int
    text: str
    citation: str
    channels: list[str]
    score: float
    order_key: str | None = None
    """Its document's order (publication date …)."""


@dataclass(frozen=True)
class CommunityHit:
    id: str
    space: str
    title: str
    summary: str
    findings: list[str]
    """The report's findings, one statement each (denials are stated as denials)."""
    level: int
    rating: float
    size: int
    built_at: datetime
    score: float


@dataclass(frozen=True)
class RetrievalResult:
    """What ``query_data`` answers (serialised as-is)."""

    entities: list[EntityHit]
    relations: list[RelationHit]
    chunks: list[ChunkHit]
    communities: list[CommunityHit]
    stats: dict[str, Any] = field(default_factory=dict)


def _uses(mode: Mode) -> tuple[bool, bool, bool, bool]:
    """(entities and walk, chunks, ranked relations, communities)."""
    return {
        "mix": (True, True, False, False),
        "local": (True, True, False, False),
        "global": (False, False, True, True),
        "hybrid": (True, True, True, True),
        "naive": (False, True, False, False),
        "bypass": (False, False, False, False),
    }[mode]


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
) -> RetrievalResult:
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
) -> RetrievalResult:
    """The database part of ``query_data``: three pipelined rounds on ``conn``."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    stats: dict[str, Any] = {"mode": params.mode, "fusion": params.fusion, "timings_ms": timings}
    if params.mode == "bypass" or prepared is None:
        return RetrievalResult([], [], [], [], stats)
    walk, with_chunks, ranked, with_communities = _uses(params.mode)
    keywords = prepared.keywords
    stats["keywords"] = {"low": keywords.low, "high": keywords.high, "source": keywords.source}
    vec = {name: channels.vector(v) for name, v in prepared.vectors.items()}
    timings["embed"] = prepared.embed_ms

    s = realm.schema
    archived_row: tuple[Any, ...] | None = (True,)  # at an instant: whatever is archived now
    if params.as_believed_at is None:
        cur = await conn.execute(channels.has_archived(s))
        archived_row = await cur.fetchone()
    scope = Scope(
        params.space,
        channels.valid_days(params.as_of),
        params.as_believed_at,
        params.include_superseded,
        params.relation_types,
        archived=bool(archived_row and archived_row[0]),
    )
    depth = max(limits.channel_depth, params.relation_top_k)
    named_text = channels_text(keywords.low)
    names = _name_candidates(params.query, keywords)
    focus = question_focus(params.query, names)
    edge_cap = params.max_relation_edges or limits.edge_cap
    p = channels.parameters(
        scope,
        qvec=vec["query"],
        evec=vec["entity"],
        gvec=vec["theme"],
        top_k=params.top_k,
        depth=depth,
        hops=params.hops,
        cap=edge_cap,
        fanout=max(4, edge_cap // 4),
        over=params.top_k * 3,
        names=names,
        fts=named_text,
        fnames=list(focus.roles),
        froles=list(focus.roles.values()),
        fterms=focus.query_text,
        symmetric=sorted(realm.config.symmetric_predicates),
    )

    # Round 1: seeds and every channel that does not depend on them.
    t = time.perf_counter()
    lists: dict[str, list[int]] = {}
    by_name: list[Any] = []
    by_vec: list[Any] = []
    chunk_vec: list[int] = []
    community_rows: list[Any] = []
    last_write: datetime | None = None
    async with conn.pipeline():
        cur_name = cur_vec = cur_sim = cur_fts = cur_chunks = cur_rank = cur_rank_fts = None
        cur_comm = cur_last = cur_focus = None
        ef_entities, ef_relations, ef_chunks = limits.ef_search_for(realm.embedder)
        if walk:
            cur_name = await conn.execute(channels.entities_by_name(s, scope), p)
            await conn.execute(channels.set_ef_search(ef_entities))
            cur_vec = await conn.execute(channels.entities_by_vector(s, scope), p)
            await conn.execute(channels.set_ef_search(ef_relations))
            cur_sim = await conn.execute(channels.relations_by_vector(s, scope), p)
            if p["fts"]:
                cur_fts = await conn.execute(channels.relations_by_text(s, scope), p)
        if with_chunks and params.mode != "local":
            await conn.execute(channels.set_ef_search(ef_chunks))
            cur_chunks = await conn.execute(channels.chunks_by_vector(s, scope), p)
        if ranked:
            await conn.execute(channels.set_ef_search(ef_relations))
            cur_rank = await conn.execute(channels.relations_by_vector(s, scope, "gvec"), p)
            if p["fts"] and not walk:
                cur_rank_fts = await conn.execute(channels.relations_by_text(s, scope), p)
        if (walk or ranked) and p["fterms"] and p["fnames"]:
            cur_focus = await conn.execute(channels.relations_by_focus(s, scope), p)
        if with_communities:
            await conn.execute(channels.set_ef_search(ef_entities))
            cur_comm = await conn.execute(channels.communities_ranked(s, scope), p)
            cur_last = await conn.execute(channels.last_write(s, scope), p)
    if cur_name is not None and cur_vec is not None and cur_sim is not None:
        by_name = await cur_name.fetchall()
        by_vec = await cur_vec.fetchall()
        lists[SIMILARITY] = [int(r[0]) for r in await cur_sim.fetchall()]
        if cur_fts is not None:
            lists[FULLTEXT] = [int(r[0]) for r in await cur_fts.fetchall()]
    if cur_chunks is not None:
        chunk_vec = [int(r[0]) for r in await cur_chunks.fetchall()]
    if cur_rank is not None:
        sims = [int(r[0]) for r in await cur_rank.fetchall()]
        texts_ = [int(r[0]) for r in await cur_rank_fts.fetchall()] if cur_rank_fts else []
        lists[RANKED] = [f.key for f in rrf([sims, texts_], k=limits.rrf_k)]
    focus_fit: dict[int, bool] = {}
    if cur_focus is not None:
        focus_fit = {int(r[0]): bool(r[1]) for r in await cur_focus.fetchall()}
        lists[FOCUS] = list(focus_fit)
        fitting = sum(focus_fit.values())
        stats["focus"] = {"fitting": fitting, "other_role": len(focus_fit) - fitting}
    if cur_comm is not None and cur_last is not None:
        community_rows = await cur_comm.fetchall()
        row = await cur_last.fetchone()
        last_write = row[0] if row else None
    timings["seeds_and_channels"] = _ms(t)

    entities = _entities(by_name, by_vec, params.top_k, limits.entity_floor)
    seeds = [int(e.id) for e in entities]
    stats["seeds"] = len(seeds)

    # Round 2: the walk and mention expansion from the matched entities.
    t = time.perf_counter()
    hops: dict[int, int] = {}
    chunk_mentions: list[int] = []
    if seeds and (walk or with_chunks):
        p["seeds"] = seeds
        async with conn.pipeline():
            cur_walk = cur_ment = None
            if walk and params.hops > 0:
                cur_walk = await conn.execute(channels.traversal(s, scope), p)
            if with_chunks:
                cur_ment = await conn.execute(channels.chunks_by_mentions(s, scope), p)
        if cur_walk is not None:
            rows = await cur_walk.fetchall()
            lists[TRAVERSAL] = [int(r[0]) for r in rows]
            hops = {int(r[0]): int(r[1]) for r in rows}
        if cur_ment is not None:
            chunk_mentions = [int(r[0]) for r in await cur_ment.fetchall()]
    timings["walk"] = _ms(t)

    if walk:  # a focus hit is incident to a named entity, which is a seed
        for rid in focus_fit:
            hops.setdefault(rid, 1)
    fused = focus_first(_fuse_relations(lists, params, limits), list(lists), focus_fit)
    chunk_lists = [chunk_vec, chunk_mentions]
    fused_chunks = rrf(chunk_lists, k=limits.rrf_k, limit=params.top_k)

    # Round 3: details of what survived fusion (and what reranking needs of them).
    t = time.perf_counter()
    margin = params.relation_top_k if params.space == "*" else 10  # room for de-duplication
    reranked = params.node_distance or params.mmr_lambda is not None
    window = params.relation_top_k * (2 if reranked else 1) + margin
    p["ids"] = [f.key for f in fused[:window]]
    p["chunk_ids"] = [f.key for f in fused_chunks]
    rel_rows: list[Any] = []
    chunk_rows: list[Any] = []
    distance: dict[int, int] = {}
    similarity: dict[tuple[int, int], float] = {}
    if p["ids"] or p["chunk_ids"]:
        async with conn.pipeline():
            cur_rel = cur_chk = cur_dist = cur_pairs = None
            if p["ids"]:
                cur_rel = await conn.execute(channels.relation_details(s, scope), p)
                if params.node_distance and seeds:
                    bound = max(params.hops, 1)
                    cur_dist = await conn.execute(channels.relation_distances(s, scope, bound), p)
                if params.mmr_lambda is not None and len(p["ids"]) > 1:
                    cur_pairs = await conn.execute(channels.relation_similarities(s), p)
            if p["chunk_ids"]:
                cur_chk = await conn.execute(channels.chunk_details(s, scope), p)
        rel_rows = await cur_rel.fetchall() if cur_rel is not None else []
        chunk_rows = await cur_chk.fetchall() if cur_chk is not None else []
        if cur_dist is not None:
            distance = {int(r[0]): int(r[1]) for r in await cur_dist.fetchall()}
        if cur_pairs is not None:
            similarity = {(int(a), int(b)): float(x) for a, b, x in await cur_pairs.fetchall()}
    timings["details"] = _ms(t)
    if reranked:
        fused = rerank_groups(
            fused[:window],
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
            "candidates": len(p["ids"]),
            "reached": len(distance),
        }

    relations = _relations(
        fused,
        rel_rows,
        list(lists),
        hops,
        params.relation_top_k,
        realm.config.symmetric_predicates,
    )
    chunks = _chunks(fused_chunks, chunk_rows, ["similarity", "mentions"])
    communities, warnings = _communities(community_rows, last_write, params.top_k, limits)
    if with_communities and not community_rows:
        warnings.append(NO_BUILD)
    stats["channels"] = {name: len(ids) for name, ids in lists.items()}
    stats["warnings"] = warnings
    timings["total"] = _ms(started)
    return RetrievalResult(entities if walk else [], relations, chunks, communities, stats)


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


def _entities(by_name: list[Any], by_vec: list[Any], top_k: int, floor: float) -> list[EntityHit]:
    """Named entities first (they are what the question is about), then nearest by vector
    down to the similarity ``floor``."""
    out: dict[int, EntityHit] = {}
    for i, sp, name, typ, desc, aliases in sorted(by_name, key=lambda r: int(r[0])):
        out.setdefault(int(i), EntityHit(str(i), sp, name, typ, desc, list(aliases), "name", 1.0))
    for i, sp, name, typ, desc, aliases, d in by_vec:
        if len(out) >= max(top_k, len(by_name)):
            break
        if _sim(d) < floor:
            break  # rows come nearest first
        hit = EntityHit(str(i), sp, name, typ, desc, list(aliases), "vector", _sim(d))
        out.setdefault(int(i), hit)
    return list(out.values())


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


def focus_first(
    fused: list[Fused[int]], names: list[str], fit: dict[int, bool]
) -> list[Fused[int]]:
    """The predicate focus leads (:mod:`~tidegraph.query_service.focus`): its hits in the
    fitting role, then in the other role, then every other candidate — each group in fused
    order. A focus hit the fusion left out (the quota merge truncates) is still placed."""
    if not fit:
        return fused
    placed = {f.key for f in fused}
    channel = names.index(FOCUS)
    missing = [
        Fused(key, 0.0, (channel,), (rank,))
        for rank, key in enumerate(fit, start=1)
        if key not in placed
    ]
    ordered = [*fused, *missing]
    return (
        [f for f in ordered if fit.get(f.key) is True]
        + [f for f in ordered if fit.get(f.key) is False]
        + [f for f in ordered if f.key not in fit]
    )


def _relations(
    fused: list[Fused[int]],
    rows: list[Any],
    names: list[str],
    hops: dict[int, int],
    limit: int,
    symmetric: frozenset[str] = frozenset(),
) -> list[RelationHit]:
    """Hits in fused order, de-duplicated on (subject, predicate, object, negated) ignoring
    case — the same fact in two spaces is one line of evidence with both provenances. For a
    ``symmetric`` predicate the pair is unordered: ``B p A`` merges into ``A p B``."""
    by_id = {int(r[0]): r for r in rows}
    out: list[RelationHit] = []
    index: dict[tuple[str, str, str, bool], int] = {}
    for f in fused:
        row = by_id.get(f.key)
        if row is None:
            continue
        (rid, sp, subj, pred, obj, neg, vf, vt, tc, te, state, by, weight, docs, order, via) = row
        chans = [names[c] for c in f.channels]
        key = _fact_key(subj, pred, obj, bool(neg), symmetric)
        if key in index:
            prev = out[index[key]]
            out[index[key]] = RelationHit(
                **{
                    **prev.__dict__,
                    "channels": _union(prev.channels, chans),
                    "doc_keys": sorted({*prev.doc_keys, *docs}),
                    "hop": _min_hop(prev.hop, hops.get(int(rid))),
                    "order_key": max(
                        (o for o in (prev.order_key, order) if o is not None), default=None
                    ),
                }
            )
            continue
        if len(out) >= limit:
            continue
        index[key] = len(out)
        out.append(
            RelationHit(
                str(rid),
                sp,
                subj,
                pred,
                obj,
                bool(neg),
                vf,
                vt,
                tc,
                te,
                str(by) if by is not None else None,
                str(state or "retracted"),
                int(weight),
                hops.get(int(rid)),
                chans,
                list(docs),
                round(f.score, 6),
                order,
                via,
            )
        )
    return out


def _fact_key(
    subject: str, predicate: str, obj: str, negated: bool, symmetric: frozenset[str]
) -> tuple[str, str, str, bool]:
    """What makes two relation rows one fact (names ignoring case; a symmetric predicate's
    pair unordered)."""
    a, b = subject.lower(), obj.lower()
    if predicate in symmetric and b < a:
        a, b = b, a
    return (a, predicate.lower(), b, negated)


def _chunks(fused: list[Fused[int]], rows: list[Any], names: list[str]) -> list[ChunkHit]:
    by_id = {int(r[0]): r for r in rows}
    out: list[ChunkHit] = []
    for f in fused:
        row = by_id.get(f.key)
        if row is None:
            continue
        cid, sp, doc_key, ordinal, text, order = row
        out.append(
            ChunkHit(
                str(cid),
                sp,
                doc_key,
                int(ordinal),
                text,
                f"{doc_key}#{int(ordinal)}",
                [names[c] for c in f.channels],
                round(f.score, 6),
                order,
            )
        )
    return out


def _communities(
    rows: list[Any], last_write: datetime | None, top_k: int, limits: RetrievalLimits
) -> tuple[list[CommunityHit], list[str]]:
    """Blend similarity, rating and size (paper §6): a narrow, tightly worded report must
    not outrank a broad one merely by sitting closer to a short query."""
    if not rows:
        return [], []
    w_sim, w_rating, w_size = limits.community_weights
    max_rating = max(10.0, max(float(r[6]) for r in rows))
    max_size = max(int(r[7]) for r in rows)
    hits = []
    for cid, sp, title, summary, findings, level, rating, size, built_at, d in rows:
        size_term = math.log1p(int(size)) / math.log1p(max_size) if max_size > 0 else 0.0
        score = w_sim * _sim(d) + w_rating * float(rating) / max_rating + w_size * size_term
        hits.append(
            CommunityHit(
                str(cid),
                sp,
                title,
                summary,
                _finding_texts(findings),
                int(level),
                float(rating),
                int(size),
                built_at,
                round(score, 6),
            )
        )
    hits.sort(key=lambda h: (-h.score, int(h.id)))
    warnings = []
    oldest = min(h.built_at for h in hits)
    if last_write is not None and oldest < last_write:
        warnings.append(
            "community reports predate the latest graph write; rebuild with "
            "`tidegraph communities` for reports that describe the current graph"
        )
    return hits[:top_k], warnings


NO_BUILD = (
    "no community reports: no build covers this space (build them with"
    " `tidegraph communities`; an answer as believed at an instant reads the build current"
    " then, never a later one)"
)
"""Why a mode that reads community reports found none: the same words now and at any
earlier instant, so a past answer never changes."""


def _finding_texts(findings: Any) -> list[str]:
    out = []
    for f in findings or []:
        text = f.get("summary") if isinstance(f, dict) else f
        if isinstance(text, str) and text.strip():
            out.append(text.strip())
    return out


def _sim(distance: Any) -> float:
    return round(1.0 - float(distance), 6) if distance is not None else 0.0


def _union(a: list[str], b: list[str]) -> list[str]:
    return a + [x for x in b if x not in a]


def _min_hop(a: int | None, b: int | None) -> int | None:
    present = [h for h in (a, b) if h is not None]
    return min(present) if present else None


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)
