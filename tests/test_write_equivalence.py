"""The graph is a function of the log, not of how it was cut (DESIGN invariants 2, 5, 6).

Random sequences of upserts, re-sends, deletes, stale and unversioned records for a few
doc_keys (symmetric facts stated both ways round among them) are applied three ways on
real PostgreSQL, each through the production drivers:

(a) record by record, the stored states read back before every record (a fresh planner,
    as after a restart or at a poll boundary), one transaction each (``RecordUnit``);
(b) in one batch: one planner, one transaction (``BatchUnit``);
(c) through a replay's applier into its own schema, cut into random fetches.

The three realms must hold the same current graph, the same document states, the same
entity attribute history and the same beliefs at chosen instants (relations, and entities
as the ``entities`` endpoint reads them at ``as_believed_at``). Every example writes to a
space of its own in the same three schemas, so creating schemas does not dominate the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from aiokafka import ConsumerRecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tidegraph.indexer.decide.fold import Action
from tidegraph.indexer.decide.planner import Logged, Planner
from tidegraph.indexer.extraction.pipeline import Pipeline
from tidegraph.indexer.extraction.prepared import PreparedDocument
from tidegraph.indexer.replay.applier import ShadowApplier
from tidegraph.indexer.write.units import BatchUnit, RecordUnit, Settlement
from tidegraph.infra.composition import ModelRegistry
from tidegraph.query_service.reads import list_entities
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import positions, realm_positions
from tidegraph.store.positions import Claim
from tidegraph.store.realms import RealmInfo, create_realm, ensure_control

from indexer_helpers import delete, upsert

T0 = datetime(2026, 3, 1, tzinfo=UTC)
CONFIG = RealmConfig(
    embedder="hashing:8",
    exclusive_groups=(frozenset({"ally_of", "enemy_of"}),),
    symmetric_predicates=frozenset({"ally_of", "enemy_of", "worked_with"}),
    functional_predicates={"lives_in": "subject"},
)
TEXTS = (
    "Arthur Pendragon became an ally of Mordred Orkney.",
    "Arthur Pendragon became an enemy of Mordred Orkney.",
    "Merlin Ambrosius was a wizard at the court of Camelot. Arthur Pendragon worked with"
    " Merlin Ambrosius. Merlin Ambrosius mentored Arthur Pendragon.",
    "Merlin Ambrosius was a poet. Arthur Pendragon was a king of the Britons.",
    "Morgan Fay became an enemy of Arthur Pendragon. Morgan Fay worked with Mordred Orkney.",
    "Lancelot Lac became an ally of Arthur Pendragon.",
    # the symmetric facts above stated the other way round, a denial among them
    "Mordred Orkney became an ally of Arthur Pendragon.",
    "Mordred Orkney became an enemy of Arthur Pendragon. Arthur Pendragon worked with Morgan Fay.",
    "Merlin Ambrosius never worked with Arthur Pendragon. Mordred Orkney worked with Morgan Fay.",
    "Arthur Pendragon lives in Camelot.",
    "Arthur Pendragon lives in Avalon. Morgan Fay never lived in Camelot.",
    "nothing here names anyone.",
)
FACTS = (
    {"relations": [{"subject": "Arthur Pendragon", "predicate": "ally_of",
                    "object": "Mordred Orkney", "valid_from": "1190"}]},
    {"relations": [{"subject": "Arthur Pendragon", "predicate": "enemy_of",
                    "object": "Mordred Orkney"}]},
)  # fmt: skip
"""Records with facts, after the texts: the same prose with other facts (text index
``len(TEXTS) + i``)."""
KEYS = ("a", "b", "c")

Op = tuple[str, str, int, str | None, str | None]
"""(op, doc_key, text index, source_version, order_key)."""

ops = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "upsert", "upsert", "delete"]),
        st.sampled_from(KEYS),
        st.integers(0, len(TEXTS) + len(FACTS) - 1),
        st.one_of(st.none(), st.integers(1, 6).map(str)),
        st.one_of(st.none(), st.sampled_from(["2020", "2021", "2022"])),
    ),
    min_size=1,
    max_size=10,
)


class Realms:
    """The three realms, one connection, and the example counter."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], infos: list[RealmInfo]) -> None:
        self.conn = conn
        self.infos = infos
        self.claims: list[Claim] = []
        self.offsets = [0, 0, 0]
        self.example = 0
        registry = ModelRegistry()
        self.pipeline = Pipeline(registry.extractor_for, registry.embedder_for)
        self.embedder_for = registry.embedder_for
        self.prepared: dict[tuple[str, str, str], PreparedDocument] = {}


def _logged(realm: str, space: str, script: list[Op], start: int, t: datetime) -> list[Logged]:
    out = []
    for n, (op, key, text, version, order) in enumerate(script):
        if op == "delete":
            record = delete(realm, key, source_version=version, space=space)
        elif text < len(TEXTS):
            record = upsert(
                realm, key, TEXTS[text], source_version=version, order_key=order, space=space
            )
        else:
            record = DocumentVersion.for_facts(
                realm, key, FACTS[text - len(TEXTS)], content="Round table notes.",
                source_version=version, order_key=order, space=space,
            )  # fmt: skip
        out.append(Logged(start + n, t + timedelta(seconds=n), record))
    return out


async def _prepare(realms: Realms, rec: DocumentVersion, info: RealmInfo) -> PreparedDocument:
    """The offline pipeline's document, prepared once per version and schema."""
    key = (info.schema, rec.space, rec.version_hash or "")
    if key not in realms.prepared:
        realms.prepared[key] = await realms.pipeline.prepare(rec, info)
    doc = realms.prepared[key]
    return dataclasses.replace(
        doc, doc_key=rec.doc_key, order_key=rec.order_key, source_version=rec.source_version
    )


async def _record_by_record(realms: Realms, script: list[Op], space: str, t: datetime) -> None:
    info, claim = realms.infos[0], realms.claims[0]
    unit = RecordUnit()
    for lg in _logged(info.realm, space, script, realms.offsets[0], t):
        [decision] = await Planner(info.schema).decide(realms.conn, [lg])
        now = Settlement.of_realm(claim, info, lg.offset, lg.offset + 1)
        if decision.writes:
            rec = decision.record
            doc = await _prepare(realms, rec, info) if rec.op == "upsert" else None
            await unit.apply(realms.conn, info, realms.embedder_for(info), now, decision, doc)
        else:
            await unit.settle(realms.conn, now, [(info, decision)])
    realms.offsets[0] += len(script)


async def _one_batch(realms: Realms, script: list[Op], space: str, t: datetime) -> None:
    info, claim = realms.infos[1], realms.claims[1]
    logged = _logged(info.realm, space, script, realms.offsets[1], t)
    decisions = await Planner(info.schema).decide(realms.conn, logged)
    outcomes = {
        d.offset: await _prepare(realms, d.record, info)
        for d in decisions
        if d.action is Action.APPLY
    }
    unit = BatchUnit(info, realms.embedder_for(info))
    end = realms.offsets[1] + len(script)
    settlement = Settlement.of_realm(claim, info, realms.offsets[1], end)
    await unit.write(realms.conn, settlement, decisions, outcomes)
    realms.offsets[1] = end


async def _replayed(
    realms: Realms, script: list[Op], space: str, t: datetime, cuts: list[int]
) -> None:
    info, claim = realms.infos[2], realms.claims[2]
    start = realms.offsets[2]

    async def prepare(record: DocumentVersion, realm_info: RealmInfo) -> PreparedDocument:
        return await _prepare(realms, record, realm_info)

    applier = ShadowApplier(realms.conn, info, claim, start, prepare, realms.embedder_for)
    msgs = [
        ConsumerRecord(
            "t",
            0,
            lg.offset,
            int(lg.log_time.timestamp() * 1000),
            0,
            info.realm.encode(),
            lg.record.to_json(),
            None,
            0,
            0,
            (),
        )
        for lg in _logged(info.realm, space, script, start, t)
    ]
    bounds = sorted({c % (len(msgs) + 1) for c in cuts} | {0, len(msgs)})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        await applier.write(await applier.plan(start + lo, start + hi, msgs[lo:hi]))
    realms.offsets[2] += len(script)


async def _state(realms: Realms, info: RealmInfo, space: str, instants: list[datetime]) -> Any:
    s = sql.Identifier(info.schema)

    async def rows(q: sql.Composable, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = await realms.conn.execute(q, params)
        return sorted(tuple(r) for r in await cur.fetchall())

    state = {
        "documents": await rows(
            sql.SQL(
                "SELECT doc_key, status, content_hash, source_version, chunk_count, order_key"
                " FROM {}.documents WHERE space = %s"
            ).format(s),
            (space,),
        ),
        "entities": await rows(
            sql.SQL(
                "SELECT name, type, description, aliases, dormant_since IS NOT NULL"
                " FROM {}.entities WHERE space = %s"
            ).format(s),
            (space,),
        ),
        "relations": await rows(
            sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.negated, r.status, r.weight,"
                " r.order_key, (SELECT concat_ws(' ', xs.name, x.predicate, xo.name)"
                "  FROM {s}.relations x JOIN {s}.entities xs ON xs.id = x.subject_id"
                "  JOIN {s}.entities xo ON xo.id = x.object_id WHERE x.id = r.superseded_by),"
                " r.superseded_via"
                " FROM {s}.relations r JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id WHERE r.space = %s"
            ).format(s=s),
            (space,),
        ),
        "changes": await rows(
            sql.SQL(
                "SELECT o.belief_time, o.idx, o.kind, o.payload - 'relation' - 'entity'"
                " - 'superseded_by' - 'merged_into' FROM {}.outbox o WHERE o.space = %s"
            ).format(s),
            (space,),
        ),
    }
    state["entity_history"] = await rows(
        sql.SQL(
            "SELECT e.name, h.name, h.type, h.description, h.aliases, h.t_created, h.t_expired"
            " FROM {s}.entity_history h JOIN {s}.entities e ON e.id = h.entity_id"
            " WHERE e.space = %s"
        ).format(s=s),
        (space,),
    )
    for t in instants:
        listed = await list_entities(
            realms.conn,
            info,
            name=None,
            space=space,
            include_dormant=True,
            after_id=0,
            limit=10_000,
            believed_at=t,
        )
        state[f"entities believed {t.isoformat()}"] = sorted(
            tuple(str(v) for k, v in sorted(e.items()) if k != "id") for e in listed
        )
        state[f"believed {t.isoformat()}"] = await rows(
            sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.negated, h.state, h.superseded_via"
                " FROM {s}.relation_history h JOIN {s}.relations r ON r.id = h.relation_id"
                " JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id"
                " WHERE r.space = %s AND h.t_created <= %s"
                " AND (h.t_expired IS NULL OR h.t_expired > %s)"
            ).format(s=s),
            (space, t, t),
        )
    return state


@pytest.fixture(scope="module")
def realms(pg_dsn: str) -> Iterator[tuple[asyncio.AbstractEventLoop, Realms]]:
    loop = asyncio.new_event_loop()

    async def setup() -> Realms:
        conn = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
        await ensure_control(conn)
        stamp = datetime.now(UTC).strftime("%H%M%S%f")
        infos = [await create_realm(conn, f"eq{way}_{stamp}", CONFIG) for way in "abc"]
        r = Realms(conn, infos)
        for info in infos:
            claim, _ = await positions.claim(conn, f"eq:{info.schema}", "t", 0, 0)
            await realm_positions.ensure(conn, info.schema, info.realm, "t", 0)
            r.claims.append(claim)
        return r

    r = loop.run_until_complete(setup())
    yield loop, r
    loop.run_until_complete(r.conn.close())
    loop.close()


@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    script=ops,
    cuts=st.lists(st.integers(0, 10), max_size=3),
    probes=st.lists(st.integers(0, 10), min_size=1, max_size=3),
)
def test_record_by_record_one_batch_and_a_replay_build_the_same_realm(
    realms: tuple[asyncio.AbstractEventLoop, Realms],
    script: list[Op],
    cuts: list[int],
    probes: list[int],
) -> None:
    loop, r = realms
    r.example += 1
    space = f"x{r.example}"
    t = T0 + timedelta(hours=r.example)
    instants = [t + timedelta(seconds=p, milliseconds=500) for p in probes]

    async def run() -> list[Any]:
        await _record_by_record(r, script, space, t)
        await _one_batch(r, script, space, t)
        await _replayed(r, script, space, t, cuts)
        return [await _state(r, info, space, instants) for info in r.infos]

    by_record, batched, replayed = loop.run_until_complete(run())
    assert by_record == batched
    assert by_record == replayed
