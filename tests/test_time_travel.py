"""A read ``as_believed_at`` T answers exactly what the same read answered at T (DESIGN
invariant 6), on real PostgreSQL, through the production write path.

Random sequences of records with ``facts`` — upserts, replacements of a document, deletions,
re-sends, merges (an alias that proves two entities one), supersessions (exclusive groups,
a functional predicate, document order), denials — and community builds are applied record
by record with the live indexer's units. After every commit each read of the list below is
saved with the commit's belief instant; at the end, the same read asked ``as_believed_at``
that instant must return the same thing, field for field:

* ``/relations`` (current, and with superseded ones; and by subject name);
* ``/entities`` (live, and dormant too; and a lookup by name);
* ``/documents/{key}`` for every document key;
* ``query_data`` in ``local`` mode (with superseded relations) and ``global`` mode, asked
  so that it reaches everything in its space: every relation, entity, chunk and community
  report with every field, and the warnings. Only scores and which channels found a
  relation are left out: they rank by today's vectors and today's rendered text.

Each example writes to a space of its own in one realm. Only the last commit of an instant
is compared (a community build shares its instant with the write before it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgvector.psycopg import register_vector_async
from psycopg import sql

from tidegraph.indexer.communities.store import build_communities
from tidegraph.indexer.decide.planner import Logged, Planner
from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.indexer.write.units import RecordUnit, Settlement
from tidegraph.infra.composition import ModelRegistry
from tidegraph.query_service import reads, retrieval
from tidegraph.query_service.channels import Scope
from tidegraph.query_service.retrieval import RetrievalLimits, RetrievalParams
from tidegraph.schemas.api import QueryDataResponse
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import positions, realm_positions
from tidegraph.store.positions import Claim
from tidegraph.store.realms import RealmInfo, create_realm, ensure_control

pytestmark = [pytest.mark.postgres]

T0 = datetime(2031, 1, 1, tzinfo=UTC)
"""Log times start after the wall clock, so a community build (stamped at the later of the
realm's last belief instant and the database's clock) takes the instant of the write
before it instead of jumping ahead of every later one."""
CONFIG = RealmConfig(
    embedder="hashing:16",
    exclusive_groups=(frozenset({"ally_of", "enemy_of"}),),
    functional_predicates={"works_for": "subject"},
)
KEYS = ("a", "b", "c", "d")
PEOPLE = ("Orla Quist", "Quist", "Ben Arlo", "Cy Dane")
ORGS = ("Brindle Works", "Kestrel Ltd")
YEARS = (None, "2019", "2020", "2021")
LIMITS = RetrievalLimits(entity_floor=-1.0, channel_depth=1000, edge_cap=1000)
"""Every entity of the space is a seed and every admitted relation a candidate: what a
read returns then depends on the graph believed, never on how today's vectors rank."""

relation = st.fixed_dictionaries(
    {
        "subject": st.sampled_from(PEOPLE),
        "predicate": st.sampled_from(["works_for", "ally_of", "enemy_of", "knows"]),
        "object": st.sampled_from(PEOPLE + ORGS),
        "negated": st.sampled_from([False, False, False, True]),
        "valid_from": st.sampled_from(YEARS),
    }
).filter(lambda r: r["subject"] != r["object"])
entity = st.fixed_dictionaries(
    {
        "name": st.sampled_from(PEOPLE + ORGS),
        "type": st.sampled_from(["Person", "Organization", "Concept"]),
        "description": st.sampled_from(["", "a clerk", "an engineer", "a firm"]),
        "aliases": st.sampled_from([[], [], ["Quist"]]),
    }
)
facts = st.fixed_dictionaries(
    {"entities": st.lists(entity, max_size=2), "relations": st.lists(relation, max_size=3)}
).filter(lambda f: bool(f["entities"] or f["relations"]))
op = st.one_of(
    st.tuples(st.just("upsert"), st.sampled_from(KEYS), facts, st.sampled_from("12345")),
    st.tuples(st.just("delete"), st.sampled_from(KEYS), st.none(), st.none()),
    st.tuples(st.just("resend"), st.sampled_from(KEYS), st.none(), st.none()),
    st.tuples(st.just("build"), st.none(), st.none(), st.none()),
)
scripts = st.lists(op, min_size=1, max_size=7)


class Realm:
    """The realm every example writes a space of, its claim and clocks."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], info: RealmInfo, claim: Claim) -> None:
        self.conn = conn
        self.info = info
        self.claim = claim
        self.offset = 0
        self.example = 0
        registry = ModelRegistry()
        self.embedder_for = registry.embedder_for
        self.pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
        self.embedder = HashingEmbedder(16)


@pytest.fixture(scope="module")
def realm(pg_dsn: str) -> Iterator[tuple[asyncio.AbstractEventLoop, Realm]]:
    loop = asyncio.new_event_loop()

    async def setup() -> Realm:
        conn = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
        # As the query service's connections are set up (query_service.db.make_pool): a
        # filtered vector search goes on until it has what it was asked for.
        await register_vector_async(conn)
        await conn.execute("SET hnsw.iterative_scan = relaxed_order")
        await conn.execute("SET plan_cache_mode = force_custom_plan")
        await ensure_control(conn)
        name = "tt_" + datetime.now(UTC).strftime("%H%M%S%f")
        info = await create_realm(conn, name, CONFIG)
        claim, _ = await positions.claim(conn, f"tt:{name}", "t", 0, 0)
        await realm_positions.ensure(conn, info.schema, name, "t", 0)
        return Realm(conn, info, claim)

    r = loop.run_until_complete(setup())
    yield loop, r
    loop.run_until_complete(r.conn.close())
    loop.close()


def _record(r: Realm, space: str, step: tuple[Any, ...], held: dict[str, Any]) -> Any:
    kind, key, stated, order = step
    if kind == "delete":
        return DocumentVersion(
            realm=r.info.realm, space=space, doc_key=key, op="delete",
            event_time=datetime.now(UTC),
        )  # fmt: skip
    if kind == "resend":
        return held.get(key)
    record = DocumentVersion.for_facts(r.info.realm, key, stated, order_key=order, space=space)
    held[key] = record
    return record


async def _write(r: Realm, record: DocumentVersion, at: datetime) -> bool:
    """Apply one record as the live indexer does; True when it committed a write."""
    logged = Logged(r.offset, at, record)
    [decision] = await Planner(r.info.schema).decide(r.conn, [logged])
    settlement = Settlement.of_realm(r.claim, r.info, r.offset, r.offset + 1)
    r.offset += 1
    unit = RecordUnit()
    if not decision.writes:
        await unit.settle(r.conn, settlement, [(r.info, decision)])
        return False
    doc = await r.pipeline.prepare(record, r.info) if record.op == "upsert" else None
    await unit.apply(r.conn, r.info, r.embedder_for(r.info), settlement, decision, doc)
    return True


async def _head(r: Realm) -> datetime:
    cur = await r.conn.execute(
        sql.SQL("SELECT last_write_at FROM {}").format(sql.Identifier(r.info.schema, "meta"))
    )
    row = await cur.fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def _query(result: QueryDataResponse) -> dict[str, Any]:
    """A ``query_data`` answer without what ranks by today's vectors and text."""

    def strip(items: list[Any], *drop: str) -> list[dict[str, Any]]:
        out = [i.model_dump(exclude=set(drop)) for i in items]
        return sorted(out, key=lambda d: int(d["id"]))

    return {
        "entities": strip(result.entities, "score"),
        "relations": strip(result.relations, "score", "channels"),
        "chunks": strip(result.chunks, "score", "channels"),
        "communities": strip(result.communities, "score"),
        "warnings": result.stats.get("warnings", []),
    }


async def _reads(r: Realm, space: str, at: datetime | None) -> dict[str, Any]:
    """Every read of the module docstring, as asked now (``at`` None) or at ``at``."""
    conn, info = r.conn, r.info
    out: dict[str, Any] = {}
    for superseded in (False, True):
        scope = Scope(space, None, at, superseded, None)
        out[f"relations:{superseded}"] = await reads.list_relations(
            conn, info, scope, subject=None, predicate=None, object_=None, after_id=0, limit=1000
        )
    out["relations:subject"] = await reads.list_relations(
        conn,
        info,
        Scope(space, None, at, True, None),
        subject="Orla Quist",
        predicate=None,
        object_=None,
        after_id=0,
        limit=1000,
    )
    for dormant in (False, True):
        out[f"entities:{dormant}"] = await reads.list_entities(
            conn, info, name=None, space=space, include_dormant=dormant, after_id=0,
            limit=1000, believed_at=at,
        )  # fmt: skip
    out["entities:name"] = await reads.list_entities(
        conn, info, name="Quist", space=space, include_dormant=True, after_id=0, limit=1000,
        believed_at=at,
    )  # fmt: skip
    for key in KEYS:
        out[f"document:{key}"] = await reads.document_state(conn, info, space, key, at)
    for mode, superseded in (("local", True), ("global", False)):
        params = RetrievalParams(
            query="Who does Orla Quist work for, and who are her allies?",
            mode=mode,
            space=space,
            top_k=100,
            relation_top_k=1000,
            hops=2,
            as_believed_at=at,
            include_superseded=superseded,
        )
        result = await retrieval.retrieve(conn, info, r.embedder, params, LIMITS)
        out[f"query_data:{mode}"] = _query(result)
    return out


async def _run(r: Realm, script: list[tuple[Any, ...]]) -> None:
    r.example += 1
    space = f"x{r.example}"
    held: dict[str, Any] = {}
    saved: dict[datetime, dict[str, Any]] = {}
    for step in script:
        if step[0] == "build":
            done = await build_communities(r.conn, r.info, r.embedder, spaces=[space])
            assert done is not None
        else:
            record = _record(r, space, step, held)
            if record is None:
                continue
            at = T0 + timedelta(seconds=r.offset)
            if not await _write(r, record, at):
                continue
        # The last commit of an instant is what a read at that instant answers.
        saved[await _head(r)] = await _reads(r, space, None)
    for at, then in saved.items():
        now = await _reads(r, space, at)
        assert now == then, f"{_difference(now, then, at)}\nscript: {script!r}"


def _difference(now: Any, then: Any, at: datetime, path: str = "") -> str:
    """Where a read at ``at`` differs from what it answered then (the first place)."""
    if isinstance(now, dict) and isinstance(then, dict):
        for key in sorted(set(now) | set(then)):
            if now.get(key) != then.get(key):
                return _difference(now.get(key), then.get(key), at, f"{path}/{key}")
    if isinstance(now, list) and isinstance(then, list) and len(now) == len(then):
        for i, (a, b) in enumerate(zip(now, then, strict=True)):
            if a != b:
                return _difference(a, b, at, f"{path}[{i}]")
    return f"at {at.isoformat()} {path}: now {now!r}, then {then!r}"


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(script=scripts)
def test_a_read_as_believed_at_an_instant_answers_what_it_answered_then(
    realm: tuple[asyncio.AbstractEventLoop, Realm], script: list[tuple[Any, ...]]
) -> None:
    loop, r = realm
    loop.run_until_complete(_run(r, script))
