"""A Kafka Connect worker for a test module, and what the Debezium tests compare.

The worker is the one `tidegraph kafka-connect up` runs (``tidegraph.infra.local_connect``),
with its own state folder, REST port and cluster group, logging in to the session's broker
like every other client.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

from tidegraph.infra import _proc, local_connect
from tidegraph.schemas.kafka_security import KafkaSecurity


@dataclass(frozen=True)
class Worker:
    layout: local_connect.ConnectLayout
    url: str
    bootstrap: str

    def secret(self, key: str) -> str:
        return self.layout.secret(key)


@contextmanager
def connect_worker(bootstrap: str, pg_dsn: str, group: str) -> Iterator[Worker]:
    """A running worker whose secrets hold the session server's password (``pg.password``)."""
    started = time.monotonic()
    runtime = local_connect.prepare()
    state = Path(tempfile.mkdtemp(prefix="tg-connect-"))
    layout = local_connect.ConnectLayout.under(state)
    settings = local_connect.WorkerSettings(
        bootstrap=bootstrap, security=KafkaSecurity(), rest_port=_proc.free_port(), group=group
    )
    password = str(conninfo.conninfo_to_dict(pg_dsn).get("password") or "")
    process = local_connect.launch(layout, runtime, settings, {"pg.password": password})
    try:
        local_connect.wait_ready(layout, process, timeout=180)
        print(f"\nKafka Connect worker ready in {time.monotonic() - started:.1f}s")
        yield Worker(layout, process.url, bootstrap)
    finally:
        local_connect.stop(layout)
        if os.environ.get("TIDEGRAPH_KEEP_CONNECT_LOG"):
            print(f"Connect log kept in {layout.log}")
        else:
            shutil.rmtree(state, ignore_errors=True)


async def drop_slot(conn: psycopg.AsyncConnection[Any], slot: str) -> None:
    """The replication slot and publication a Debezium connector made, once it is gone."""
    for _ in range(100):
        cur = await conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        )
        row = await cur.fetchone()
        if row is None or not row[0]:
            break
        await asyncio.sleep(0.1)
    await conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
        " WHERE slot_name = %s AND NOT active",
        (slot,),
    )
    await conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(slot)))


async def document_states(pg_dsn: str, realm: str) -> dict[str, tuple[str, str]]:
    """doc_key → (status, content hash) of every document the realm holds."""
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
