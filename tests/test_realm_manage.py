"""`realm list` shows each realm's size and lag; `realm delete` asks for --yes, drops the
realm and what belongs to it, and says so on the change feed."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from tidegraph.infra import _proc
from tidegraph.store.realms import drop_realm, realm_exists

from indexer_helpers import (
    make_topics,
    publish,
    realm_snapshot,
    running_indexer,
    stored_position,
    upsert,
    wait_for,
)
from local_services import env_without_settings, run_cli

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


def _one_line(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("tidegraph: ") and " — " in line, line
    for needle in needles:
        assert needle in line, line


async def _schema_exists(pg_dsn: str, realm: str) -> bool:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        return await realm_exists(conn, f"realm_{realm}")


async def test_realm_list_and_delete(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    env = env_without_settings(
        TIDEGRAPH_PG_DSN=pg_dsn,
        TIDEGRAPH_KAFKA_BOOTSTRAP=kafka_bootstrap,
        TIDEGRAPH_TOPIC_PREFIX=topics.prefix,
        TIDEGRAPH_STATE_DIR=str(tmp_path / "state"),
    )
    async with running_indexer(topics, pg_dsn, group):
        await publish(
            topics,
            [
                upsert(realm, "a.md", "Ada Lovelace worked with Charles Babbage."),
                upsert(realm, "b.md", "Grace Hopper worked with Howard Aiken."),
            ],
        )

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 2

        await wait_for(done, 60, "both applied")
    await publish(topics, [upsert(realm, "c.md", "Alan Turing worked with Max Newman.")])

    listed = run_cli(["realm", "list", "--json", "--group", group], env)
    assert listed.returncode == 0, listed.stderr
    [row] = [r for r in json.loads(listed.stdout) if r["realm"] == realm]
    assert row["documents"] == {"indexed": 2}
    assert row["entities"] >= 4 and row["relations"] >= 2
    assert row["head_seq"] == 2 and row["embedder"] == "hashing:64"
    assert row["lag"] == 1  # c.md is in the log, not applied
    # the realm stands past its two records, on the one partition its key maps to
    [(partition, stands)] = row["positions"].items()
    assert stands == 2 and 0 <= int(partition) < 3
    table = run_cli(["realm", "list", "--group", group], env)
    assert table.stdout.startswith("REALM"), table.stdout
    assert any(
        line.split()[0] == realm and line.split()[-2:] == [f"{partition}:2", "1"]
        for line in table.stdout.splitlines()
    ), table.stdout

    # An audit copy as of now: listed with its size.
    until = datetime.now(UTC).isoformat()
    audit = run_cli(["replay", "--realm", realm, "--until", until, "--no-progress"], env)
    assert audit.returncode == 0, audit.stderr
    copies = run_cli(["realm", "copies", realm, "--json"], env)
    [copy] = json.loads(copies.stdout)
    assert copy["schema"] == f"realm_{realm}__audit_1" and copy["kind"] == "audit"
    # c.md too: the copy holds every record logged up to the instant
    assert copy["documents"] == {"indexed": 3} and copy["head_seq"] == 3

    _one_line(run_cli(["realm", "delete", realm], env), "2 documents", "--yes")
    assert await _schema_exists(pg_dsn, realm)

    # The broker away: nothing is dropped (the note is published before the commit).
    dead = dict(env, TIDEGRAPH_KAFKA_BOOTSTRAP=f"127.0.0.1:{_proc.free_port()}")
    _one_line(run_cli(["realm", "delete", realm, "--yes"], dead), "Kafka")
    assert await _schema_exists(pg_dsn, realm)

    deleted = run_cli(["realm", "delete", realm, "--yes"], env)
    assert deleted.returncode == 0, deleted.stderr
    assert f"deleted realm {realm}" in deleted.stdout
    assert f"kept its copies: realm_{realm}__audit_1" in deleted.stderr
    dropped = run_cli(["replay", "--realm", realm, "--drop", f"realm_{realm}__audit_1"], env)
    assert dropped.returncode == 0, dropped.stderr
    assert run_cli(["realm", "copies", realm], env).stdout.strip() == f"realm {realm} has no copies"
    assert not await _schema_exists(pg_dsn, realm)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM tidegraph.realms WHERE realm = %s", (realm,))
        assert await cur.fetchone() == (0,)
    changes = run_cli(["changes", "--realm", realm], env)
    assert changes.returncode == 0, changes.stderr
    [note] = [json.loads(line) for line in changes.stdout.splitlines()]
    assert (note["kind"], note["seq"], note["id"]) == ("realm_deleted", 3, f"{realm}:3:0")
    listed = run_cli(["realm", "list", "--json", "--group", group], env)
    assert realm not in {r["realm"] for r in json.loads(listed.stdout)}
    # Kafka away: the realms are listed, the lag is unknown, one line says why.
    listed = run_cli(["realm", "list", "--json", "--group", group], dead)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    assert all(r["lag"] is None for r in json.loads(listed.stdout))
    [why] = listed.stderr.strip().splitlines()
    assert why.startswith("tidegraph: Kafka at ") and "lag unknown" in why, why
    _one_line(run_cli(["realm", "delete", realm, "--yes"], env), "does not exist")


async def test_a_realm_deleted_under_a_running_indexer_is_created_again_by_its_next_record(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    async with running_indexer(topics, pg_dsn, group, backoff_initial=0.2, backoff_max=30):
        await publish(topics, [upsert(realm, "a.md", "Ada Lovelace worked with Charles Babbage.")])

        async def first() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 1

        await wait_for(first, 60, "a.md applied")
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            assert await drop_realm(conn, realm) is not None
        await publish(topics, [upsert(realm, "b.md", "Grace Hopper worked with Howard Aiken.")])
        started = time.monotonic()

        async def second() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 2

        await wait_for(second, 60, "b.md applied")
        # The indexer's cached realm pointed at the dropped schema: a short retry, not the
        # 30 s a record that cannot be applied waits.
        assert time.monotonic() - started < 10
    snap = await realm_snapshot(pg_dsn, realm)
    assert [d[1] for d in snap["documents"]] == ["b.md"]
