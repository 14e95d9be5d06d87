"""The reads of one retrieval, as three pipelined rounds on one connection.

Round one reads the seeds and every channel that does not depend on them; round two walks
from the seeds and expands their mentions; round three fetches the details of what
survived fusion (and what reranking needs of them). Each round is a list of named reads
derived from the mode's :class:`~tidegraph.query_service.plans.Plan`, sent in one
pipeline: a round costs one round trip whatever the mode reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.query_service import channels
from tidegraph.query_service.channels import Scope
from tidegraph.query_service.plans import FOCUS, FULLTEXT, SIMILARITY, TRAVERSAL, Plan


@dataclass(frozen=True)
class Read:
    name: str
    statement: sql.Composed
    ef_search: int | None = None
    """The HNSW candidate list the read needs (``None``: not a vector search)."""


@dataclass(frozen=True)
class Where:
    """What every read of one request shares."""

    schema: str
    scope: Scope
    ef_search: tuple[int, int, int]
    """Entities (and communities), relations, chunks."""


async def run(
    conn: AsyncConnection[Any], reads: list[Read], params: dict[str, Any]
) -> dict[str, list[Any]]:
    """Send ``reads`` in one pipeline; their rows by name."""
    if not reads:
        return {}
    cursors = {}
    ef: int | None = None
    async with conn.pipeline():
        for read in reads:
            if read.ef_search is not None and read.ef_search != ef:
                ef = read.ef_search
                await conn.execute(channels.set_ef_search(ef))
            cursors[read.name] = await conn.execute(read.statement, params)
    return {name: await cur.fetchall() for name, cur in cursors.items()}


def first(plan: Plan, at: Where, params: dict[str, Any]) -> list[Read]:
    """Seeds and the independent channels."""
    s, scope = at.schema, at.scope
    ef_entities, ef_relations, ef_chunks = at.ef_search
    named = bool(params["fts"])
    reads = []
    if plan.seeds:
        reads += [
            Read("by_name", channels.entities_by_name(s, scope)),
            Read("by_vector", channels.entities_by_vector(s, scope), ef_entities),
            Read(SIMILARITY, channels.relations_by_vector(s, scope), ef_relations),
        ]
        if named:
            reads.append(Read(FULLTEXT, channels.relations_by_text(s, scope)))
    if plan.chunks_by_similarity:
        reads.append(Read("chunks", channels.chunks_by_vector(s, scope), ef_chunks))
    if plan.ranked:
        ranked = channels.relations_by_vector(s, scope, "gvec")
        reads.append(Read("ranked_similarity", ranked, ef_relations))
        if named and not plan.seeds:
            reads.append(Read("ranked_fulltext", channels.relations_by_text(s, scope)))
    if plan.relations and params["fterms"] and params["fnames"]:
        reads.append(Read(FOCUS, channels.relations_by_focus(s, scope)))
    if plan.communities:
        reads += [
            Read("communities", channels.communities_ranked(s, scope), ef_entities),
            Read("last_write", channels.last_write(s, scope)),
        ]
    return reads


def second(plan: Plan, at: Where, hops: int) -> list[Read]:
    """The walk and mention expansion from the matched entities (``params["seeds"]``)."""
    reads = []
    if plan.seeds and hops > 0:
        reads.append(Read(TRAVERSAL, channels.traversal(at.schema, at.scope)))
    if plan.chunks_by_mention:
        reads.append(Read("mentions", channels.chunks_by_mentions(at.schema, at.scope)))
    return reads


def third(
    at: Where, params: dict[str, Any], distance_bound: int | None, similarities: bool
) -> list[Read]:
    """Details of the fused candidates (``params["ids"]``, ``params["chunk_ids"]``); their
    graph distances within ``distance_bound`` hops and their pairwise similarities when
    reranking asks for them."""
    s, scope = at.schema, at.scope
    reads = []
    if params["ids"]:
        reads.append(Read("relations", channels.relation_details(s, scope)))
        if distance_bound is not None:
            bounded = channels.relation_distances(s, scope, distance_bound)
            reads.append(Read("distances", bounded))
        if similarities and len(params["ids"]) > 1:
            reads.append(Read("similarities", channels.relation_similarities(s)))
    if params["chunk_ids"]:
        reads.append(Read("chunks", channels.chunk_details(s, scope)))
    return reads
