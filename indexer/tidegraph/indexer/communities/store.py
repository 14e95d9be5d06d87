"""Community builds against a realm: snapshot, reports, one write transaction (paper §6).

A build, in order:

1. take the realm's build lock (a session advisory lock, so two builders never interleave;
   the automatic builder skips a realm someone else is building);
2. snapshot the current entity graph of the spaces in one ``REPEATABLE READ`` transaction:
   live entities only (dormant ones are excluded, §5.5, archived ones too, §6.1) and
   ``status = 'current'`` relations, with the realm's commit sequence at that instant;
3. detect communities (:mod:`tidegraph.indexer.communities.detect`) in a worker thread, so a
   service running the automatic builder keeps answering;
4. make the reports level by level, largest first: from the model when one is given
   (denials rendered as denials, never to be reported as holding), else extractive; one
   unusable report is logged and skipped, an unavailable endpoint aborts the build (the
   previous communities stay, nothing is half-replaced);
5. disambiguate titles and embed the reports with the realm's pinned embedder;
6. write, in ONE transaction that takes the realm lock the way the writer does (``UPDATE
   meta … RETURNING seq``): draw the next commit sequence, close the belief interval of
   the spaces' previous communities (they are kept: a read ``as_believed_at`` an earlier
   instant answers from the build current then), insert the new ones with their member
   edges, believed from the commit's instant, set ``communities_built_at``
   and clear ``communities_stale``, and append one ``communities_built`` change per space
   to the outbox under the drawn sequence.

Belief time of the build is ``greatest(last_write_at, now())`` and ``last_write_at`` moves
up to it, so belief instants stay non-decreasing in commit order (a reader paging the feed
by ``since`` can never skip a later commit). If the graph moved between the snapshot and
the write (the sequence advanced), the build is stored but marked stale at once: the same
commit appends ``communities_stale`` and the reports' ``built_at`` is the snapshot instant,
so retrieval warns that they predate the latest write.

Steps 3–5 hold no database transaction; only step 6 holds the realm lock, briefly.
"""

# Long on purpose: one build in the numbered order above, from snapshot to its single write
# transaction.
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, LiteralString

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from tidegraph.indexer.communities.detect import (
    ClusterParams,
    Entity,
    Hierarchy,
    Relation,
    detect,
)
from tidegraph.indexer.communities.reports import (
    ClusterView,
    Report,
    Reporter,
    cluster_views,
    disambiguate_titles,
    make_reports,
    offline_reporter,
)
from tidegraph.indexer.extraction import Embedder
from tidegraph.indexer.write import ensure_vector_types, vec_param
from tidegraph.schemas import DEFAULT_SPACE, ConfigError, validate_space
from tidegraph.store import RealmInfo, RealmSwapped, alive, check_embedder

__all__ = [
    "BuildResult",
    "Snapshot",
    "SpaceBuild",
    "build_communities",
    "read_snapshot",
]

log = logging.getLogger(__name__)

_EMBED_BATCH = 256


@dataclass(frozen=True)
class Snapshot:
    """The current entity graph of some spaces, as of one commit sequence."""

    seq: int
    """The realm's commit sequence the snapshot saw."""
    taken_at: datetime
    """Database time of the snapshot."""
    spaces: Mapping[str, tuple[tuple[Entity, ...], tuple[Relation, ...]]]
    """Space → (live entities, current relations)."""


@dataclass(frozen=True)
class SpaceBuild:
    """What a build did for one space."""

    space: str
    entities: int
    """Live entities in the snapshot."""
    relations: int
    """Current relations in the snapshot."""
    method: str
    """``leiden`` or ``label_propagation``."""
    clusters: tuple[int, ...]
    """Communities detected per level."""
    written: int
    """Communities stored (detected minus failed reports)."""
    failed: int
    """Reports skipped because they failed."""
    largest_share: float
    """Share of the space's entities in its largest level-0 community (paper §8.15)."""


@dataclass(frozen=True)
class BuildResult:
    """What a build committed."""

    realm: str
    seq: int
    """Commit sequence of the build's transaction."""
    built_at: datetime
    """Recorded on every report, and as ``meta.communities_built_at``."""
    spaces: tuple[SpaceBuild, ...]
    graph_moved: bool
    """The graph changed during the build: it was stored already marked stale."""
    timings: tuple[tuple[str, float], ...]
    """Seconds per step: snapshot, detect, reports, embed, write."""


def _t(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


def _q(template: LiteralString, schema: str, **tables: str) -> sql.Composed:
    return sql.SQL(template).format(**{k: _t(schema, v) for k, v in tables.items()})


# --------------------------------------------------------------------------- snapshot


async def read_snapshot(
    conn: AsyncConnection[Any], info: RealmInfo, spaces: Sequence[str] | None = None
) -> Snapshot:
    """Live entities and current relations of ``spaces`` (default: every space that has
    live entities or communities), consistent with one commit sequence."""
    s = info.schema
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cur = await conn.execute(_q("SELECT seq, now() FROM {meta}", s, meta="meta"))
        row = await cur.fetchone()
        assert row is not None
        seq, taken_at = int(row[0]), row[1]
        if spaces is None:
            cur = await conn.execute(
                sql.SQL(
                    "SELECT space FROM {e} WHERE {alive}"
                    " UNION SELECT space FROM {c} WHERE t_expired IS NULL ORDER BY 1"
                ).format(e=_t(s, "entities"), c=_t(s, "communities"), alive=alive())
            )
            spaces = [str(r[0]) for r in await cur.fetchall()] or [DEFAULT_SPACE]
        wanted = sorted({validate_space(sp) for sp in spaces})
        cur = await conn.execute(
            sql.SQL(
                "SELECT id, space, name, type, description FROM {e}"
                " WHERE space = ANY(%s) AND {alive} ORDER BY id"
            ).format(e=_t(s, "entities"), alive=alive()),
            (wanted,),
        )
        entities: dict[str, list[Entity]] = {sp: [] for sp in wanted}
        for eid, sp, name, typ, desc in await cur.fetchall():
            entities[sp].append(Entity(int(eid), name, typ, desc or ""))
        cur = await conn.execute(
            sql.SQL(
                "SELECT r.id, r.space, r.subject_id, r.predicate, r.object_id, r.weight,"
                " r.negated, r.description FROM {r} r"
                " JOIN {e} es ON es.id = r.subject_id AND {subject_alive}"
                " JOIN {e} eo ON eo.id = r.object_id AND {object_alive}"
                " WHERE r.space = ANY(%s) AND r.status = 'current' ORDER BY r.id"
            ).format(
                r=_t(s, "relations"),
                e=_t(s, "entities"),
                subject_alive=alive("es"),
                object_alive=alive("eo"),
            ),
            (wanted,),
        )
        relations: dict[str, list[Relation]] = {sp: [] for sp in wanted}
        for rid, sp, subj, pred, obj, weight, negated, desc in await cur.fetchall():
            relations[sp].append(
                Relation(
                    int(rid), int(subj), pred, int(obj), float(weight), bool(negated), desc or ""
                )
            )
    return Snapshot(
        seq, taken_at, {sp: (tuple(entities[sp]), tuple(relations[sp])) for sp in wanted}
    )


# --------------------------------------------------------------------------- the build


@dataclass(frozen=True)
class _Planned:
    space: str
    hierarchy: Hierarchy
    views: tuple[ClusterView, ...]
    reports: Mapping[tuple[int, int], Report]
    relations: int


async def build_communities(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    embedder: Embedder,
    *,
    params: ClusterParams | None = None,
    spaces: Sequence[str] | None = None,
    reporter: Reporter | None = None,
    report_concurrency: int = 4,
    progress: Callable[[str], None] | None = None,
    wait: bool = True,
) -> BuildResult | None:
    """Build and store the communities of ``spaces`` (default: all) of one realm.

    ``conn`` must be in autocommit mode (the build runs its own transactions). Returns
    ``None`` only when ``wait`` is false and another build of the realm is running.
    """
    if not conn.autocommit:
        raise ConfigError("build_communities needs an autocommit connection")
    check_embedder(info, embedder.id)
    params = params or ClusterParams()
    reporter = reporter or offline_reporter()
    say = progress or (lambda _msg: None)
    lock_key = "tidegraph:communities:" + info.schema
    if wait:
        await conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock_key,))
    else:
        cur = await conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (lock_key,))
        got = await cur.fetchone()
        if not (got and got[0]):
            return None
    try:
        return await _build(conn, info, embedder, params, spaces, reporter, report_concurrency, say)
    finally:
        await _unlock(conn, lock_key)


async def _unlock(conn: AsyncConnection[Any], lock_key: str) -> None:
    """Release the build lock; if that fails, close the connection, which releases it too
    (a pooled connection must never go back holding it)."""
    try:
        if not conn.broken:
            await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock_key,))
            return
    except psycopg.Error as exc:
        log.warning("releasing the community build lock failed (%s); closing the connection", exc)
    await conn.close()


async def _build(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    embedder: Embedder,
    params: ClusterParams,
    spaces: Sequence[str] | None,
    reporter: Reporter,
    concurrency: int,
    say: Callable[[str], None],
) -> BuildResult:
    timings: list[tuple[str, float]] = []
    clock = time.perf_counter()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings.append((step, round(now - clock, 3)))
        clock = now

    snap = await read_snapshot(conn, info, spaces)
    lap("snapshot")
    say(
        f"snapshot at seq {snap.seq}: "
        + ", ".join(
            f"{sp} {len(e)} entities/{len(r)} relations" for sp, (e, r) in snap.spaces.items()
        )
    )
    planned: list[_Planned] = []
    detected: dict[str, tuple[Hierarchy, list[ClusterView]]] = {}
    for space, (entities, relations) in snap.spaces.items():
        hierarchy, views = await asyncio.to_thread(_detect, entities, relations, params)
        detected[space] = (hierarchy, views)
        say(
            f"{space}: {hierarchy.method}, communities per level "
            f"{[len(lv) for lv in hierarchy.levels]}, largest share {hierarchy.largest_share:.1%}"
        )
    lap("detect")
    for space, (hierarchy, views) in detected.items():
        reports = await _reports(space, views, reporter, concurrency, say)
        planned.append(
            _Planned(space, hierarchy, tuple(views), reports, len(snap.spaces[space][1]))
        )
    lap("reports")
    rows = _rows(planned)
    vectors = await _embed(info, embedder, [r[3].text() for r in rows])
    lap("embed")
    seq, built_at, moved = await _write(conn, info, snap, planned, rows, vectors)
    lap("write")
    say(f"committed seq {seq}" + (" (graph moved during the build: stale)" if moved else ""))
    return BuildResult(
        info.realm,
        seq,
        built_at,
        tuple(
            SpaceBuild(
                p.space,
                p.hierarchy.entity_count,
                p.relations,
                p.hierarchy.method,
                tuple(len(lv) for lv in p.hierarchy.levels),
                len(p.reports),
                len(p.views) - len(p.reports),
                round(p.hierarchy.largest_share, 4),
            )
            for p in planned
        ),
        moved,
        tuple(timings),
    )


async def _reports(
    space: str,
    views: Sequence[ClusterView],
    reporter: Reporter,
    concurrency: int,
    say: Callable[[str], None],
) -> Mapping[tuple[int, int], Report]:
    """One space's reports, saying how far it got every two seconds."""
    shown = time.monotonic()

    def tick(finished: int, total: int) -> None:
        nonlocal shown
        if time.monotonic() - shown >= 2.0 and finished < total:
            shown = time.monotonic()
            say(f"{space}: {finished}/{total} reports")

    reports = await make_reports(views, reporter, concurrency=concurrency, progress=tick)
    say(f"{space}: {len(reports)}/{len(views)} reports")
    return reports


async def _embed(info: RealmInfo, embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """The reports' vectors, refused when their width is not the realm's."""
    vectors: list[list[float]] = []
    for start in range(0, len(texts), _EMBED_BATCH):
        vectors.extend(await embedder.embed(texts[start : start + _EMBED_BATCH]))
    if any(len(v) != info.dimension for v in vectors):
        raise ConfigError(
            f"embedder {embedder.id} returned vectors of another width than the realm's "
            f"{info.dimension}"
        )
    return vectors


def _detect(
    entities: Sequence[Entity], relations: Sequence[Relation], params: ClusterParams
) -> tuple[Hierarchy, list[ClusterView]]:
    hierarchy = detect((e.id for e in entities), relations, params)
    return hierarchy, cluster_views(hierarchy, entities, relations, params.denial_factor)


_Row = tuple[str, ClusterView, tuple[int, int] | None, Report]
"""(space, view, parent key, report with its final title)."""


def _rows(planned: Sequence[_Planned]) -> list[_Row]:
    """Stored rows in report order with unique titles; a parent whose report failed leaves
    its children as roots."""
    flat = [(p, v) for p in planned for v in p.views if v.cluster.key in p.reports]
    titles = disambiguate_titles(
        [(p.reports[v.cluster.key].title, [e.name for e in v.entities]) for p, v in flat]
    )
    out: list[_Row] = []
    for (p, v), title in zip(flat, titles, strict=True):
        c = v.cluster
        parent = (c.level + 1, c.parent) if c.parent is not None else None
        rep = p.reports[c.key]
        out.append(
            (
                p.space,
                v,
                parent if parent in p.reports else None,
                Report(title, rep.summary, rep.findings, rep.rating),
            )
        )
    return out


async def _write(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    snap: Snapshot,
    planned: Sequence[_Planned],
    rows: Sequence[_Row],
    vectors: Sequence[list[float]],
) -> tuple[int, datetime, bool]:
    """The build's one transaction (module docstring, step 6)."""
    s = info.schema
    await ensure_vector_types(conn)
    async with conn.transaction():
        seq, bt, moved = await _stamp(conn, info, snap)
        built_at = snap.taken_at if moved else bt
        await conn.execute(
            _q(
                "UPDATE {meta} SET communities_built_at = %s, communities_stale = %s",
                s,
                meta="meta",
            ),
            (built_at, moved),
        )
        await conn.execute(
            _q(
                "UPDATE {c} SET t_expired = %s WHERE space = ANY(%s) AND t_expired IS NULL",
                s,
                c="communities",
            ),
            (bt, [p.space for p in planned]),
        )
        await _insert(conn, s, rows, vectors, built_at, bt)
        await _announce(conn, s, planned, rows, seq, bt, moved)
    return seq, built_at, moved


async def _stamp(
    conn: AsyncConnection[Any], info: RealmInfo, snap: Snapshot
) -> tuple[int, datetime, bool]:
    """The build's commit sequence and belief instant, under the realm lock the writer
    takes; and whether the graph moved since the snapshot."""
    cur = await conn.execute(
        _q(
            "UPDATE {meta} m SET seq = m.seq + 1,"
            " last_write_at = greatest(coalesce(m.last_write_at, now()), now())"
            " FROM (SELECT seq FROM {meta} FOR UPDATE) old"
            " RETURNING m.seq, m.last_write_at, old.seq <> %s, m.swapped_out",
            info.schema,
            meta="meta",
        ),
        (snap.seq,),
    )
    row = await cur.fetchone()
    assert row is not None
    if row[3]:
        raise RealmSwapped(info.realm)
    return int(row[0]), row[1], bool(row[2])


async def _insert(
    conn: AsyncConnection[Any],
    s: str,
    rows: Sequence[_Row],
    vectors: Sequence[list[float]],
    built_at: datetime,
    bt: datetime,
) -> None:
    """The new communities, believed from ``bt``, and their members."""
    ids: list[int] = []
    if rows:
        cur = await conn.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            (_t(s, "communities").as_string(conn), len(rows)),
        )
        ids = [int(r[0]) for r in await cur.fetchall()]
    id_of = {(sp, v.cluster.key): i for (sp, v, _, _), i in zip(rows, ids, strict=True)}
    await conn.execute(
        _q(
            "INSERT INTO {c} (id, space, level, parent_id, title, summary, findings,"
            " rating, size, built_at, t_created, embedding)"
            " SELECT i, sp, lv, pa, ti, su, fi, ra, sz, %s, %s, e"
            " FROM unnest(%s::bigint[], %s::text[], %s::int[], %s::bigint[], %s::text[],"
            " %s::text[], %s::jsonb[], %s::real[], %s::int[], %b::vector[])"
            " AS u(i, sp, lv, pa, ti, su, fi, ra, sz, e)",
            s,
            c="communities",
        ),
        (
            built_at,
            bt,
            ids,
            [sp for sp, _, _, _ in rows],
            [v.cluster.level for _, v, _, _ in rows],
            [id_of[(sp, pk)] if pk is not None else None for sp, _, pk, _ in rows],
            [r.title for _, _, _, r in rows],
            [r.summary for _, _, _, r in rows],
            [Jsonb([f.to_json() for f in r.findings]) for _, _, _, r in rows],
            [r.rating for _, _, _, r in rows],
            [len(v.cluster.members) for _, v, _, _ in rows],
            [vec_param(x) for x in vectors],
        ),
    )
    members = [(i, m) for (_, v, _, _), i in zip(rows, ids, strict=True) for m in v.cluster.members]
    if members:
        await conn.execute(
            _q(
                "INSERT INTO {m} (community_id, entity_id)"
                " SELECT * FROM unnest(%s::bigint[], %s::bigint[])",
                s,
                m="community_members",
            ),
            ([a for a, _ in members], [b for _, b in members]),
        )


async def _announce(
    conn: AsyncConnection[Any],
    s: str,
    planned: Sequence[_Planned],
    rows: Sequence[_Row],
    seq: int,
    bt: datetime,
    moved: bool,
) -> None:
    """One ``communities_built`` per space (and ``communities_stale`` when the graph moved
    during the build) under the build's sequence."""
    kinds, spaces, payloads = [], [], []
    for p in planned:
        kinds.append("communities_built")
        spaces.append(p.space)
        payloads.append(
            Jsonb(
                {
                    "communities": sum(1 for sp, *_ in rows if sp == p.space),
                    "levels": len(p.hierarchy.levels),
                }
            )
        )
        if moved:
            kinds.append("communities_stale")
            spaces.append(p.space)
            payloads.append(Jsonb({}))
    await conn.execute(
        _q(
            "INSERT INTO {o} (seq, idx, kind, space, belief_time, payload)"
            " SELECT %s, i - 1, k, sp, %s, p FROM unnest(%s::text[], %s::text[],"
            " %s::jsonb[]) WITH ORDINALITY AS u(k, sp, p, i)",
            s,
            o="outbox",
        ),
        (seq, bt, kinds, spaces, payloads),
    )
