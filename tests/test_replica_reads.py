"""Realm reads from a streaming standby (`tidegraph up --replicas 1`) with read-your-writes:
a standby answers a read requiring sequence S once it has applied S, a stale one is passed
over within the bounded wait, a lagging one answers no read without a required sequence,
and one that stops answering fails no read. The response header names the node that
answered, and the service's metrics count why."""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql

from tidegraph.client import AsyncClient
from tidegraph.infra import _proc, local_pg_standbys, services
from tidegraph.infra.realm_status import DataStatus, StandbyLag, as_json, render, standby_lags
from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.schemas.servers import MAIN, Servers, load_servers
from tidegraph.store.cluster import Cluster

from graph_helpers import GraphHarness, ent, rel
from local_services import REPO, env_without_settings, run_cli
from query_helpers import embedders

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

STANDBY = "main/s1"
CONFIG = RealmConfig(embedder="hashing:8")


@dataclass
class Topology:
    state: Path
    servers: Servers

    @property
    def primary(self) -> str:
        return self.servers.dsn(MAIN)

    @property
    def standby(self) -> str:
        (one,) = self.servers.standbys(MAIN)
        return one.dsn


@pytest.fixture(scope="module")
def topology() -> Iterator[Topology]:
    """One local server with one standby, started by the command line (once per module)."""
    state = REPO / ".tidegraph" / f"test-replica-reads-{uuid.uuid4().hex[:8]}"
    env = env_without_settings(TIDEGRAPH_STATE_DIR=str(state))
    port = str(_proc.free_port())
    try:
        up = run_cli(["up", "--only", "postgres", "--replicas", "1", "--pg-port", port], env)
        assert up.returncode == 0, up.stderr
        written = services.read_env_file(state)
        yield Topology(state, load_servers(written["TIDEGRAPH_PG_DSN"], written))
    finally:
        down = run_cli(["down"], env)
        shutil.rmtree(state, ignore_errors=True)
    assert down.returncode == 0, down.stderr


@dataclass
class Realm:
    name: str
    graph: GraphHarness
    conn: psycopg.AsyncConnection[Any]

    async def write(self, doc_key: str, who: str) -> int:
        """A commit on the primary; its sequence."""
        await self.graph.upsert(
            doc_key, [([ent("Ada"), ent(who)], [rel("Ada", "worked_with", who)])]
        )
        cur = await self.conn.execute(
            sql.SQL("SELECT seq FROM {}.meta").format(sql.Identifier(self.graph.info.schema))
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture(scope="module")
async def realm(topology: Topology) -> AsyncIterator[Realm]:
    async with await psycopg.AsyncConnection.connect(topology.primary, autocommit=True) as conn:
        name = f"rr{uuid.uuid4().hex[:8]}"
        graph = await GraphHarness.create(conn, name, CONFIG)
        yield Realm(name, graph, conn)


@asynccontextmanager
async def app_client(topology: Topology, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The query API over the server and its standby; unless told otherwise the primary
    leaves reads to the standby, so which node answered says why."""
    pool = make_pool(topology.primary, min_size=1, max_size=4)
    await pool.open(wait=True)
    cluster = Cluster(
        topology.servers, lambda _, dsn: make_pool(dsn, min_size=1, max_size=4), main_pool=pool
    )
    app = create_app(
        QuerySettings(**{"primary_reads": False, **settings}),
        Deps(pool=pool, embedders=embedders(), cluster=cluster),
    )
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://tidegraph.test") as c:
            yield c
    finally:
        await app.state.database_gates.aclose()
        await app.state.database_gate.aclose()
        await cluster.close()


def caught_up(topology: Topology) -> None:
    """Wait until the standby has replayed everything the primary wrote so far."""
    with psycopg.connect(topology.primary, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    local_pg_standbys.wait_replayed(topology.standby, str(row[0]), timeout=30)


def standby_sql(topology: Topology, statement: str) -> None:
    with psycopg.connect(topology.standby, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text ``text``."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # as exposed
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def entities(c: httpx.AsyncClient, realm: str, **params: Any) -> httpx.Response:
    r = await c.get(f"/v1/realms/{realm}/entities", params=params)
    assert r.status_code == 200, r.text
    return r


def names(r: httpx.Response) -> set[str]:
    return {e["name"] for e in r.json()["entities"]}


async def test_a_standby_answers_what_requires_a_sequence_it_has_applied(
    topology: Topology, realm: Realm
) -> None:
    seq = await realm.write("a", "Charles")
    async with app_client(topology) as c:
        for _ in range(3):
            r = await entities(c, realm.name, min_seq=seq)
            assert r.headers["x-tidegraph-served-by"] == STANDBY
            assert int(r.headers["x-tidegraph-head-sequence"]) >= seq
            assert "Charles" in names(r)
        base = f"/v1/realms/{realm.name}"
        required = {"X-Tidegraph-Min-Sequence": str(seq)}
        for path, params in (
            ("/changes", {"after_seq": "0"}),
            ("/relations", {"as_believed_at": "2999-01-01T00:00:00Z"}),
            ("/entities", {"as_believed_at": "2999"}),
            ("/documents/a", {}),
        ):
            r = await c.get(base + path, params=params, headers=required)
            assert r.status_code == 200, r.text
            assert r.headers["x-tidegraph-served-by"] == STANDBY, path
        r = await c.post(base + "/query_data", json={"query": "Ada", "mode": "local"})
        assert r.status_code == 200, r.text
        assert r.headers["x-tidegraph-served-by"] == STANDBY
        reads = (await c.get("/metrics")).text
        assert metric(reads, "tidegraph_realm_reads_total", node=STANDBY, reason="standby") >= 8


async def test_a_stale_standby_is_passed_over_within_the_bounded_wait(
    topology: Topology, realm: Realm
) -> None:
    """Replay paused on the standby: a read requiring the newest commit waits ``wait``
    for it, then the primary answers it, with the commit."""
    before = await realm.write("b0", "Ida")
    caught_up(topology)
    standby_sql(topology, "SELECT pg_wal_replay_pause()")
    try:
        seq = await realm.write("b", "Mary")
        for wait in (0.2, 0.5):
            async with app_client(topology, standby_wait=wait) as c:
                # an earlier sequence the standby has: the standby answers (and its
                # connections are made before anything is timed)
                older = await entities(c, realm.name, min_seq=before)
                assert older.headers["x-tidegraph-served-by"] == STANDBY
                took = []
                for _ in range(5):
                    started = time.perf_counter()
                    r = await entities(c, realm.name, min_seq=seq)
                    took.append(time.perf_counter() - started)
                    assert r.headers["x-tidegraph-served-by"] == MAIN
                    assert "Mary" in names(r)
                    assert int(r.headers["x-tidegraph-head-sequence"]) >= seq
                print(
                    f"wait {wait}s: required-sequence reads answered by the primary in "
                    f"{min(took):.3f}..{max(took):.3f}s"
                )
                assert min(took) >= wait
                assert max(took) < wait + 0.5
                skipped = (await c.get("/metrics")).text
                assert (
                    metric(
                        skipped,
                        "tidegraph_standby_skips_total",
                        server=MAIN,
                        node=STANDBY,
                        reason="behind",
                    )
                    == 5
                )
    finally:
        standby_sql(topology, "SELECT pg_wal_replay_resume()")


async def test_a_standby_catching_up_within_the_wait_answers(
    topology: Topology, realm: Realm
) -> None:
    caught_up(topology)
    standby_sql(topology, "SELECT pg_wal_replay_pause()")
    try:
        seq = await realm.write("c", "Grace")
        async with app_client(topology, standby_wait=3.0) as c:

            async def resume_soon() -> None:
                await asyncio.sleep(0.3)
                await asyncio.to_thread(standby_sql, topology, "SELECT pg_wal_replay_resume()")

            resumed = asyncio.create_task(resume_soon())
            started = time.perf_counter()
            r = await entities(c, realm.name, min_seq=seq)
            took = time.perf_counter() - started
            await resumed
        assert r.headers["x-tidegraph-served-by"] == STANDBY
        assert "Grace" in names(r)
        assert 0.3 <= took < 3.0
    finally:
        standby_sql(topology, "SELECT pg_wal_replay_resume()")


async def test_without_a_required_sequence_a_lagging_standby_is_skipped(
    topology: Topology, realm: Realm
) -> None:
    settings = {"standby_max_lag": 0.3, "standby_lag_every": 0.05}
    async with app_client(topology, **settings) as c:
        r = await entities(c, realm.name)
        assert r.headers["x-tidegraph-served-by"] == STANDBY
    caught_up(topology)
    standby_sql(topology, "SELECT pg_wal_replay_pause()")
    try:
        await realm.write("d", "Alan")
        await asyncio.sleep(0.5)
        await realm.write("e", "Edsger")  # WAL the paused standby received, not replayed
        async with app_client(topology, **settings) as c:
            r = await entities(c, realm.name)
            assert r.headers["x-tidegraph-served-by"] == MAIN
            assert "Edsger" in names(r)
            scraped = (await c.get("/metrics")).text
            lag = metric(scraped, "tidegraph_standby_lag_seconds", server=MAIN, standby="s1")
            assert lag > 0.3
            assert (
                metric(
                    scraped,
                    "tidegraph_standby_skips_total",
                    server=MAIN,
                    node=STANDBY,
                    reason="lagging",
                )
                == 1
            )
        (shown,) = await standby_lags(topology.servers)
        assert shown.label == STANDBY and shown.lag is not None and shown.lag > 0.3
    finally:
        standby_sql(topology, "SELECT pg_wal_replay_resume()")
    async with app_client(topology, **settings) as c:
        deadline = time.monotonic() + 10
        while True:
            r = await entities(c, realm.name)
            if r.headers["x-tidegraph-served-by"] == STANDBY:
                break
            assert time.monotonic() < deadline, "the standby was not used again after replay"
            await asyncio.sleep(0.1)
        (shown,) = await standby_lags(topology.servers)
        assert shown.lag == 0.0


async def test_what_a_read_writes_goes_to_the_primary(topology: Topology) -> None:
    """Coverage telemetry is written by a query the standby answers: on the primary (the
    standby is read-only, so a write sent there would fail and be counted)."""
    name = f"rw{uuid.uuid4().hex[:8]}"
    telemetry = RealmConfig(embedder="hashing:8", coverage_telemetry=True)
    async with await psycopg.AsyncConnection.connect(topology.primary, autocommit=True) as conn:
        await Realm(name, await GraphHarness.create(conn, name, telemetry), conn).write("a", "Bo")
        caught_up(topology)
        async with app_client(topology) as c:
            for _ in range(3):
                r = await c.post(
                    f"/v1/realms/{name}/query_data", json={"query": "Ada", "mode": "local"}
                )
                assert r.status_code == 200, r.text
                assert r.headers["x-tidegraph-served-by"] == STANDBY
            scraped = (await c.get("/metrics")).text
        assert metric(scraped, "tidegraph_telemetry_write_failures_total", realm=name) == 0
        cur = await conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(f"realm_{name}", "retrievals"))
        )
        assert await cur.fetchone() == (3,)


async def test_the_change_feed_shows_no_change_its_standby_lacks(
    topology: Topology, realm: Realm
) -> None:
    """Replay paused on the standby, a change committed since on the primary: read on the
    standby, the page stops before it; read on the primary, the page waits the fence wait
    and answers 503 `standbys_behind` — shown, it would vanish with a failover to that
    standby. Once the standby replays it, either node shows it."""
    before = await realm.write("f0", "Fran")
    caught_up(topology)
    standby_sql(topology, "SELECT pg_wal_replay_pause()")
    try:
        newest = await realm.write("f1", "Grace")
        settings = {"primary_reads": True, "feed_fence_wait": 0.3, "standby_max_lag": 60.0}
        async with app_client(topology, **settings) as c:
            answers: dict[str, list[httpx.Response]] = {}
            for _ in range(4):  # the primary and the standby take turns
                started = time.perf_counter()
                r = await c.get(f"/v1/realms/{realm.name}/changes", params={"after_seq": 0})
                took = time.perf_counter() - started
                if r.status_code == 200:
                    seqs = {change["seq"] for change in r.json()["changes"]}
                    assert before in seqs and max(seqs) < newest, r.text
                    answers.setdefault(r.headers["x-tidegraph-served-by"], []).append(r)
                else:
                    assert r.status_code == 503, r.text
                    assert r.json()["error"]["code"] == "standbys_behind", r.text
                    assert STANDBY in r.json()["error"]["message"]
                    assert r.headers["retry-after"] == "1"
                    assert took >= 0.3  # the fence wait, then the 503
                    answers.setdefault("held", []).append(r)
            assert sorted(answers) == ["held", STANDBY]
            assert len(answers["held"]) == 2
            scraped = (await c.get("/metrics")).text
            held = metric(scraped, "tidegraph_feed_held_back_total", server=MAIN, standby=STANDBY)
            assert held == 2
            standby_sql(topology, "SELECT pg_wal_replay_resume()")
            caught_up(topology)
            for _ in range(2):
                r = await c.get(f"/v1/realms/{realm.name}/changes", params={"after_seq": before})
                assert r.status_code == 200, r.text
                assert {change["seq"] for change in r.json()["changes"]} >= {newest}
    finally:
        standby_sql(topology, "SELECT pg_wal_replay_resume()")


Step = tuple[str, int]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 0)),
        st.tuples(st.just("pause"), st.integers(0, 0)),
        st.tuples(st.just("resume"), st.integers(0, 0)),
        st.tuples(st.just("read"), st.integers(0, 1)),  # 1: with our own writes required
    ),
    min_size=3,
    max_size=12,
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
@example(steps=[("write", 0), ("pause", 0), ("write", 0), ("read", 1), ("read", 0)])
@example(steps=[("pause", 0), ("write", 0), ("read", 0), ("resume", 0), ("read", 1)])
def test_reads_through_the_client_never_miss_what_was_required(
    topology: Topology, steps: list[Step]
) -> None:
    """Whatever the standby's replay does, a read through the client reflects every commit
    up to the sequence it required: the entities written by those commits (the model: what
    this test wrote, with the sequence the primary gave each) are all in the answer."""
    asyncio.run(_run_steps(topology, steps))


async def _run_steps(topology: Topology, steps: list[Step]) -> None:
    written: dict[int, str] = {}  # sequence → the entity its commit added
    async with await psycopg.AsyncConnection.connect(topology.primary, autocommit=True) as conn:
        name = f"rp{uuid.uuid4().hex[:8]}"
        realm = Realm(name, await GraphHarness.create(conn, name, CONFIG), conn)
        try:
            async with app_client(topology, standby_wait=0.05) as c:
                transport = c._transport  # the app over ASGI
                async with AsyncClient("http://tidegraph.test", transport=transport) as tg:
                    for n, (op, own) in enumerate(steps):
                        if op == "write":
                            who = f"Person{n}"
                            seq = await realm.write(f"d{n}", who)
                            written[seq] = who
                        elif op == "pause":
                            standby_sql(topology, "SELECT pg_wal_replay_pause()")
                        elif op == "resume":
                            standby_sql(topology, "SELECT pg_wal_replay_resume()")
                        else:
                            if own and written:
                                tg.sequences.require(name, max(written))
                            floor = tg.sequences.get(name) or 0
                            found = {e.name for e in (await tg.entities(name, limit=1000)).entities}
                            due = {who for seq, who in written.items() if seq <= floor}
                            assert due <= found, (floor, due - found)
                            assert (tg.sequences.get(name) or 0) >= floor
        finally:
            standby_sql(topology, "SELECT pg_wal_replay_resume()")


async def test_a_standby_that_does_not_answer_fails_no_read(
    topology: Topology, realm: Realm
) -> None:
    """Last in the module: the standby stops for good."""
    seq = await realm.write("f", "Barbara")
    async with app_client(topology) as c:
        assert (await entities(c, realm.name, min_seq=seq)).headers[
            "x-tidegraph-served-by"
        ] == STANDBY
        local_pg_standbys.stop(topology.state, STANDBY)
        took = []
        for i in range(20):
            started = time.perf_counter()
            r = await entities(c, realm.name, **({"min_seq": seq} if i % 2 else {}))
            took.append(time.perf_counter() - started)
            assert r.headers["x-tidegraph-served-by"] == MAIN
            assert "Barbara" in names(r)
        print(f"standby stopped: first read {took[0]:.3f}s, then at most {max(took[1:]):.3f}s")
        assert max(took[2:]) < 0.2  # the gate passes over it at once
        scraped = (await c.get("/metrics")).text
        assert (
            metric(
                scraped,
                "tidegraph_standby_skips_total",
                server=MAIN,
                node=STANDBY,
                reason="unavailable",
            )
            >= 15
        )


def test_status_shows_each_standbys_replay_lag() -> None:
    shown = render(
        DataStatus(
            standbys=[
                StandbyLag("main/s1", 0.0),
                StandbyLag("main/s2", 1.5),
                StandbyLag("pg2/s1", None, "connection refused"),
            ]
        )
    )
    rows = [line.split() for line in shown.splitlines()]
    assert ["STANDBY", "REPLAY", "LAG"] in rows
    assert ["main/s1", "none"] in rows
    assert ["main/s2", "1.500s"] in rows
    assert ["pg2/s1", "-", "(connection", "refused)"] in rows
    lags = as_json(DataStatus(standbys=[StandbyLag("main/s1", 0.25)]))["standbys"]
    assert lags == {"main/s1": {"replay_lag_seconds": 0.25, "problem": None}}
