"""Failover to a promoted standby, on real services: a local primary with one standby
(`up --replicas 1`), the indexer and `serve` (query API and change publisher) given a
multi-host DSN with ``target_session_attrs=read-write``, documents streaming in through
Kafka. The primary is SIGKILLed (the whole server, as a machine dies), the standby
promoted with `tidegraph pg promote`, and everything must go on against it: every
acknowledged version applied exactly once, the changes topic gapless, one change per id,
and never a change the new primary does not have.

The two tests share one topology, in order: the first fails ``main`` over to ``main/s1``;
the second makes ``main/s2`` of it (`up` again) and fails over to that, with commits lost.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from aiokafka import AIOKafkaProducer
from feed_helpers import check_stream, consume
from psycopg import sql

from tidegraph.infra import _proc, local_pg, local_pg_standbys, local_pg_topology, services
from tidegraph.query_service.reads import OUTBOX_COLUMNS, change_from_row
from tidegraph.schemas.changes import GraphChange
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.servers import MAIN

from indexer_helpers import Topics, make_topics, spawn_indexer, upsert, wait_for
from local_services import REPO, env_without_settings, run_cli

pytestmark = [pytest.mark.postgres, pytest.mark.kafka, pytest.mark.slow]


@dataclass
class Topology:
    state: Path
    credentials: local_pg.PgCredentials

    def primary(self) -> local_pg.PgProcess:
        process = local_pg.running(local_pg_topology.primary_layout(self.state, MAIN))
        assert process is not None, "the primary does not run"
        return process

    def standby(self) -> tuple[str, local_pg.PgProcess]:
        ((label, process),) = local_pg_standbys.processes(self.state).items()
        return label, process

    def dsn(self, process: local_pg.PgProcess) -> str:
        return psycopg.conninfo.make_conninfo(
            "", host="127.0.0.1", port=process.port, user="postgres",
            password=self.credentials.superuser, dbname="postgres",
        )  # fmt: skip

    def multi_host(self, *processes: local_pg.PgProcess) -> str:
        """The DSN every process is given: all hosts, the one taking writes chosen."""
        return psycopg.conninfo.make_conninfo(
            "",
            host=",".join("127.0.0.1" for _ in processes),
            port=",".join(str(p.port) for p in processes),
            user="postgres",
            password=self.credentials.superuser,
            dbname="postgres",
            target_session_attrs="read-write",
            connect_timeout="2",
        )

    def ensure_standby(self) -> None:
        services.up(self.state, services=[services.POSTGRES], replicas=1)

    def env(self) -> dict[str, str]:
        return env_without_settings(TIDEGRAPH_STATE_DIR=str(self.state))


@pytest.fixture(scope="module")
def topology() -> Iterator[Topology]:
    state = REPO / ".tidegraph" / f"test-failover-{uuid.uuid4().hex[:8]}"
    try:
        status = services.up(
            state, services=[services.POSTGRES], pg_port=_proc.free_port(), replicas=1
        )
        credentials = local_pg.PgCredentials.from_env(services.read_env_file(status.state_dir))
        assert credentials is not None
        yield Topology(status.state_dir, credentials)
    finally:
        services.down(state)
        shutil.rmtree(state, ignore_errors=True)


def kill_server(process: local_pg.PgProcess) -> None:
    """SIGKILL the postmaster and every backend at once (its process group), as a crash
    of the machine would stop them."""
    os.killpg(os.getpgid(process.pid), signal.SIGKILL)
    assert _proc.wait_for(lambda: not _proc.is_alive(process.pid), 10)


def promote(topology: Topology, label: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(["pg", "promote", label], topology.env())
    assert done.returncode == 0, done.stderr
    assert f"{label} is the primary of server main" in done.stdout
    assert "tidegraph pg rejoin main" in done.stdout  # what to do with the old primary
    return done


# --- the realm as one server holds it -------------------------------------------------------


async def indexed_keys(dsn: str, realm: str) -> list[str]:
    """doc_keys of the realm's indexed documents on the server at ``dsn``."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with suppress(psycopg.errors.UndefinedTable):
            cur = await conn.execute(
                sql.SQL("SELECT doc_key FROM {}.documents WHERE status = 'indexed'").format(
                    sql.Identifier(f"realm_{realm}")
                )
            )
            return sorted(str(r[0]) for r in await cur.fetchall())
    return []


async def outbox_changes(dsn: str, realm: str) -> list[GraphChange]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT {} FROM {}.outbox ORDER BY seq, idx").format(
                OUTBOX_COLUMNS, sql.Identifier(f"realm_{realm}")
            )
        )
        return [change_from_row(realm, r) for r in await cur.fetchall()]


def check_feed(received: list[GraphChange], held: list[GraphChange], keys: list[str]) -> None:
    """The feed (deduplicated by id) is the server's outbox, change for change, its
    sequences gapless from 1, and every document was applied exactly once."""
    check_stream(received, [c.id for c in held])
    first = {c.id: c for c in received}
    assert [first[c.id] for c in held] == held  # the same change under each id
    seqs = sorted({c.seq for c in held})
    assert seqs == list(range(1, len(seqs) + 1))
    applied = [c.doc_key for c in held if c.kind == "document_indexed"]
    assert sorted(applied) == sorted(keys), "every acknowledged version, applied once"


def only_shown_what_it_has(received: list[GraphChange], held: list[GraphChange]) -> None:
    """Every change the feed has shown is on the server, identical."""
    there = {c.id: c for c in held}
    missing = [c.id for c in received if there.get(c.id) != c]
    assert not missing, f"the feed showed changes the new primary does not have: {missing[:5]}"


# --- the processes ----------------------------------------------------------------------------


def log_path(name: str) -> Path:
    folder = Path(tempfile.gettempdir()) / "tidegraph-test-logs"
    folder.mkdir(exist_ok=True)
    return folder / f"{name}.log"


def spawn_serve(topics: Topics, dsn: str, standbys: str, realm: str, port: int) -> Any:
    env = {
        **os.environ,
        "TIDEGRAPH_PG_DSN": dsn,
        "TIDEGRAPH_PG_STANDBYS": standbys,
        "TIDEGRAPH_KAFKA_BOOTSTRAP": topics.bootstrap,
        "TIDEGRAPH_EMBEDDER": "hashing:64",
    }
    env.pop("TIDEGRAPH_API_KEYS", None)
    env.pop("TIDEGRAPH_PG_SERVERS", None)
    args = ["serve", "--port", str(port), "--topic-prefix", topics.prefix, "--publish-realm",
            realm, "--log-level", "warning", "--pool-size", "2"]  # fmt: skip
    with open(log_path(f"serve-{realm}"), "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tidegraph.infra.cli", *args],
            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


async def wait_healthy(port: int, proc: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient() as client:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, "serve exited"
            with suppress(httpx.TransportError):
                if (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError("serve did not become healthy")


@asynccontextmanager
async def producer(topics: Topics) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(
        **kafka_client_options(), bootstrap_servers=topics.bootstrap, acks="all",
        enable_idempotence=True,
    )  # fmt: skip
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


async def send(p: AIOKafkaProducer, topics: Topics, realm: str, key: str) -> None:
    """One document version, returned once Kafka acknowledged it."""
    text = f"{key.title()} met Ada Lovelace in London. {key.title()} worked with Babbage."
    record = upsert(realm, key, text)
    await (await p.send(topics.documents, record.to_json(), key=realm.encode()))


async def metric(port: int, name: str, **labels: str) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and want in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


# --- the tests --------------------------------------------------------------------------------


async def test_primary_killed_mid_stream_then_promoted_and_everything_goes_on(
    topology: Topology, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    realm, group = unique_name("fo"), unique_name("g")
    topics = await make_topics(kafka_bootstrap, unique_name("tf"), partitions=1)
    old = topology.primary()
    label, standby = topology.standby()
    dsn = topology.multi_host(old, standby)
    standbys = f"{label}={topology.dsn(standby)}"
    keys = [f"doc{i:03d}" for i in range(120)]
    indexer = spawn_indexer(topics, dsn, group)
    serve = spawn_serve(topics, dsn, standbys, realm, port := _proc.free_port())
    sent: list[str] = []
    try:
        await wait_healthy(port, serve)
        async with producer(topics) as p:

            async def stream() -> None:
                for key in keys:
                    await send(p, topics, realm, key)
                    sent.append(key)
                    await asyncio.sleep(0.05)

            streaming = asyncio.create_task(stream())
            await wait_for(
                lambda: _more_than(indexed_keys(topology.dsn(old), realm), 20),
                60, "the first documents indexed",
            )  # fmt: skip
            kill_server(old)
            at_kill = len(sent)
            assert not streaming.done() and 20 <= at_kill < len(keys), "mid-stream"
            promote(topology, label)
            await streaming
        new = topology.primary()
        assert new.port == standby.port
        assert len(sent) > at_kill  # acknowledged after the kill, applied too
        await wait_for(
            lambda: _equal(indexed_keys(topology.dsn(new), realm), keys), 120, "every document"
        )
        # the query service answers from the new primary
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{port}/v1/realms/{realm}/documents/doc119")
        assert r.status_code == 200 and r.json()["status"] == "indexed"
        held = await outbox_changes(topology.dsn(new), realm)
        await wait_for(lambda: _published_all(topics, realm, held), 60, "the feed")
    finally:
        stop(indexer)
        stop(serve)
    received = await consume(topics.bootstrap, topics.changes, realm, len(held))
    check_feed(received, held, keys)


async def test_commits_the_standby_never_received_are_applied_again_never_shown_twice(
    topology: Topology, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topology.ensure_standby()  # after the first test: a new standby of the promoted server
    realm, group = unique_name("fl"), unique_name("g")
    topics = await make_topics(kafka_bootstrap, unique_name("tl"), partitions=1)
    primary = topology.primary()
    label, standby = topology.standby()
    dsn = topology.multi_host(primary, standby)
    standbys = f"{label}={topology.dsn(standby)}"
    first, lost = [f"a{i:02d}" for i in range(20)], [f"b{i:02d}" for i in range(10)]
    indexer = spawn_indexer(topics, dsn, group)
    serve = spawn_serve(topics, dsn, standbys, realm, port := _proc.free_port())
    try:
        await wait_healthy(port, serve)
        async with producer(topics) as p:
            for key in first:
                await send(p, topics, realm, key)
            await wait_for(
                lambda: _equal(indexed_keys(topology.dsn(primary), realm), first), 60, "a*"
            )
            before = await outbox_changes(topology.dsn(primary), realm)
            await wait_for(lambda: _published_all(topics, realm, before), 60, "a* published")
            # the standby's WAL receiver stops (with it): what follows never reaches it
            local_pg_standbys.stop(topology.state, label)
            for key in lost:
                await send(p, topics, realm, key)
            await wait_for(
                lambda: _equal(indexed_keys(topology.dsn(primary), realm), first + lost),
                60, "b* committed on the primary",
            )  # fmt: skip
            # the publisher has read b* by now: it holds it back, or (were it not waiting
            # for the standby) it has published it
            await wait_for(
                lambda: _held_or_shown(port, label, topics, realm, len(before)),
                30, "the publisher to handle b*",
            )  # fmt: skip
            # nor does the HTTP feed show b*: its standby never got it
            held_page = await changes_page(port, realm)
            assert held_page.status_code == 503, held_page.text
            assert held_page.json()["error"]["code"] == "standbys_behind"
            kill_server(primary)
            indexer.send_signal(signal.SIGKILL)  # the indexer's machine goes down too
            indexer.wait(10)
            target = local_pg_standbys.find(topology.state, label)
            restarted = local_pg_standbys.launch(
                topology.state, target, primary, topology.credentials
            )
            local_pg.wait_ready(target.layout, restarted, timeout=60)
            promote(topology, label)
            new = topology.primary()
            assert await indexed_keys(topology.dsn(new), realm) == first, "b* was lost"
            shown = await consume(topics.bootstrap, topics.changes, realm, sys.maxsize, 3)
            there = await outbox_changes(topology.dsn(new), realm)
            only_shown_what_it_has(shown, there)
            await wait_for(lambda: _answers(port, realm), 60, "the HTTP feed after promotion")
            page = (await changes_page(port, realm)).json()["changes"]
            only_shown_what_it_has([GraphChange.model_validate(c) for c in page], there)
            assert len(page) == len(there)
            assert await _held_back(port, realm, label) > 0
            # a new indexer applies b* again from Kafka, the realm's position having
            # rolled back with the lost commits
            indexer = spawn_indexer(topics, dsn, group)
            await wait_for(
                lambda: _equal(indexed_keys(topology.dsn(new), realm), first + lost),
                120, "b* applied again",
            )  # fmt: skip
        held = await outbox_changes(topology.dsn(new), realm)
        await wait_for(lambda: _published_all(topics, realm, held), 60, "the feed")
    finally:
        stop(indexer)
        stop(serve)
    received = await consume(topics.bootstrap, topics.changes, realm, len(held))
    check_feed(received, held, first + lost)


async def changes_page(port: int, realm: str) -> httpx.Response:
    """The HTTP change feed of ``realm`` from its start, one page."""
    async with httpx.AsyncClient(timeout=30) as client:
        url = f"http://127.0.0.1:{port}/v1/realms/{realm}/changes"
        return await client.get(url, params={"after_seq": 0, "limit": 1000})


async def _answers(port: int, realm: str) -> bool:
    return (await changes_page(port, realm)).status_code == 200


async def _more_than(keys: Any, n: int) -> bool:
    return len(await keys) > n


async def _equal(keys: Any, want: list[str]) -> bool:
    return bool(await keys == sorted(want))


async def _held_back(port: int, realm: str, label: str) -> float:
    return await metric(port, "tidegraph_publisher_held_back_total", realm=realm, standby=label)


async def _held_or_shown(port: int, label: str, topics: Topics, realm: str, shown: int) -> bool:
    if await _held_back(port, realm, label) > 0:
        return True
    got = await consume(topics.bootstrap, topics.changes, realm, sys.maxsize, 1)
    return len({c.id for c in got}) > shown


async def _published_all(topics: Topics, realm: str, held: list[GraphChange]) -> bool:
    got = await consume(topics.bootstrap, topics.changes, realm, len(held), 2)
    return {c.id for c in got} >= {c.id for c in held}


def test_the_old_primary_rejoins_as_a_standby_without_its_lost_commits(
    topology: Topology,
) -> None:
    """The old primary of the test above, SIGKILLed holding commits the new primary never
    received (the new primary has since applied those records again, under the same
    sequence numbers): `pg rejoin main` rewinds it — a real rewind, the timelines had
    forked — and starts it as a standby. It streams from the new primary and holds exactly
    what the new primary holds, every realm's change feed included; `up` keeps it."""
    old_folder = local_pg_topology.retired(topology.state, MAIN)[-1]
    done = run_cli(["pg", "rejoin", MAIN], topology.env())
    assert done.returncode == 0, done.stderr
    assert "pg_rewind: Done!" in done.stdout, done.stdout
    assert f"the old primary ({old_folder}) is standby" in done.stdout
    assert old_folder not in local_pg_topology.retired(topology.state, MAIN)
    (label, process), *_ = [
        (label, p) for label, p in local_pg_standbys.processes(topology.state).items()
        if local_pg_topology.standby_folder(*label.split("/")) == old_folder
    ]  # fmt: skip
    primary = topology.primary()
    with psycopg.connect(topology.dsn(primary), autocommit=True) as conn:
        conn.execute("CREATE TABLE after_rejoin (x int)")
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        streaming = conn.execute(
            "SELECT state FROM pg_stat_replication WHERE application_name = %s", (label,)
        ).fetchall()
    assert streaming == [("streaming",)]
    local_pg_standbys.wait_replayed(topology.dsn(process), str(row[0]), timeout=60)
    assert _realm_feeds(topology.dsn(process)) == _realm_feeds(topology.dsn(primary))
    assert _realm_feeds(topology.dsn(primary)), "the realms of the tests above"
    written = services.read_env_file(topology.state)
    assert label in written["TIDEGRAPH_PG_STANDBYS"]
    again = services.up(topology.state, services=[services.POSTGRES])
    assert again.postgres.pid == primary.pid
    assert local_pg_standbys.processes(topology.state)[label].pid == process.pid


def _realm_feeds(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every realm's change feed on the server at ``dsn``, row for row."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        schemas = [
            r[0] for r in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'realm\\_%' ORDER BY 1"
            )
        ]  # fmt: skip
        return {
            schema: conn.execute(
                sql.SQL("SELECT * FROM {} ORDER BY seq, idx").format(
                    sql.Identifier(schema, "outbox")
                )
            ).fetchall()
            for schema in schemas
        }


def test_a_switchover_stops_the_old_primary_and_the_other_standby_follows(
    topology: Topology,
) -> None:
    """Promoting while the primary runs (a planned switchover): it is stopped first, never
    two primaries; the server's other standby follows the new one; the env file names the
    new primary and the remaining standby; `up` never starts a retired primary again."""
    services.up(topology.state, services=[services.POSTGRES], replicas=2)
    old, old_folder = topology.primary(), local_pg_topology.primary_folder(topology.state, MAIN)
    standbys = local_pg_standbys.processes(topology.state)
    assert len(standbys) == 2
    chosen, other = sorted(standbys)
    done = promote(topology, chosen)
    assert f"stopped the old primary of main (pid {old.pid})" in done.stdout
    assert f"standby {other} follows it" in done.stdout
    assert not _proc.is_alive(old.pid)
    new = topology.primary()
    assert new.port == standbys[chosen].port
    written = services.read_env_file(topology.state)
    assert f":{new.port}/" in written["TIDEGRAPH_PG_DSN"]
    (follower,) = local_pg_standbys.processes(topology.state).items()
    assert follower[0] == other
    dsns = local_pg_standbys.running(topology.state, topology.credentials)
    assert written["TIDEGRAPH_PG_STANDBYS"] == f"{other}={dsns[other]}"
    with psycopg.connect(topology.dsn(new), autocommit=True) as conn:
        conn.execute("CREATE TABLE after_switchover (x int)")
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        replicas = conn.execute("SELECT application_name FROM pg_stat_replication").fetchall()
    assert replicas == [(other,)]
    local_pg_standbys.wait_replayed(topology.dsn(follower[1]), str(row[0]), timeout=30)
    again = services.up(topology.state, services=[services.POSTGRES])
    assert again.postgres.pid == new.pid
    assert local_pg_topology.retired(topology.state, MAIN)[-1] == old_folder
    assert local_pg.running(local_pg.PgLayout(topology.state / old_folder)) is None
