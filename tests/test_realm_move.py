"""Moving a realm to another server while it is written: under continuous ingest, killed
at each step and resumed, and the old copy fenced (real Kafka, two real servers)."""

from __future__ import annotations

import asyncio
import signal
import sys
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import psycopg
import pytest
from aiokafka import AIOKafkaProducer
from pg_servers import ExtraServer, extra_server, opened_cluster
from psycopg import sql

from tidegraph.query_service.db import make_pool
from tidegraph.schemas.hashing import content_hash
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.schemas.servers import MAIN
from tidegraph.store import realm_positions
from tidegraph.store.cluster import Cluster
from tidegraph.store.errors import RealmSwapped
from tidegraph.store.move import LOCK_WAIT, RealmMove
from tidegraph.store.placement import place_realm
from tidegraph.store.realm_positions import Mark
from tidegraph.store.realms import open_realm, placements, realm_copies, realm_exists

from indexer_helpers import make_topics, outbox, running_indexer, upsert, wait_for
from local_services import env_without_settings
from query_helpers import api_client, query_data

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture(scope="module")
def server_b() -> Iterator[ExtraServer]:
    with extra_server("server_b") as server:
        yield server


@pytest.fixture
async def cluster(own_database: str, server_b: ExtraServer) -> AsyncIterator[Cluster]:
    try:
        async with opened_cluster(own_database, {"b": server_b.dsn}) as c:
            yield c
    finally:
        await _unlink_leftovers(server_b.dsn, own_database)


async def _unlink_leftovers(target: str, source: str) -> None:
    """Subscriptions a failed move left on the target, then their slots on the source (a
    slot outlives its test and keeps the test database from being dropped)."""
    async with await psycopg.AsyncConnection.connect(target, autocommit=True) as conn:
        cur = await conn.execute("SELECT subname FROM pg_subscription")
        for (name,) in await cur.fetchall():
            sub = sql.Identifier(name)
            await conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(sub))
            await conn.execute(sql.SQL("ALTER SUBSCRIPTION {} SET (slot_name = NONE)").format(sub))
            await conn.execute(sql.SQL("DROP SUBSCRIPTION {}").format(sub))
    async with await psycopg.AsyncConnection.connect(source, autocommit=True) as conn:
        for _ in range(100):
            cur = await conn.execute(
                "SELECT slot_name, active FROM pg_replication_slots"
                " WHERE database = current_database()"
            )
            slots = await cur.fetchall()
            if not any(active for _, active in slots):
                break
            await asyncio.sleep(0.1)  # senders let their slots go after the disable
        for name, _ in slots:
            await conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))


def _text(key: int, version: int) -> str:
    return f"Person{key} Lovelace worked with Person{key} Babbage, version {version}."


async def _documents(dsn: str, realm: str) -> dict[str, str | None]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        if not await realm_exists(conn, f"realm_{realm}"):
            return {}
        cur = await conn.execute(
            sql.SQL("SELECT doc_key, content_hash FROM {} WHERE status = 'indexed'").format(
                sql.Identifier(f"realm_{realm}", "documents")
            )
        )
        return {str(k): h for k, h in await cur.fetchall()}


async def _server_of(cluster: Cluster, realm: str) -> str:
    async with cluster.connection() as main:
        return {p.realm: p.server for p in await placements(main)}[realm]


class Reader:
    """Asks the query service for the seeded documents over and over while the realm moves:
    every answer must be 200 with a version the realm held, never older than one already
    seen (a 503 during the pause is retried; a 404 or a wrong version is a failure)."""

    def __init__(self, client: httpx.AsyncClient, realm: str, hashes: dict[int, list[str]]):
        self.client, self.realm, self.hashes = client, realm, hashes
        self.seen: dict[int, int] = {}
        self.answers = self.retried = 0
        self.wrong: list[str] = []

    async def run(self, keys: int, until: asyncio.Event) -> None:
        turn = 0
        while not until.is_set():
            key = turn % keys
            turn += 1
            response = await self.client.get(f"/v1/realms/{self.realm}/documents/d{key}.md")
            if response.status_code == 503:
                self.retried += 1
                continue
            if response.status_code != 200:
                self.wrong.append(f"d{key}.md: {response.status_code} {response.text}")
                continue
            self.answers += 1
            versions = self.hashes[key]
            found = response.json()["content_hash"]
            if found not in versions:
                self.wrong.append(f"d{key}.md: a hash never published ({found})")
            elif versions.index(found) < self.seen.get(key, 0):
                self.wrong.append(f"d{key}.md: version {versions.index(found)} after a newer")
            else:
                self.seen[key] = versions.index(found)
            await asyncio.sleep(0.01)


async def test_a_move_under_continuous_ingest_applies_every_version_once(
    kafka_bootstrap: str,
    cluster: Cluster,
    server_b: ExtraServer,
    unique_name: Callable[[str], str],
) -> None:
    main_dsn = cluster.servers.main_dsn
    realm = unique_name("mv")
    await place_realm(cluster, realm, RealmConfig(), MAIN)
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=2)
    group = unique_name("g")
    latest: dict[int, int] = {}
    hashes: dict[int, list[str]] = {}
    published = 0

    async def feed(producer: AIOKafkaProducer, keys: int, until: asyncio.Event | int) -> None:
        """New versions of ``keys`` documents, one at a time, acknowledged each."""
        nonlocal published
        while (published < until) if isinstance(until, int) else not until.is_set():
            key = (published * 7) % keys
            latest[key] = latest.get(key, -1) + 1
            hashes.setdefault(key, []).append(content_hash(_text(key, latest[key])))
            version = upsert(realm, f"d{key}.md", _text(key, latest[key]))
            await producer.send_and_wait(topics.documents, version.to_json(), key=realm.encode())
            published += 1
            await asyncio.sleep(0.002)

    kw = {"servers": cluster.servers, "backoff_initial": 0.1, "backoff_max": 1.0}
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True,
        **kafka_client_options(),
    )  # fmt: skip
    await producer.start()
    try:
        async with running_indexer(topics, main_dsn, group, **kw):
            await feed(producer, 60, 60)

            async def seeded() -> bool:
                return len(await _documents(main_dsn, realm)) == 60

            await wait_for(seeded, 90, "the realm's first documents")
            before, moved = published, asyncio.Event()
            ingest = asyncio.create_task(feed(producer, 90, moved))
            async with api_client(cluster.main, cluster=cluster, realm_cache_seconds=2.0) as api:
                reader = Reader(api, realm, hashes)
                reading = asyncio.create_task(reader.run(60, moved))
                said: list[str] = []
                outcome = await RealmMove(cluster, realm, "b", grace=3.0, say=said.append).run()
                during = published - before
                await asyncio.sleep(3.0)  # readers move within their cache period
                moved.set()
                await asyncio.gather(ingest, reading)
            expected = {f"d{k}.md": content_hash(_text(k, v)) for k, v in latest.items()}

            async def caught_up() -> bool:
                return await _documents(server_b.dsn, realm) == expected

            await wait_for(caught_up, 180, "every version on the new server")
    finally:
        await producer.stop()
    assert during >= 300, f"only {during} records were published during the move"
    assert reader.wrong == [], reader.wrong[:5]
    assert reader.answers >= 100, f"{reader.answers} answers, {reader.retried} retried 503s"
    assert outcome.pause_seconds < 5.0, (outcome, said)
    assert await _server_of(cluster, realm) == "b"
    async with await psycopg.AsyncConnection.connect(main_dsn, autocommit=True) as conn:
        assert not await realm_exists(conn, f"realm_{realm}")  # dropped after the grace
    # Every version changed its document: one commit each, none lost or applied twice,
    # and the feed's sequence runs on across the switch without a gap.
    seqs = [s for s, _, _ in await outbox(server_b.dsn, realm)]
    assert sorted(set(seqs)) == list(range(1, published + 1))


async def test_the_old_copy_is_fenced_and_kept_on_request(
    cluster: Cluster, server_b: ExtraServer, unique_name: Callable[[str], str]
) -> None:
    realm = unique_name("mv")
    await place_realm(cluster, realm, RealmConfig(), MAIN)
    outcome = await RealmMove(cluster, realm, "b", keep_copy=True, grace=0.0).run()
    assert outcome.kept_copy is not None
    async with cluster.connection(MAIN) as conn:
        assert await realm_copies(conn, realm) == [outcome.kept_copy]
        old = await open_realm(conn, realm, schema=outcome.kept_copy)
        # A writer that still believes the realm lives here is refused, whatever it writes.
        with pytest.raises(RealmSwapped):
            async with conn.transaction():
                await realm_positions.settle(conn, "t", 0, [Mark(realm, old.schema, 0, 1)])
    async with cluster.connection("b") as conn:
        moved = await open_realm(conn, realm, server="b")
        await realm_positions.ensure(conn, moved.schema, realm, "t", 0)
        async with conn.transaction():
            await realm_positions.settle(conn, "t", 0, [Mark(realm, moved.schema, 0, 1)])


async def test_coverage_recorded_by_readers_of_the_old_copy_lands_on_the_new_one(
    cluster: Cluster, server_b: ExtraServer, unique_name: Callable[[str], str]
) -> None:
    """Query services that still locate the realm on its old server after the switch (their
    cache period has not run out) record coverage telemetry on its new server: one reads
    the old copy within the grace — fenced, it takes no row — and one after the copy has
    been renamed away. No row stays behind or is lost."""
    realm = unique_name("mv")
    await place_realm(
        cluster, realm, RealmConfig(embedder="hashing:8", coverage_telemetry=True), MAIN
    )
    body = {"query": "Ada Lovelace", "mode": "local"}
    async with (
        _query_service(cluster) as within,
        _query_service(cluster) as after,
    ):
        for api in (within, after):  # each locates the realm on main and keeps it
            await query_data(api, realm, **body)
        move = asyncio.create_task(
            RealmMove(cluster, realm, "b", keep_copy=True, grace=600.0).run()
        )
        try:
            await wait_for(lambda: _move_step(cluster, realm, "switched"), 60, "the switch")
            await query_data(within, realm, **body)  # reads the fenced old copy
        finally:
            move.cancel()
            await asyncio.gather(move, return_exceptions=True)
        outcome = await RealmMove(cluster, realm, "b", grace=0.0).run()  # resumed: retired
        assert outcome.kept_copy is not None
        await query_data(after, realm, **body)  # the old copy is gone under its name
        for api in (within, after):
            scraped = (await api.get("/metrics")).text
            assert f'tidegraph_telemetry_write_failures_total{{realm="{realm}"}}' not in scraped
    assert await _retrievals(server_b.dsn, f"realm_{realm}") == 4
    assert await _retrievals(cluster.servers.main_dsn, outcome.kept_copy) == 2


@asynccontextmanager
async def _query_service(cluster: Cluster) -> AsyncIterator[httpx.AsyncClient]:
    """A query service over the cluster's servers (pools of its own, set up for vector
    search) that keeps a realm's location for ten minutes."""
    pools = Cluster(cluster.servers, lambda _, dsn: make_pool(dsn, min_size=1, max_size=4))
    await pools.open()
    try:
        async with api_client(pools.main, cluster=pools, realm_cache_seconds=600) as api:
            yield api
    finally:
        await pools.close()


async def _move_step(cluster: Cluster, realm: str, step: str) -> bool:
    async with cluster.connection(MAIN) as conn:
        cur = await conn.execute("SELECT to_regclass('tidegraph.realm_moves') IS NOT NULL")
        if await cur.fetchone() != (True,):
            return False  # the move has not begun yet
        cur = await conn.execute(
            "SELECT step FROM tidegraph.realm_moves WHERE realm = %s", (realm,)
        )
        return await cur.fetchone() == (step,)


async def _retrievals(dsn: str, schema: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, "retrievals"))
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


class _MeetsAWriter(RealmMove):
    """A move whose first pause attempt meets a write transaction holding the realm's lock
    for three seconds (taken once the stream is followed, just before the pause)."""

    held: asyncio.Task[None] | None = None

    async def _near(self, src: Any, names: Any) -> None:
        await super()._near(src, names)
        if self.held is None:
            locked = asyncio.Event()
            self.held = asyncio.create_task(self._hold(locked))
            await locked.wait()

    async def _hold(self, locked: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(self.cluster.servers.main_dsn) as conn:
            async with conn.transaction():
                await conn.execute(
                    sql.SQL("SELECT swapped_out FROM {} FOR UPDATE").format(
                        sql.Identifier(f"realm_{self.realm}", "meta")
                    )
                )
                locked.set()
                await asyncio.sleep(3.0)


async def test_a_write_transaction_holding_the_realm_does_not_lengthen_the_pause(
    cluster: Cluster, server_b: ExtraServer, unique_name: Callable[[str], str]
) -> None:
    """Attempts that cannot take the realm's lock within the bound give up (writes go on)
    and the pause that switches is short."""
    realm = unique_name("mv")
    await place_realm(cluster, realm, RealmConfig(), MAIN)
    said: list[str] = []
    move = _MeetsAWriter(cluster, realm, "b", grace=0.0, say=said.append)
    outcome = await move.run()
    assert move.held is not None
    await move.held
    given_up = [line for line in said if line.startswith("pause attempt")]
    assert given_up and all("a write transaction holds the realm" in g for g in given_up), said
    assert outcome.pause_seconds < LOCK_WAIT + 1.0, (outcome, said)
    assert await _server_of(cluster, realm) == "b"


STEPS = [
    "moving realm",
    "copying: the target subscribed",
    "step: synced",
    "pausing the realm's writes",
    "step: switched",
]


@pytest.mark.parametrize("kill_at", STEPS)
async def test_a_move_killed_at_each_step_is_resumed(
    cluster: Cluster,
    server_b: ExtraServer,
    unique_name: Callable[[str], str],
    kill_at: str,
) -> None:
    realm = unique_name("mv")
    info, _ = await place_realm(cluster, realm, RealmConfig(), MAIN)
    async with cluster.connection(MAIN) as conn:
        await conn.execute(
            sql.SQL("INSERT INTO {} (space, doc_key, status, content_hash, indexed_at) VALUES"
                    " ('default', 'a.md', 'indexed', 'sha256:1', now())").format(
                sql.Identifier(info.schema, "documents"))
        )  # fmt: skip
    env = env_without_settings(
        TIDEGRAPH_PG_DSN=cluster.servers.main_dsn, TIDEGRAPH_PG_SERVERS=f"b={server_b.dsn}"
    )
    args = ["-m", "tidegraph.infra.cli", "realm", "move", realm, "--to", "b", "--grace", "3"]
    mover = await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env, stdout=PIPE, stderr=PIPE
    )
    assert mover.stdout is not None
    said = []
    async with asyncio.timeout(120):
        while line := (await mover.stdout.readline()).decode():
            said.append(line)
            if kill_at in line:
                mover.send_signal(signal.SIGKILL)  # lands inside the step just announced
                break
    await mover.wait()
    assert mover.returncode == -signal.SIGKILL, said
    again = await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(again.communicate(), 180)
    resumed = out.decode()
    assert again.returncode == 0, resumed + err.decode()
    assert "resuming the move" in resumed
    assert f"moved realm {realm} from main to b" in resumed
    assert await _server_of(cluster, realm) == "b"
    assert await _documents(server_b.dsn, realm) == {"a.md": "sha256:1"}
    async with cluster.connection(MAIN) as conn:
        assert not await realm_exists(conn, info.schema)
        cur = await conn.execute("SELECT count(*) FROM tidegraph.realm_moves")
        assert await cur.fetchone() == (0,)
    link = f"tg_move_{realm}"
    async with cluster.connection("b") as conn:
        cur = await conn.execute("SELECT count(*) FROM pg_subscription WHERE subname = %s", (link,))
        assert await cur.fetchone() == (0,)
    async with cluster.connection(MAIN) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (link,)
        )
        slots = await cur.fetchone()
        cur = await conn.execute("SELECT count(*) FROM pg_publication WHERE pubname = %s", (link,))
        assert (slots, await cur.fetchone()) == ((0,), (0,))
