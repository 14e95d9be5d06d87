"""The fault matrix as a suite: kill a part of the running system mid-stream, bring it back,
and check the same invariants every time (:mod:`fault_helpers`). Each case prints a
``FAULT | … | recovered in … | lost … | duplicated …`` line (``-s`` shows them);
``scripts/faults`` runs only these.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable

import httpx
import orjson
import psycopg
import pytest
from psycopg import sql

from tidegraph.indexer.consumer.indexer import Indexer
from tidegraph.infra import _proc, services
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.hashing import content_hash

from fault_helpers import (
    Recovery,
    Writer,
    check_changes,
    check_invariants,
    cli,
    private_services,
    running_publisher,
    sigkill,
    stop,
    stored_documents,
    wait_http,
    wait_indexed,
)
from indexer_helpers import (
    dead_letters,
    indexer_config,
    make_topics,
    outbox,
    publish,
    running_indexer,
    spawn_indexer,
    stored_position,
    upsert,
    wait_for,
)
from query_helpers import api_client, open_pool
from tcp_proxy import tcp_proxy

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


async def _acks_reach(writer: Writer, n: int, limit: float = 60.0) -> None:
    async def enough() -> bool:
        return len(writer.acknowledged) >= n

    await wait_for(enough, limit, f"{n} acknowledged documents")


async def test_http_ingest_killed_mid_request(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """SIGKILL the ingest service while four clients write: every 202 is indexed once."""
    topics = await make_topics(kafka_bootstrap, unique_name("f"), partitions=2)
    realm, group, port = unique_name("r"), unique_name("g"), _proc.free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"TIDEGRAPH_KAFKA_BOOTSTRAP": kafka_bootstrap}
    args = ("connect", "http", "--port", str(port), "--topic-prefix", topics.prefix)
    ingest = cli(*args, env=env, name=f"ingest-{group}")
    writer, halt = Writer(base, realm), asyncio.Event()
    try:
        await wait_http(base)
        async with (
            running_publisher(topics, pg_dsn, [realm]),
            running_indexer(topics, pg_dsn, group),
        ):
            writing = asyncio.create_task(writer.run(halt))
            await _acks_reach(writer, 40)
            sigkill(ingest)
            killed_at = time.monotonic()
            await asyncio.sleep(0.3)  # answers already on their way are counted before
            before = len(writer.acknowledged)
            ingest = cli(*args, env=env, name=f"ingest-{group}")
            await _acks_reach(writer, before + 1)
            recovery = time.monotonic() - killed_at
            await _acks_reach(writer, before + 40)
            halt.set()
            await writing
            await wait_indexed(pg_dsn, realm, writer.acknowledged, 120)
            duplicated = await check_invariants(pg_dsn, realm, writer.acknowledged, topics)
    finally:
        halt.set()
        stop(ingest)
    assert writer.errors > 0, "the kill should have cut requests in flight"
    Recovery("HTTP ingest SIGKILL mid-request", recovery, 0, duplicated).show()


async def test_broker_killed_during_http_ingest(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL the broker under HTTP ingest and an indexer, start it again: the ingest
    answers 503 meanwhile and every 202, before and after, is indexed once."""
    with private_services([services.KAFKA]) as own:
        for key, value in own.env().items():  # this process's clients use the private broker
            monkeypatch.setenv(key, value)
        bootstrap = own.env()["TIDEGRAPH_KAFKA_BOOTSTRAP"]
        suffix = uuid.uuid4().hex[:8]
        topics = await make_topics(bootstrap, f"fb{suffix}", partitions=2)
        realm, group, port = f"rb{suffix}", f"gb{suffix}", _proc.free_port()
        base = f"http://127.0.0.1:{port}"
        args = ("connect", "http", "--port", str(port), "--topic-prefix", topics.prefix)
        ingest = cli(*args, "--send-timeout", "3", env=own.env(), name=f"ingest-{group}")
        writer, halt = Writer(base, realm), asyncio.Event()
        try:
            await wait_http(base)
            async with (
                running_publisher(topics, pg_dsn, [realm], env=own.env()),
                running_indexer(topics, pg_dsn, group),
            ):
                writing = asyncio.create_task(writer.run(halt))
                await _acks_reach(writer, 30)
                own.kill(services.KAFKA)
                killed_at, before = time.monotonic(), len(writer.acknowledged)
                await asyncio.sleep(3)
                own.start([services.KAFKA])
                await _acks_reach(writer, before + 1, limit=120)
                recovery = time.monotonic() - killed_at
                await _acks_reach(writer, before + 30)
                halt.set()
                await writing
                await wait_indexed(pg_dsn, realm, writer.acknowledged, 180)
                duplicated = await check_invariants(pg_dsn, realm, writer.acknowledged, topics)
        finally:
            halt.set()
            stop(ingest)
    assert writer.refused + writer.errors > 0, "requests during the outage must not be 202"
    Recovery("Kafka broker SIGKILL + restart under HTTP ingest", recovery, 0, duplicated).show()


async def test_kafka_behind_a_faulty_proxy(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP ingest, an indexer and the change publisher reach the broker only through a TCP
    proxy (the broker advertises the proxy's port) that adds latency, resets every open
    connection and black-holes the link while records flow: every 202 is indexed once and
    the outbox and the changes topic stay contiguous."""
    kafka_port = _proc.free_port()
    async with tcp_proxy("127.0.0.1", kafka_port) as proxy:
        with private_services(
            [services.KAFKA], kafka_port=kafka_port, advertised_port=proxy.port
        ) as own:
            env = {**own.env(), "TIDEGRAPH_KAFKA_BOOTSTRAP": f"127.0.0.1:{proxy.port}"}
            for key, value in env.items():  # this process's clients go through the proxy too
                monkeypatch.setenv(key, value)
            suffix = uuid.uuid4().hex[:8]
            topics = await make_topics(env["TIDEGRAPH_KAFKA_BOOTSTRAP"], f"fp{suffix}", 2)
            realm, group, port = f"rp{suffix}", f"gp{suffix}", _proc.free_port()
            base = f"http://127.0.0.1:{port}"
            args = ("connect", "http", "--port", str(port), "--topic-prefix", topics.prefix)
            ingest = cli(*args, "--send-timeout", "3", env=env, name=f"ingest-{group}")
            indexer = spawn_indexer(topics, pg_dsn, group)
            writer, halt = Writer(base, realm), asyncio.Event()
            cuts: list[tuple[int, int]] = []
            """(connections cut, acknowledged records not yet stored) at each reset."""

            async def cut() -> None:
                unapplied = len(writer.acknowledged) - len(await stored_documents(pg_dsn, realm))
                cuts.append((proxy.reset(), unapplied))

            try:
                await wait_http(base)
                async with running_publisher(topics, pg_dsn, [realm], env=env):
                    writing = asyncio.create_task(writer.run(halt))
                    await _acks_reach(writer, 30)
                    proxy.delay(0.05)  # latency on every chunk, each way
                    for _ in range(3):
                        await asyncio.sleep(1.5)
                        await cut()  # resets under latency: the indexer is behind
                    proxy.heal()
                    await asyncio.sleep(1)
                    proxy.drop()  # a black hole: requests and answers vanish
                    await asyncio.sleep(0.5)  # answers already past the proxy land
                    in_hole = len(writer.acknowledged)
                    await asyncio.sleep(3.5)
                    in_hole = len(writer.acknowledged) - in_hole
                    proxy.heal()
                    await cut()  # what was opened into the hole is dead: reset it
                    healed_at, before = time.monotonic(), len(writer.acknowledged)
                    await _acks_reach(writer, before + 1, limit=120)
                    recovery = time.monotonic() - healed_at
                    await _acks_reach(writer, before + 30, limit=120)
                    halt.set()
                    await writing
                    await wait_indexed(pg_dsn, realm, writer.acknowledged, 180)
                    duplicated = await check_invariants(pg_dsn, realm, writer.acknowledged, topics)
            finally:
                halt.set()
                stop(ingest)
                stop(indexer)
    assert in_hole == 0, f"{in_hole} writes acknowledged through a black hole: a bypass"
    assert any(n > 0 and unapplied > 0 for n, unapplied in cuts), (
        f"no reset cut a connection while acknowledged records were unapplied: {cuts}"
    )
    print(f"\nresets (connections cut, acknowledged but unapplied): {cuts}")
    Recovery(
        f"Kafka behind a proxy: latency, {sum(n for n, _ in cuts)} resets, 4 s black hole",
        recovery,
        0,
        duplicated,
    ).show()


async def test_postgres_killed_during_indexing_and_querying(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """SIGKILL PostgreSQL while an indexer applies a stream and clients query: queries
    answer 503 within a second meanwhile, and every record is applied once afterwards."""
    with private_services([services.POSTGRES]) as own:
        dsn = own.env()["TIDEGRAPH_PG_DSN"]
        topics = await make_topics(kafka_bootstrap, unique_name("f"), partitions=2)
        realm, group = unique_name("r"), unique_name("g")
        records = [
            upsert(realm, f"d{i}.md", f"Charles Babbage worked with Person{i} Jones.")
            for i in range(300)
        ]
        await publish(topics, records)
        indexer = spawn_indexer(topics, dsn, group)
        slowest, answers, halt = [0.0], {"ok": 0, "503": 0}, asyncio.Event()
        try:
            async with (
                running_publisher(topics, dsn, [realm]),
                open_pool(dsn) as pool,
                api_client(pool) as client,
            ):

                async def query() -> None:
                    while not halt.is_set():
                        started = time.monotonic()
                        try:
                            r = await client.get(f"/v1/realms/{realm}/entities")
                        except httpx.HTTPError:
                            r = None
                        slowest[0] = max(slowest[0], time.monotonic() - started)
                        if r is not None and r.status_code == 503:
                            answers["503"] += 1
                        elif r is not None and r.status_code == 200:
                            answers["ok"] += 1
                        await asyncio.sleep(0.05)

                async def crossed() -> bool:
                    return await stored_position(dsn, group, topics.documents) >= 100

                await wait_for(crossed, 120, "100 records applied", interval=0.05)
                querying = asyncio.create_task(query())
                await asyncio.sleep(0.5)
                own.kill(services.POSTGRES)
                killed_at = time.monotonic()
                await asyncio.sleep(3)
                own.start([services.POSTGRES])

                async def done() -> bool:
                    try:
                        return await stored_position(dsn, group, topics.documents) >= len(records)
                    except Exception:  # noqa: BLE001 - not back yet
                        return False

                await wait_for(done, 180, "every record applied after the restart")
                recovery = time.monotonic() - killed_at
                halt.set()
                await querying
                acknowledged = {r.doc_key: r.content_hash or "" for r in records}
                duplicated = await check_invariants(dsn, realm, acknowledged, topics)
        finally:
            halt.set()
            stop(indexer)
    assert answers["503"] > 0 and answers["ok"] > 0, answers
    assert slowest[0] <= 1.5, f"a query waited {slowest[0]:.2f}s during the outage"
    Recovery(
        "PostgreSQL SIGKILL + restart under indexing and queries", recovery, 0, duplicated
    ).show()


def _hostile(realm: str) -> list[tuple[str, tuple[bytes, bytes]]]:
    """(expected DLQ class, raw record) for each kind of bad record seen on a topic."""
    good = upsert(realm, "h.md", "Ada Lovelace worked with Charles Babbage.")
    body = orjson.loads(good.to_json())

    def raw(**changes: object) -> bytes:
        return orjson.dumps({**body, **changes})

    key = realm.encode()
    return [
        ("invalid", (key, b"\xff\xfe not json")),
        ("invalid", (key, b"[1, 2, 3]")),
        ("invalid", (key, b"")),
        ("invalid", (key, raw(schema="tidegraph.document.v999"))),
        ("invalid", (key, orjson.dumps({"schema": body["schema"], "realm": realm}))),
        ("invalid", (key, raw(realm="Not A Realm!"))),
        ("invalid", (key, raw(op="explode"))),
        ("invalid", (key, raw(doc_key=""))),
        ("invalid", (key, raw(event_time="yesterday"))),
        ("hash_mismatch", (key, raw(content_hash="sha256:" + "0" * 64))),
        ("unstorable", (key, raw(doc_key="nul.md", title="Notes\u0000"))),
    ]


async def test_hostile_records_are_dead_lettered_and_valid_ones_after_them_applied(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """Each class of hostile record goes to the DLQ with its reason and origin; the valid
    record published after each one is applied, once."""
    topics = await make_topics(kafka_bootstrap, unique_name("f"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    hostile = _hostile(realm)
    stream: list[DocumentVersion | tuple[bytes, bytes]] = []
    valid: dict[str, str] = {}
    for n, (_, record) in enumerate(hostile):
        stream.append(record)
        doc = upsert(realm, f"after-{n}.md", f"Mary Somerville knew Person{n} Herschel.")
        stream.append(doc)
        valid[doc.doc_key] = doc.content_hash or ""
    started = time.monotonic()
    async with running_publisher(topics, pg_dsn, [realm]):
        async with running_indexer(topics, pg_dsn, group):
            await publish(topics, stream)

            async def passed() -> bool:
                return await stored_position(pg_dsn, group, topics.documents) >= len(stream)

            await wait_for(passed, 120, "every record, hostile ones included")
        took = time.monotonic() - started
        duplicated = await check_invariants(pg_dsn, realm, valid, topics)
    dead = await dead_letters(topics, len(hostile))
    assert len(dead) == len(hostile)
    offsets = {int(h["tg-origin"].rsplit(b"/", 1)[1]): h for _, h in dead}
    assert sorted(offsets) == [2 * n for n in range(len(hostile))]
    for n, (expected, _) in enumerate(hostile):
        headers = offsets[2 * n]
        assert headers["tg-error-class"].decode() == expected, (n, headers)
        assert headers["tg-error"], n
    stored = await stored_documents(pg_dsn, realm)
    assert set(stored) == {*valid, "nul.md"}  # the unstorable version is kept as failed
    Recovery(f"{len(hostile)} hostile records on the topic", took, 0, duplicated).show()


def _notes(realm: str, n: int) -> list[DocumentVersion]:
    return [upsert(realm, f"n{i}.md", f"Caroline Herschel knew Person{i} Boole.") for i in range(n)]


async def _applied(dsn: str, group: str, topic: str, n: int, limit: float = 180.0) -> None:
    async def done() -> bool:
        return await stored_position(dsn, group, topic) >= n

    try:  # bounded even when the position query itself waits on a lock
        async with asyncio.timeout(limit + 5):
            await wait_for(done, limit, f"{n} records applied", interval=0.05)
    except TimeoutError:
        raise AssertionError(f"{n} records not applied within {limit}s") from None


async def test_zombie_member_is_fenced(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """SIGSTOP a member past its session while it holds records, let another take its
    partitions and finish, then SIGCONT it: its late writes are refused, nothing doubles."""
    with private_services([services.POSTGRES]) as own:
        pg_dsn = own.env()["TIDEGRAPH_PG_DSN"]
        topics = await make_topics(kafka_bootstrap, unique_name("f"), partitions=2)
        realms, group = [unique_name("r"), unique_name("r")], unique_name("g")
        records = [r for pair in zip(*(_notes(x, 200) for x in realms), strict=True) for r in pair]
        await publish(topics, records)
        env = {
            "TIDEGRAPH_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "TIDEGRAPH_PG_DSN": pg_dsn,
            "TIDEGRAPH_TOPIC_PREFIX": topics.prefix,
            "TIDEGRAPH_EMBEDDER": "hashing:64",
        }
        # record by record, so the position climbs in ones and the stop lands mid-stream
        zombie = cli(
            "indexer", "--group", group, "--catch-up-run", "0", env=env, name=f"zombie-{group}"
        )
        survivor = None
        async with running_publisher(topics, pg_dsn, realms):
            try:
                await _applied(pg_dsn, group, topics.documents, 60)
                zombie.send_signal(signal.SIGSTOP)
                stopped_at = time.monotonic()
                at_stop = await stored_position(pg_dsn, group, topics.documents)
                assert at_stop < len(records), "the stop must land mid-stream"
                survivor = cli("indexer", "--group", group, env=env, name=f"survivor-{group}")
                await _applied(pg_dsn, group, topics.documents, len(records), limit=120)
                recovery = time.monotonic() - stopped_at
                zombie.send_signal(signal.SIGCONT)
                await asyncio.sleep(5)  # the zombie wakes, tries to go on, and is turned away
                assert await stored_position(pg_dsn, group, topics.documents) == len(records)
                duplicated = 0
                for realm in realms:
                    mine = {r.doc_key: r.content_hash or "" for r in records if r.realm == realm}
                    duplicated += await check_invariants(pg_dsn, realm, mine, topics)
            finally:
                zombie.send_signal(signal.SIGCONT)
                for proc in (zombie, survivor):
                    if proc is not None:
                        stop(proc)
        Recovery(
            "indexer SIGSTOP past its session, SIGCONT (zombie)", recovery, 0, duplicated
        ).show()


async def test_scale_out_and_in_during_a_stream(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """1 → 3 → 1 indexers while records arrive: every record applied once."""
    topics = await make_topics(kafka_bootstrap, unique_name("f"), partitions=6)
    realms, group = [unique_name("r") for _ in range(3)], unique_name("g")
    batches = [[r for x in realms for r in _notes(x, 150)[k::3]] for k in range(3)]
    total = sum(len(b) for b in batches)
    members = [spawn_indexer(topics, pg_dsn, group)]
    started = time.monotonic()
    async with running_publisher(topics, pg_dsn, realms):
        try:
            await publish(topics, batches[0])
            await _applied(pg_dsn, group, topics.documents, len(batches[0]) // 2)
            members += [spawn_indexer(topics, pg_dsn, group) for _ in range(2)]
            await publish(topics, batches[1])
            await asyncio.sleep(3)
            for proc in members[1:]:
                stop(proc)  # SIGTERM: each leaves the group after the record in flight
            await publish(topics, batches[2])
            await _applied(pg_dsn, group, topics.documents, total, limit=240)
            took = time.monotonic() - started
            duplicated = 0
            for realm in realms:
                mine = {
                    r.doc_key: r.content_hash or "" for b in batches for r in b if r.realm == realm
                }
                duplicated += await check_invariants(pg_dsn, realm, mine, topics)
        finally:
            for proc in members:
                stop(proc)
    Recovery(f"indexers 1 -> 3 -> 1 during {total} records", took, 0, duplicated).show()


async def test_a_member_frozen_mid_transaction_releases_its_locks(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """The zombie case's worst moment made certain: a member's connection stops inside a
    transaction holding a lock; PostgreSQL ends that session after the indexer's
    ``idle_in_transaction_timeout``, so whoever takes over is not blocked for ever."""
    topics = await make_topics(kafka_bootstrap, unique_name("f"), partitions=1)
    config = indexer_config(topics, pg_dsn, unique_name("g"), idle_in_transaction_timeout=1.0)
    frozen = Indexer(config, _never, _never)
    table = sql.Identifier(unique_name("lk"))
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as other:
        await other.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(table))
        await other.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(table))
        await frozen.pool.open(wait=True)
        try:
            async with frozen.pool.connection() as conn:
                await conn.execute("BEGIN")
                await conn.execute(sql.SQL("SELECT * FROM {} FOR UPDATE").format(table))
                started = time.monotonic()  # the member now does nothing, lock held
                async with asyncio.timeout(10):
                    await other.execute(sql.SQL("SELECT * FROM {} FOR UPDATE").format(table))
                waited = time.monotonic() - started
                with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
                    await conn.execute("COMMIT")  # its late write goes nowhere
        finally:
            await frozen.pool.close()
            await other.execute(sql.SQL("DROP TABLE {}").format(table))
    assert 0.9 <= waited <= 5.0, waited
    Recovery("member frozen inside a transaction", waited, 0, 0).show()


async def _never(*_: object) -> object:
    raise AssertionError("not used")


async def test_postgres_connector_killed_twice_during_changes(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    """SIGKILL `connect postgres` twice while rows are inserted, updated and deleted, with
    an indexer applying what it publishes: the graph's documents end equal to the table
    (live rows indexed with their hash, deleted ones deleted), the outbox gapless."""
    topics = await make_topics(kafka_bootstrap, unique_name("f"), partitions=2)
    realm, group = unique_name("r"), unique_name("g")
    table, slot = unique_name("cdc_"), unique_name("tgslot_")
    ident = sql.Identifier(table)
    args = (
        "connect", "postgres", "--dsn", pg_dsn, "--table", table, "--key-column", "id",
        "--content-column", "body", "--realm", realm, "--slot", slot,
        "--topic-prefix", topics.prefix,
    )  # fmt: skip
    env = {"TIDEGRAPH_KAFKA_BOOTSTRAP": kafka_bootstrap}
    upsert_row = sql.SQL(
        "INSERT INTO {} VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET body = excluded.body"
    ).format(ident)
    delete_row = sql.SQL("DELETE FROM {} WHERE id = %s").format(ident)
    versions = 0
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as db:
        await db.execute(sql.SQL("CREATE TABLE {} (id text PRIMARY KEY, body text)").format(ident))
        live: dict[str, str] = {}
        for i in range(20):
            body = f"Person{i} Lovelace worked with Person{i} Babbage, version 0."
            await db.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident), (f"k{i}", body)
            )
            live[f"k{i}"] = body
            versions += 1
        connector = cli(*args, env=env, name=f"cdc-{group}")
        kills, recovery = 0, 0.0
        try:
            async with (
                running_publisher(topics, pg_dsn, [realm]),
                running_indexer(topics, pg_dsn, group),
            ):
                for n in range(1, 301):
                    key = f"k{n % 20}"
                    if key in live and n % 7 == 0:
                        await db.execute(delete_row, (key,))
                        del live[key]
                    else:
                        body = f"Person{n} Lovelace worked with Person{n} Babbage, version {n}."
                        await db.execute(upsert_row, (key, body))
                        live[key] = body
                    versions += 1
                    if n in (100, 200):
                        await asyncio.sleep(1)  # let it stream, then cut it mid-flow
                        sigkill(connector)
                        kills += 1
                        connector = cli(*args, env=env, name=f"cdc-{group}")
                    await asyncio.sleep(0.01)
                started = time.monotonic()
                expected = {k: content_hash(v) for k, v in live.items()}

                async def converged() -> bool:
                    stored = await _document_states(pg_dsn, realm)
                    indexed = {k: h for k, (s, h) in stored.items() if s == "indexed"}
                    return indexed == expected and all(
                        s == "deleted" for k, (s, _) in stored.items() if k not in expected
                    )

                await wait_for(converged, 180, "the graph to equal the table")
                recovery = time.monotonic() - started
                await check_changes(topics, pg_dsn, realm)
        finally:
            stop(connector)
            await db.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE slot_name = %s AND NOT active",
                (slot,),
            )
            await db.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(slot)))
            await db.execute(sql.SQL("DROP TABLE {}").format(ident))
    assert kills == 2
    changes = await outbox(pg_dsn, realm)
    seqs = sorted({s for s, _, _ in changes})
    assert seqs == list(range(1, len(seqs) + 1)), "outbox sequence has a gap"
    # versions of a row that meet in one batch fold into the newest (by design), so fewer
    # applications than versions is expected; more would mean a version applied twice
    applied = len({s for s, _, k in changes if k.startswith("document_")})
    assert applied <= versions, f"{applied} applications for {versions} row versions"
    fault = "PostgreSQL connector SIGKILL x2 during inserts, updates, deletes"
    Recovery(fault, recovery, 0, None).show()


async def _document_states(pg_dsn: str, realm: str) -> dict[str, tuple[str, str]]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        try:
            cur = await conn.execute(
                sql.SQL(
                    "SELECT doc_key, status, coalesce(content_hash, '') FROM {}.documents"
                ).format(sql.Identifier(f"realm_{realm}"))
            )
        except psycopg.errors.UndefinedTable:
            return {}
        return {str(k): (str(s), str(h)) for k, s, h in await cur.fetchall()}
