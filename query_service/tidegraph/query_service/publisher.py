"""The change publisher: each realm's outbox onto ``<prefix>.changes``, once per realm.

Election. Any number of service replicas run a publisher; per realm, the one holding the
session-level advisory lock ``hashtext('tidegraph:publisher:' || realm)`` publishes. The lock
lives on the publisher's own connection, so a publisher that dies — process killed,
connection cut — releases it, and the next replica's ``pg_try_advisory_lock`` wins within
one poll interval. No lease clocks, no coordination beyond PostgreSQL (DESIGN, "Scaling out").

One round for a realm, in this order:

1. read ``published_seq`` and the outbox rows after it, whole commits only, in
   ``(seq, idx)`` order (commits become visible in sequence order, so this is a prefix);
2. send them as ``GraphChange`` JSON, key = realm, and wait until Kafka acknowledged every
   one (``acks=all``, idempotent producer, so a retried batch is not written twice);
3. only then record the new ``published_seq``, on the lock-holding connection (a publisher
   that lost its connection, and so its lock, cannot record anything).

A crash between 2 and 3 re-sends the same changes with the same ids: delivery is at least
once, duplicates are same-id repeats, and a consumer that deduplicates by id sees every
change exactly once and in order.

Standbys. When the realm's server has standbys (``TIDEGRAPH_PG_STANDBYS``), step 2 waits
until every one of them has replayed the rows read in step 1
(:mod:`tidegraph.store.standby_fence`): a change is published only once any standby that
may be promoted has it, so a failover never takes back a published change, nor reuses its
id for another. Rows a standby has not replayed within ``standby_wait`` are left for a later
round, counted in ``tidegraph_publisher_held_back``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import psycopg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry
from psycopg import AsyncConnection, sql

from tidegraph.query_service.db import table
from tidegraph.query_service.metrics import PublisherMetrics
from tidegraph.query_service.reads import OUTBOX_COLUMNS, change_from_row
from tidegraph.schemas import MAIN, producer_options
from tidegraph.store import Cluster, StandbyFence, placements, read_fence

log = logging.getLogger(__name__)

LOCK_PREFIX = "tidegraph:publisher:"


class ChangeSink(Protocol):
    """Where published changes go; ``send`` returns once every record is acknowledged."""

    async def send(self, records: Sequence[tuple[bytes, bytes]]) -> None: ...


class KafkaChangeSink:
    """An idempotent, ``acks=all`` producer onto the changes topic."""

    def __init__(self, bootstrap: str, topic: str, *, client_id: str = "tidegraph-publisher"):
        self.bootstrap = bootstrap
        self.topic = topic
        self.client_id = client_id
        self._producer: Any = None

    async def start(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            client_id=self.client_id,
            compression_type="lz4",
            linger_ms=5,
            max_batch_size=1024 * 1024,
            **producer_options(),
        )
        await producer.start()
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def send(self, records: Sequence[tuple[bytes, bytes]]) -> None:
        if self._producer is None:
            await self.start()
        producer = self._producer
        futures = [await producer.send(self.topic, value=v, key=k) for k, v in records]
        await asyncio.gather(*futures)

    async def restart(self) -> None:
        """After a failed send the producer's state is unknown: start a fresh one."""
        with contextlib.suppress(KafkaError, OSError):
            await self.stop()
        await self.start()


class ChangePublisher:
    """Publishes every realm whose lock this instance holds; see the module docstring."""

    def __init__(
        self,
        conninfo: str,
        sink: ChangeSink,
        *,
        batch_size: int = 5000,
        poll_interval: float = 0.1,
        registry: CollectorRegistry | None = None,
        realms: Sequence[str] | None = None,
        cluster: Cluster | None = None,
        standby_wait: float = 5.0,
    ) -> None:
        """``realms`` restricts publishing to those realms (default: every realm);
        ``cluster`` reaches the realms on other servers than ``conninfo``'s (``main``) and
        names each server's standbys; ``standby_wait``: seconds a round waits for them."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.conninfo = conninfo
        self.sink = sink
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.only = frozenset(realms) if realms is not None else None
        self.cluster = cluster
        self.metrics = PublisherMetrics(registry or CollectorRegistry())
        self._conn: AsyncConnection[Any] | None = None
        self._held: set[str] = set()
        self._stop = asyncio.Event()
        self.standby_wait = standby_wait
        self._fence = StandbyFence()

    @property
    def held(self) -> frozenset[str]:
        """Realms this instance currently publishes."""
        return frozenset(self._held)

    def stop(self) -> None:
        """Ask :meth:`run` to return after the round in flight."""
        self._stop.set()

    async def run(self) -> None:
        """Publish until :meth:`stop`; reconnects and retries through outages."""
        backoff = self.poll_interval
        try:
            while not self._stop.is_set():
                try:
                    published = await self.step()
                    backoff = self.poll_interval
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    log.warning("publisher lost its database connection: %s", exc)
                    await self._drop_connection()
                    published = 0
                    backoff = min(backoff * 2, 5.0)
                except Exception:  # noqa: BLE001 - keep publishing the other realms, loudly
                    log.exception("publisher round failed; retrying")
                    published = 0
                    backoff = min(backoff * 2, 5.0)
                if published == 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), backoff)
        finally:
            await self._drop_connection()
            await self._fence.close()

    async def step(self) -> int:
        """One round over every realm: claim free realms, publish what is pending."""
        conn = await self._connection()
        realms = await self._realms(conn)
        for realm in sorted(self._held - set(realms)):
            await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (LOCK_PREFIX + realm,))
            self._release(realm)
        total = 0
        for realm, (schema, server) in realms.items():
            if realm not in self._held and not await self._claim(conn, realm):
                continue
            try:
                total += await self.publish_realm(conn, realm, schema, server)
            except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
                now = {p.realm: (p.schema, p.server) for p in await placements(conn)}
                if now.get(realm) == (schema, server):
                    raise
                if realm in now:
                    continue  # moved (or swapped) since the listing: the next round reads it
                # `realm delete` dropped it between the listing and the read: nothing left
                # to publish (the deletion published its own `realm_deleted` change).
                await conn.execute(
                    "SELECT pg_advisory_unlock(hashtext(%s))", (LOCK_PREFIX + realm,)
                )
                self._release(realm)
                log.info("realm %s was deleted; no longer publishing its changes", realm)
            except KafkaError as exc:
                self.metrics.failures.labels(realm).inc()
                log.warning("publishing changes of realm %s failed, will retry: %s", realm, exc)
                restart = getattr(self.sink, "restart", None)
                if restart is not None:
                    await restart()
        return total

    async def publish_realm(
        self, conn: AsyncConnection[Any], realm: str, schema: str, server: str = MAIN
    ) -> int:
        """Publish one batch of whole commits of ``realm``; returns the changes sent.

        The position and the lock are on ``main`` (``conn``), the outbox on the realm's
        server: a realm that moves keeps its position, and the copy a stale catalogue
        answer points at holds the same outbox up to the move, so the feed goes on with
        the next sequence whichever copy a round read."""
        position = await self._position(conn, realm)
        standbys = self.cluster.servers.standbys(server) if self.cluster is not None else ()
        if server == MAIN or self.cluster is None:
            rows = await self._pending(conn, schema, position)
            fence = await read_fence(conn) if rows and standbys else None
        else:
            async with self.cluster.connection(server) as there:
                rows = await self._pending(there, schema, position)
                fence = await read_fence(there) if rows and standbys else None
        if not rows:
            return 0
        if fence is not None:
            lagging = await self._fence.wait(standbys, fence, self.standby_wait)
            for label in lagging:
                self.metrics.held_back.labels(realm, label).inc()
            if lagging:
                log.warning(
                    "changes of realm %s after sequence %s wait for standby %s to replay %s",
                    realm, position, ", ".join(lagging), fence.lsn,
                )  # fmt: skip
                return 0
        key = realm.encode()
        await self.sink.send([(key, change_from_row(realm, r).to_json()) for r in rows])
        last = int(rows[-1][0])
        await conn.execute(
            "UPDATE tidegraph.publisher_positions SET published_seq = %s, updated_at = now()"
            " WHERE realm = %s AND published_seq < %s",
            (last, realm, last),
        )
        self.metrics.published.labels(realm).inc(len(rows))
        self.metrics.position.labels(realm).set(last)
        return len(rows)

    async def _position(self, conn: AsyncConnection[Any], realm: str) -> int:
        cur = await conn.execute(
            "SELECT published_seq FROM tidegraph.publisher_positions WHERE realm = %s", (realm,)
        )
        row = await cur.fetchone()
        if row is not None:
            return int(row[0])
        await conn.execute(
            "INSERT INTO tidegraph.publisher_positions (realm) VALUES (%s)"
            " ON CONFLICT (realm) DO NOTHING",
            (realm,),
        )
        return 0

    async def _pending(
        self, conn: AsyncConnection[Any], schema: str, position: int
    ) -> list[tuple[Any, ...]]:
        outbox = table(schema, "outbox")
        cur = await conn.execute(
            sql.SQL("SELECT {} FROM {} WHERE seq > %s ORDER BY seq, idx LIMIT %s").format(
                OUTBOX_COLUMNS, outbox
            ),
            (position, self.batch_size + 1),
        )
        rows = list(await cur.fetchall())
        if len(rows) <= self.batch_size:
            return rows
        last = int(rows[self.batch_size - 1][0])
        cut = int(rows[self.batch_size][0]) == last
        whole = [r for r in rows[: self.batch_size] if not (cut and int(r[0]) == last)]
        if whole:
            return whole
        cur = await conn.execute(  # one commit larger than a batch: send it whole
            sql.SQL("SELECT {} FROM {} WHERE seq = %s ORDER BY idx").format(OUTBOX_COLUMNS, outbox),
            (last,),
        )
        return list(await cur.fetchall())

    async def _realms(self, conn: AsyncConnection[Any]) -> dict[str, tuple[str, str]]:
        """Realm → (schema, server), by name."""
        found = {p.realm: (p.schema, p.server) for p in await placements(conn)}
        if self.only is not None:
            found = {r: s for r, s in found.items() if r in self.only}
        return dict(sorted(found.items()))

    async def _claim(self, conn: AsyncConnection[Any], realm: str) -> bool:
        cur = await conn.execute(
            "SELECT pg_try_advisory_lock(hashtext(%s))", (LOCK_PREFIX + realm,)
        )
        row = await cur.fetchone()
        if row is not None and row[0]:
            log.info("publishing changes of realm %s", realm)
            self._held.add(realm)
            self.metrics.leader.labels(realm).set(1)
            return True
        return False

    def _release(self, realm: str) -> None:
        self._held.discard(realm)
        self.metrics.leader.labels(realm).set(0)

    async def _connection(self) -> AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            for realm in list(self._held):
                self._release(realm)
            self._conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, application_name="tidegraph-publisher"
            )
        return self._conn

    async def _drop_connection(self) -> None:
        """Closing the session releases every lock it held; another replica takes over."""
        conn, self._conn = self._conn, None
        for realm in list(self._held):
            self._release(realm)
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                await conn.close()
