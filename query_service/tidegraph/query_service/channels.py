"""The SQL of retrieval: one builder per channel, all sharing one set of edge filters.

Every statement takes the same named parameters (:func:`parameters`), so a request can
queue several of them in one pipeline. The edge filter (:func:`edge_filter`) — space,
belief state, validity at ``as_of``, relation types — is the single definition used by the
traversal *inside* each step of the walk and by the similarity and full-text channels, so
no channel can see an edge another would refuse (paper §7.2: a filter applied after the
walk still lets a superseded or out-of-period edge lead to a vertex that then presents as
current context).

Temporal semantics (paper §5.4):

* ``as_of`` (valid time): relations whose padded period overlaps the days ``as_of`` covers
  (``1840`` the whole year, ``1840-06`` the month, ``1840-06-05`` the day); undated bounds
  are open, so an undated relation always matches.
* ``as_believed_at`` (belief time): every statement reads the relations and entities as
  believed at T (:func:`~tidegraph.store.belief.relations_at`,
  :func:`~tidegraph.store.belief.entities_at`: the same columns, from the history interval
  open at T), chunks, mentions and community builds by their own stamps — so each filter
  below is written once and reads the past as it reads the present;
* ``include_superseded`` admits ``superseded`` next to ``current`` either way. Retracted
  relations never match.
"""

# Long on purpose: the SQL of every retrieval channel side by side, all over the same belief-time
# views and scope predicates, so a filter changes in one place for every channel.

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from pgvector import Vector
from psycopg import sql

from tidegraph.query_service.db import table
from tidegraph.schemas import ANY_SPACE, covered
from tidegraph.store import alive, belief, entities_view, relations_view


@dataclass(frozen=True)
class Scope:
    """The filters every channel applies, as the request stated them."""

    space: str
    """A space name, or ``*`` for every space of the realm."""
    as_of: tuple[date, date] | None
    """First and last day of the valid time asked for (:func:`valid_days`); ``None``
    admits every period."""
    believed_at: datetime | None
    """Belief-time instant; ``None`` reads the current belief."""
    include_superseded: bool
    """Admit superseded relations next to current ones."""
    relation_types: tuple[str, ...] | None
    """Admitted predicates; ``None`` admits all."""
    archived: bool = True
    """The realm may hold archived entities, so edges are checked for archived ends;
    ``False`` only when it is known to hold none (:func:`has_archived`)."""

    @property
    def states(self) -> list[str]:
        return ["current", "superseded"] if self.include_superseded else ["current"]


def valid_days(as_of: str | None) -> tuple[date, date] | None:
    """The days an ``as_of`` value (``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD``, as
    ``valid_from`` holds them) covers."""
    return covered(as_of) if as_of is not None else None


def parameters(scope: Scope, **extra: Any) -> dict[str, Any]:
    """The named parameters shared by every statement of one request."""
    return {
        "space": scope.space,
        "as_of_first": scope.as_of[0] if scope.as_of else None,
        "as_of_last": scope.as_of[1] if scope.as_of else None,
        "believed": scope.believed_at,
        "states": scope.states,
        "types": list(scope.relation_types or ()),
        **extra,
    }


def vector(values: list[float]) -> Vector:
    """A query vector as a bound parameter (binary, no text round trip)."""
    return Vector(values)


def set_ef_search(value: int) -> sql.Composed:
    """The HNSW candidate list for the searches that follow on this connection: each vector
    channel sets its own, because recall at a given width differs by table (short, alike
    texts make a harder graph to search)."""
    return sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(int(value)))


def _space(alias: str, scope: Scope) -> sql.Composable:
    if scope.space == ANY_SPACE:
        return sql.SQL("true")
    return sql.SQL("{}.space = %(space)s").format(sql.Identifier(alias))


def rels(schema: str, scope: Scope) -> sql.Composable:
    """The relations the request reads (as believed at its instant, when it gives one)."""
    return relations_view(schema, scope.believed_at is not None)


def ents(schema: str, scope: Scope) -> sql.Composable:
    """The entities the request reads (as believed at its instant, when it gives one)."""
    return entities_view(schema, scope.believed_at is not None)


def has_archived(schema: str) -> sql.Composed:
    """Whether any entity of the realm is archived (a probe of ``entities_archived``)."""
    return sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE archived_since IS NOT NULL)").format(
        table(schema, "entities")
    )


def edge_filter(schema: str, scope: Scope, alias: str = "r") -> sql.Composed:
    """The predicate an edge must pass to be walked or returned, whatever the channel.

    An edge with an archived end is withheld like the entity, so no channel leads to or
    reports an archived entity. ``NOT IN`` over an uncorrelated subquery is a hashed
    subplan, read once per statement through the partial index ``entities_archived``, and
    stays a filter: an ``EXISTS`` would become an anti-join and cost the vector channel its
    HNSW index scan."""
    r = sql.Identifier(alias)
    parts: list[sql.Composable] = [_space(alias, scope)]
    if scope.archived:
        parts.append(
            sql.SQL(
                "NOT ({r}.subject_id IN ({withheld})) AND NOT ({r}.object_id IN ({withheld}))"
            ).format(
                r=r,
                withheld=sql.SQL(
                    "SELECT ax.id FROM {} ax WHERE ax.archived_since IS NOT NULL"
                ).format(ents(schema, scope)),
            )
        )
    parts.append(sql.SQL("{}.status = ANY(%(states)s)").format(r))
    if scope.as_of is not None:
        parts.append(
            sql.SQL(
                "({r}.valid_from_d IS NULL OR {r}.valid_from_d <= %(as_of_last)s)"
                " AND ({r}.valid_to_d IS NULL OR {r}.valid_to_d >= %(as_of_first)s)"
            ).format(r=r)
        )
    if scope.relation_types is not None:
        parts.append(sql.SQL("{}.predicate = ANY(%(types)s)").format(r))
    return sql.SQL(" AND ").join(parts)


def chunk_filter(scope: Scope, alias: str = "c") -> sql.Composed:
    """Live chunks, or the chunks believed at the instant, in scope."""
    return sql.SQL(" AND ").join(
        [_space(alias, scope), belief(alias, scope.believed_at is not None)]
    )


def entity_filter(scope: Scope, alias: str = "e") -> sql.Composed:
    """Entities neither dormant nor archived (as they stood at the belief instant, when one
    is given: entity rows come from :func:`ents`), in scope."""
    return sql.SQL(" AND ").join([_space(alias, scope), alive(alias)])


_ENTITY_COLUMNS = sql.SQL("e.id, e.space, e.name, e.type, e.description, e.aliases")


def entity_columns(alias: str = "e") -> sql.Composed:
    """``id, space, name, type, description, aliases`` of entity rows ``alias``."""
    return sql.SQL("{a}.id, {a}.space, {a}.name, {a}.type, {a}.description, {a}.aliases").format(
        a=sql.Identifier(alias)
    )


def alias_rows(schema: str, scope: Scope) -> sql.Composable:
    """Rows ``(entity_id, alias_lower)`` of every alias key: the alias table now, the
    aliases the entities held at the belief instant then."""
    if scope.believed_at is None:
        return table(schema, "entity_aliases")
    return sql.SQL(
        "(SELECT x.id AS entity_id, k.alias_lower FROM {} x,"
        " unnest(x.alias_keys) AS k(alias_lower))"
    ).format(ents(schema, scope))


def alias_join(schema: str, scope: Scope, key: sql.Composable) -> sql.Composed:
    """``JOIN`` of the entities ``e`` (of :func:`ents`) having the alias ``key`` (a name
    key)."""
    return sql.SQL(
        " JOIN {alias} a ON a.alias_lower = {key} JOIN {ent} e ON e.id = a.entity_id"
    ).format(alias=alias_rows(schema, scope), ent=ents(schema, scope), key=key)


def entities_by_name(schema: str, scope: Scope) -> sql.Composed:
    """Entities whose canonical name or an alias equals one of ``%(names)s`` (lowercase),
    as believed (:func:`ents`)."""
    return sql.SQL(
        "SELECT {cols} FROM {ent} e WHERE e.name_key = ANY(%(names)s) AND {f}"
        " UNION SELECT {cols} FROM unnest(%(names)s::text[]) AS n(key){aliased} WHERE {f}"
    ).format(
        cols=entity_columns(),
        ent=ents(schema, scope),
        aliased=alias_join(schema, scope, sql.SQL("n.key")),
        f=entity_filter(scope),
    )


def entities_by_vector(schema: str, scope: Scope) -> sql.Composed:
    """The ``%(top_k)s`` entities nearest ``%(evec)s`` (cosine), dormant ones excluded, as
    believed (the distance is the present embedding's: history keeps no vectors; an entity
    merged away and deleted since has none and is found by name only)."""
    f = entity_filter(scope)
    if scope.believed_at is not None:
        f = sql.SQL("{} AND e.embedding IS NOT NULL").format(f)
    return sql.SQL(
        "SELECT {cols}, x.d FROM (SELECT {inner}, e.embedding <=> %(evec)s AS d FROM {ent} e"
        " WHERE {f} ORDER BY e.embedding <=> %(evec)s LIMIT %(top_k)s) x ORDER BY x.d, x.id"
    ).format(cols=entity_columns("x"), inner=_ENTITY_COLUMNS, ent=ents(schema, scope), f=f)


def chunks_by_vector(schema: str, scope: Scope) -> sql.Composed:
    """The ``%(top_k)s`` chunks nearest ``%(qvec)s``."""
    return sql.SQL(
        "SELECT * FROM (SELECT c.id, c.embedding <=> %(qvec)s AS d FROM {chunks} c"
        " WHERE {f} ORDER BY c.embedding <=> %(qvec)s LIMIT %(top_k)s) x ORDER BY d, id"
    ).format(chunks=table(schema, "chunks"), f=chunk_filter(scope))


def chunks_by_mentions(schema: str, scope: Scope) -> sql.Composed:
    """Chunks mentioning the matched entities ``%(seeds)s``, most matched entities first."""
    return sql.SQL(
        "SELECT m.chunk_id, count(*) AS n FROM {mentions} m JOIN {chunks} c ON c.id = m.chunk_id"
        " WHERE m.entity_id = ANY(%(seeds)s::bigint[]) AND {m} AND {f}"
        " GROUP BY m.chunk_id ORDER BY n DESC, m.chunk_id DESC LIMIT %(top_k)s"
    ).format(
        mentions=table(schema, "mentions"),
        chunks=table(schema, "chunks"),
        m=belief("m", scope.believed_at is not None),
        f=chunk_filter(scope),
    )


def relations_by_vector(schema: str, scope: Scope, param: str = "qvec") -> sql.Composed:
    """Relation channel 2: nearest rendered triples by embedding."""
    v = sql.Placeholder(param)
    return sql.SQL(
        "SELECT id FROM (SELECT r.id, r.embedding <=> {v} AS d FROM {rel} r WHERE {f}"
        " ORDER BY r.embedding <=> {v} LIMIT %(depth)s) x ORDER BY d, id"
    ).format(v=v, rel=rels(schema, scope), f=edge_filter(schema, scope))


def relations_by_text(schema: str, scope: Scope, param: str = "fts") -> sql.Composed:
    """Relation channel 3: full-text match of the rendered triple, best ``ts_rank_cd`` first."""
    return sql.SQL(
        "SELECT r.id FROM {rel} r, websearch_to_tsquery('simple', {q}) q"
        " WHERE r.tsv @@ q AND {f}"
        " ORDER BY ts_rank_cd(r.tsv, q) DESC, r.weight DESC, r.id DESC LIMIT %(depth)s"
    ).format(q=sql.Placeholder(param), rel=rels(schema, scope), f=edge_filter(schema, scope))


_TERMS = sql.SQL(
    "terms AS (SELECT t.i::int AS i, websearch_to_tsquery('english', t.term) AS q"
    " FROM unnest(%(fterms)s::text[]) WITH ORDINALITY AS t(term, i))"
)
"""The common table expression ``terms``: the predicate terms ``%(fterms)s`` (one
``websearch_to_tsquery`` text each, :mod:`~tidegraph.query_service.focus`), from 1."""


def _term_mask(text: sql.Composable) -> sql.Composed:
    """The terms ``text`` names, as a bit mask (bit ``i - 1`` for term ``i``): a word of it
    and the term share an English stem, decided by PostgreSQL's ``english`` configuration
    on both sides (a predicate's underscores read as spaces)."""
    return sql.SQL(
        "(SELECT coalesce(bit_or(1 << (t.i - 1)), 0) FROM terms t"
        " WHERE to_tsvector('english', replace({}, '_', ' ')) @@ t.q)"
    ).format(text)


def relations_by_focus(schema: str, scope: Scope) -> sql.Composed:
    """The predicate focus (:mod:`~tidegraph.query_service.focus`): admitted relations
    incident to an entity named ``%(fnames)s`` whose predicate names a term
    (:func:`_term_mask`). Rows: relation id, whether the named entity holds the role
    ``%(froles)s`` gives it (an unknown role, or a predicate of ``%(symmetric)s``, fits
    either way), and — the same on every row — the terms all of them name, by their
    predicate or the type of their other end (what the named entities' own relations
    explain, for :func:`relation_chains`); fitting ones first, then best corroborated,
    newest."""
    ent, rel, ef = ents(schema, scope), rels(schema, scope), entity_filter(scope)
    side = sql.SQL(
        "SELECT r.id, r.weight, r.t_created, r.{far} AS far, coalesce(n.role = {role}, true)"
        " OR r.predicate = ANY(%(symmetric)s::text[]) AS fit, {mask} AS mask"
        " FROM named n JOIN {rel} r ON r.{near} = n.id WHERE {rf}"
    )
    sides = [
        side.format(
            role=sql.Literal(role),
            near=sql.Identifier(near),
            far=sql.Identifier(far),
            mask=_term_mask(sql.SQL("r.predicate")),
            rel=rel,
            rf=edge_filter(schema, scope),
        )
        for role, near, far in (
            ("subject", "subject_id", "object_id"),
            ("object", "object_id", "subject_id"),
        )
    ]
    return sql.SQL(
        "WITH wanted AS (SELECT * FROM unnest(%(fnames)s::text[], %(froles)s::text[])"
        "  AS w(key, role)),"
        " named AS (SELECT e.id, w.role FROM wanted w JOIN {ent} e ON e.name_key = w.key"
        "  WHERE {ef}"
        "  UNION SELECT e.id, w.role FROM wanted w{aliased} WHERE {ef}),"
        " {terms}, hits AS ({a} UNION ALL {b})"
        " SELECT h.id, bool_or(h.fit), bit_or(bit_or(h.mask | {ends})) OVER ()"
        " FROM hits h LEFT JOIN {ent} o ON o.id = h.far WHERE h.mask <> 0 GROUP BY h.id"
        " ORDER BY bool_or(h.fit) DESC, max(h.weight) DESC, max(h.t_created) DESC, h.id DESC"
        " LIMIT %(depth)s"
    ).format(
        ent=ent,
        ef=ef,
        aliased=alias_join(schema, scope, sql.SQL("w.key")),
        terms=_TERMS,
        a=sides[0],
        b=sides[1],
        ends=_term_mask(sql.SQL("o.type")),
    )


def relation_chains(schema: str, scope: Scope) -> sql.Composed:
    """Evidence chains (:mod:`~tidegraph.query_service.paths`): paths of 2 to ``%(hops)s``
    admitted relations from the named entities ``%(named)s``, each link leading to an
    entity not yet on the path. A link is *named* when its predicate names a term
    (:func:`_term_mask`) no earlier link names; at most one link is not, and the last one
    is unless the far end's type names a term no link names; and the chain names a term
    (by a link or its far end) outside ``%(own)s``, the terms the named entities' own
    relations explain (:func:`relations_by_focus`). Each step takes per path end its
    named links first, then those whose far end's type names a new term, then the newest
    — at most ``%(cap)s`` from a named entity and ``%(fanout)s`` further out, so a hub
    cannot flood it; the filters are inside the step, as in the walk. Rows: link ids from
    the named entity outwards, the terms each link's predicate names, the terms the far
    end's type names (masks), whether the far end is named in the question; best named
    first, ``%(depth)s`` at most."""
    return sql.SQL(
        "WITH RECURSIVE {terms},"
        " step(entity_id, hop, links, masks, ends, visited, seen, loose, last_named) AS ("
        "  SELECT DISTINCT n, 0, ARRAY[]::bigint[], ARRAY[]::int[], 0, ARRAY[n], 0, 0, false"
        "  FROM unnest(%(named)s::bigint[]) AS n"
        "  UNION ALL"
        "  SELECT x.other, s.hop + 1, s.links || x.id, s.masks || x.mask, x.ends,"
        "   s.visited || x.other, s.seen | x.mask, s.loose + (NOT x.adds)::int, x.adds"
        "  FROM step s CROSS JOIN LATERAL ("
        "   SELECT y.*, (y.mask & ~s.seen) <> 0 AS adds FROM ("
        "    SELECT r.id, r.t_created, z.other, {mask} AS mask, {ends} AS ends"
        "    FROM {rel} r CROSS JOIN LATERAL (SELECT CASE WHEN r.subject_id = s.entity_id"
        "     THEN r.object_id ELSE r.subject_id END AS other) z"
        "    LEFT JOIN {ent} o ON o.id = z.other"
        "    WHERE (r.subject_id = s.entity_id OR r.object_id = s.entity_id) AND {f}) y"
        "   WHERE NOT y.other = ANY(s.visited) AND ((y.mask & ~s.seen) <> 0 OR s.loose = 0)"
        "   ORDER BY (y.mask & ~s.seen) <> 0 DESC, (y.ends & ~(s.seen | y.mask)) <> 0 DESC,"
        "    y.t_created DESC, y.id DESC"
        "   LIMIT CASE WHEN s.hop = 0 THEN %(cap)s ELSE %(fanout)s END"
        "  ) x WHERE s.hop < %(hops)s)"
        " SELECT links, masks, ends, entity_id = ANY(%(named)s::bigint[]) FROM step"
        " WHERE hop >= 2 AND (last_named OR (ends & ~seen) <> 0)"
        "  AND ((seen | ends) & ~%(own)s::int) <> 0"
        " ORDER BY hop - loose + ((ends & ~seen) <> 0)::int DESC, loose, hop, links"
        " LIMIT %(depth)s"
    ).format(
        terms=_TERMS,
        rel=rels(schema, scope),
        ent=ents(schema, scope),
        f=edge_filter(schema, scope),
        mask=_term_mask(sql.SQL("r.predicate")),
        ends=_term_mask(sql.SQL("o.type")),
    )


def traversal(schema: str, scope: Scope) -> sql.Composed:
    """Relation channel 1: a bounded walk of ``%(hops)s`` steps from ``%(seeds)s``.

    Each step takes, per frontier entity, its newest ``%(fanout)s`` admitted edges (the
    seeds themselves up to ``%(cap)s``) that lead to a vertex not already on the path, and
    keeps per seed the newest ``%(cap)s`` of the step. The filters are inside the step, so
    an inadmissible edge is never walked through. Finally each seed contributes at most
    ``%(cap)s`` edges, nearest hop first then newest; an edge reached from several seeds
    keeps its nearest hop. Rows: relation id, hop, the relations walked to reach it (from
    a seed, itself last; of the paths of that hop, the least in array order).
    """
    return sql.SQL(
        "WITH RECURSIVE walk(seed, entity_id, hop, rel_id, t_created, visited, path) AS ("
        " SELECT s, s, 0, NULL::bigint, NULL::timestamptz, ARRAY[s], ARRAY[]::bigint[]"
        "  FROM unnest(%(seeds)s::bigint[]) AS s"
        " UNION ALL"
        " SELECT seed, other, hop, id, t_created, visited || other, path || id FROM ("
        "  SELECT w.seed, x.other, w.hop + 1 AS hop, x.id, x.t_created, w.visited, w.path,"
        "   row_number() OVER (PARTITION BY w.seed ORDER BY x.t_created DESC, x.id DESC) AS rn"
        "  FROM walk w CROSS JOIN LATERAL ("
        "   SELECT r.id, r.t_created,"
        "    CASE WHEN r.subject_id = w.entity_id THEN r.object_id ELSE r.subject_id END AS other"
        "   FROM {rel} r"
        "   WHERE (r.subject_id = w.entity_id OR r.object_id = w.entity_id)"
        "    AND NOT (CASE WHEN r.subject_id = w.entity_id THEN r.object_id"
        "             ELSE r.subject_id END) = ANY(w.visited)"
        "    AND {f}"
        "   ORDER BY r.t_created DESC, r.id DESC"
        "   LIMIT CASE WHEN w.hop = 0 THEN %(cap)s ELSE %(fanout)s END"
        "  ) x WHERE w.hop < %(hops)s"
        " ) step WHERE rn <= %(cap)s"
        ")"
        " SELECT rel_id, hop, path FROM (SELECT DISTINCT ON (rel_id) rel_id, hop, t_created, path"
        "  FROM (SELECT rel_id, hop, t_created, path, row_number() OVER ("
        "   PARTITION BY seed ORDER BY hop, t_created DESC, rel_id DESC) AS rn"
        "   FROM walk WHERE rel_id IS NOT NULL) ranked"
        "  WHERE rn <= %(cap)s ORDER BY rel_id, hop, path) nearest"
        " ORDER BY hop, t_created DESC, rel_id DESC LIMIT %(depth)s"
    ).format(rel=rels(schema, scope), f=edge_filter(schema, scope))


def relation_details(schema: str, scope: Scope) -> sql.Composed:
    """Everything a response carries about relations ``%(ids)s``, as believed (state,
    ends, weight, documents, period, order and stamps at ``as_believed_at`` when one is
    given: :func:`rels`): ``doc_keys`` are the documents of the chunks asserting it,
    ``order_key`` the document order of the latest of them."""
    return sql.SQL(
        "SELECT r.id, r.space, es.name, r.predicate, eo.name, r.negated, r.valid_from,"
        " r.valid_to, r.t_created, r.t_expired, r.status, r.superseded_by, r.weight,"
        " r.doc_keys, r.order_key, r.superseded_via"
        " FROM {rel} r JOIN {ent} es ON es.id = r.subject_id"
        " JOIN {ent} eo ON eo.id = r.object_id WHERE r.id = ANY(%(ids)s::bigint[])"
    ).format(rel=rels(schema, scope), ent=ents(schema, scope))


def documents(schema: str, scope: Scope) -> sql.Composable:
    """The document versions the request reads: held now, or held at the belief instant."""
    if scope.believed_at is None:
        return table(schema, "documents")
    return sql.SQL("(SELECT * FROM {} h WHERE {})").format(
        table(schema, "document_history"), belief("h", True)
    )


def chunk_details(schema: str, scope: Scope) -> sql.Composed:
    """Text and provenance of chunks ``%(chunk_ids)s``, with their document's order (of
    the version held now, or at the belief instant)."""
    return sql.SQL(
        "SELECT c.id, c.space, c.doc_key, c.ordinal, c.text, d.order_key FROM {chunks} c"
        " LEFT JOIN {docs} d ON d.space = c.space AND d.doc_key = c.doc_key"
        " WHERE c.id = ANY(%(chunk_ids)s::bigint[])"
    ).format(chunks=table(schema, "chunks"), docs=documents(schema, scope))


def communities_ranked(schema: str, scope: Scope) -> sql.Composed:
    """Community reports nearest ``%(gvec)s``, over-fetched (``%(over)s``) for re-ranking."""
    return sql.SQL(
        "SELECT id, space, title, summary, findings, level, rating, size, built_at, d FROM ("
        " SELECT c.id, c.space, c.title, c.summary, c.findings, c.level, c.rating, c.size,"
        "  c.built_at,"
        "  c.embedding <=> %(gvec)s AS d FROM {comm} c WHERE {f} AND {b}"
        " ORDER BY c.embedding <=> %(gvec)s LIMIT %(over)s) x ORDER BY d, id"
    ).format(
        comm=table(schema, "communities"),
        f=_space("c", scope),
        b=belief("c", scope.believed_at is not None),
    )


def last_write(schema: str, scope: Scope) -> sql.Composed:
    """When the realm's graph last changed (for the stale-communities warning): the latest
    commit that changed more than the communities themselves (a build, or the notice of a
    rebuild that changed nothing, is no reason to call the reports stale), as known now or
    at the belief instant."""
    until = (
        sql.SQL("AND belief_time <= %(believed)s") if scope.believed_at is not None else sql.SQL("")
    )
    return sql.SQL(
        "SELECT belief_time FROM {} WHERE kind <> ALL(ARRAY['communities_built',"
        " 'communities_stale']) {} ORDER BY belief_time DESC LIMIT 1"
    ).format(table(schema, "outbox"), until)


def relation_distances(schema: str, scope: Scope, bound: int) -> sql.Composed:
    """Node distance (paper §7.4) of relations ``%(ids)s`` from the matched entities
    ``%(seeds)s``: a breadth-first search over admitted edges, ``bound`` hops deep, each
    level excluding the entities of the levels before. A relation's distance is one more
    than its nearer endpoint's (an edge on a seed is 1, as in the walk); relations with no
    endpoint within ``bound - 1`` hops are absent. Rows: relation id, distance."""
    if bound < 1:
        raise ValueError("a node-distance bound must be at least 1")
    rel = rels(schema, scope)
    f = edge_filter(schema, scope)
    levels: list[sql.Composable] = [
        sql.SQL("d0 AS (SELECT DISTINCT s AS id FROM unnest(%(seeds)s::bigint[]) AS s)")
    ]
    for k in range(1, bound):
        seen = sql.SQL(" UNION ").join(
            sql.SQL("SELECT id FROM {}").format(sql.Identifier(f"d{j}")) for j in range(k)
        )
        levels.append(
            sql.SQL(
                "{lvl} AS (SELECT r.object_id AS id FROM {prev} p JOIN {rel} r"
                " ON r.subject_id = p.id WHERE {f}"
                " UNION SELECT r.subject_id FROM {prev} p JOIN {rel} r"
                " ON r.object_id = p.id WHERE {f} EXCEPT ({seen}))"
            ).format(
                lvl=sql.Identifier(f"d{k}"),
                prev=sql.Identifier(f"d{k - 1}"),
                rel=rel,
                f=f,
                seen=seen,
            )
        )
    reached = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT id, {} AS d FROM {}").format(sql.Literal(k), sql.Identifier(f"d{k}"))
        for k in range(bound)
    )
    return sql.SQL(
        "WITH {levels}, reached AS ({reached})"
        " SELECT r.id, min(x.d) + 1 AS distance FROM {rel} r"
        " JOIN reached x ON x.id = r.subject_id OR x.id = r.object_id"
        " WHERE r.id = ANY(%(ids)s::bigint[]) GROUP BY r.id"
    ).format(levels=sql.SQL(", ").join(levels), reached=reached, rel=rel)


def relation_similarities(schema: str) -> sql.Composed:
    """Pairwise cosine similarity of the embeddings of relations ``%(ids)s`` (each pair
    once, positive ones only: MMR counts a missing pair as unrelated)."""
    rel = table(schema, "relations")
    return sql.SQL(
        "WITH v AS MATERIALIZED (SELECT id, embedding FROM {rel}"
        "  WHERE id = ANY(%(ids)s::bigint[]))"
        " SELECT id_a, id_b, s FROM (SELECT a.id AS id_a, b.id AS id_b,"
        "  1 - (a.embedding <=> b.embedding) AS s FROM v a JOIN v b ON a.id < b.id) x"
        " WHERE s > 0"
    ).format(rel=rel)
