"""What the indexer does about a run that failed (the policy is ``write.failures``).

* retriable (database, model endpoint) → the partition pauses, seeks back to the failed
  record and retries after a bounded, growing backoff honouring ``Retry-After``;
* a server other than ``main`` does not answer → only the realms it holds wait, each at
  its record, and are tried again after the same backoff, while the partition's other
  realms go on (``tidegraph status`` names the server);
* a replay swapped the realm in, or another reader settled the records first → decide
  again at once, from what the realm now holds;
* anything else → the record's realm is held at the record (fail closed, never skipped):
  its later records wait while the partition's other realms go on; it is tried again after
  the longest backoff, and ``tidegraph status`` says why it waits (``tidegraph.indexer_holds``);
* losing the partition (rebalance, fencing) → stop at once; the new owner continues.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition

from tidegraph.indexer.consumer import metrics
from tidegraph.indexer.consumer.partition import Partition
from tidegraph.indexer.write import Backoff, RecordFailed, Verdict, retry_after, verdict
from tidegraph.schemas import MAIN, TidegraphError
from tidegraph.store import (
    Cluster,
    DatabaseUnavailable,
    ServerUnavailable,
    classify_db_error,
    holds,
)

log = logging.getLogger("tidegraph.indexer")


@dataclass
class FailurePolicy:
    """Applies a verdict to the partition a run failed on."""

    consumer: AIOKafkaConsumer
    cluster: Cluster
    backoff: Backoff
    forget: Callable[[], None]
    """Drop what the indexer remembers of realms (their state is read again)."""
    lose: Callable[[TopicPartition], None]
    """Give up a partition another consumer owns now."""

    async def failed(
        self,
        tp: TopicPartition,
        part: Partition,
        offset: int,
        key: str,
        exc: BaseException,
        *,
        single: bool,
        server: str = MAIN,
        firsts: dict[str, int] | None = None,
    ) -> bool:
        """Apply the failure policy to ``exc``, raised by the record at ``offset`` filed
        under ``key`` (``single``) or by a run of records starting there, written on
        ``server`` (``firsts``: each key of the run → its first offset); True when the
        partition stops here (paused or lost), False when only the record's realm (or the
        server's realms) wait and the others go on."""
        judged = verdict(exc)
        failed = exc if isinstance(exc, RecordFailed) else None
        cause = failed.cause if failed else classify_db_error(exc)
        if isinstance(cause, ServerUnavailable):
            server = cause.server
        if judged is Verdict.RETRY and server != MAIN and isinstance(cause, DatabaseUnavailable):
            await self.server_down(tp, part, server, firsts or {key: offset}, cause)
            return False
        gone = _schema_gone(failed.cause if failed else exc)
        if judged is Verdict.HOLD and (gone or not single):
            # Not one record's: the partition waits (the longest, unless the realm's schema
            # was dropped under us — `realm delete` — and is created again on the retry).
            judged = Verdict.RETRY
        self.forget()
        where = f"{tp.topic}/{tp.partition} offset {offset} (realm {key})"
        if judged is Verdict.LOST:
            log.warning("%s: %s", where, cause)
            self.lose(tp)
            return True
        if judged is Verdict.HOLD:
            await self._hold(tp, part, key, offset, failed, cause, where)
            return False
        if judged is Verdict.RETRY_NOW:
            delay = 0.0  # the realm changed under us: decide again against it at once
        elif verdict(exc) is Verdict.HOLD and not gone:
            delay = self.backoff.longest
        else:
            part.failures += 1
            delay = self.backoff.delay(part.failures, retry_after(exc))
        log.log(
            logging.INFO if judged is Verdict.RETRY_NOW else logging.WARNING,
            "%s: %s: %s; partition paused, retrying in %.1fs",
            where,
            type(cause).__name__,
            cause,
            delay,
        )
        metrics.TRANSIENT_FAILURES.labels(type(cause).__name__).inc()
        if judged is Verdict.RETRY:
            await self.note(tp, part, key, "paused", offset, failed, cause, delay)
        part.stands.forget()  # read every realm's position again when it resumes
        self.consumer.pause(tp)
        self.seek(tp, part, offset)
        part.resume_at = time.monotonic() + delay
        part.paused_for = f"{type(cause).__name__}: {cause}"
        return True

    async def server_down(
        self,
        tp: TopicPartition,
        part: Partition,
        server: str,
        firsts: dict[str, int],
        cause: BaseException,
    ) -> None:
        """The realms ``firsts`` (realm → the offset it waits at) live on ``server``, which
        does not answer: they wait, the partition goes on, and they are tried again after
        the backoff (growing while the server stays away)."""
        self.forget()
        part.stands.forget()
        failures = part.server_failures.get(server, 0) + 1
        part.server_failures[server] = failures
        delay = self.backoff.delay(failures, None)
        retry = time.monotonic() + delay
        part.retry_held_at = min(part.retry_held_at or retry, retry)
        for key, offset in sorted(firsts.items()):
            part.held[key] = min(offset, part.held.get(key, offset))
            await self.note(tp, part, key, "paused", offset, None, cause, delay)
        log.warning(
            "%s/%d: %s; its realms wait (%s), the others go on; trying again in %.1fs",
            tp.topic,
            tp.partition,
            cause,
            ", ".join(f"{k} at offset {o}" for k, o in sorted(firsts.items())),
            delay,
        )
        metrics.TRANSIENT_FAILURES.labels(type(cause).__name__).inc()

    async def _hold(
        self,
        tp: TopicPartition,
        part: Partition,
        key: str,
        offset: int,
        failed: RecordFailed | None,
        cause: BaseException,
        where: str,
    ) -> None:
        part.held[key] = offset
        if part.retry_held_at is None:
            part.retry_held_at = time.monotonic() + self.backoff.longest
        first = key not in part.waiting
        log.log(
            logging.ERROR if first else logging.WARNING,
            "%s: realm held at this record, other realms go on; %s: %s; trying it again in %.1fs",
            where,
            type(cause).__name__,
            cause,
            self.backoff.longest,
            exc_info=cause if first and not isinstance(cause, TidegraphError) else None,
        )
        metrics.HELD_FAILURES.labels(key, type(cause).__name__).inc()
        await self.note(tp, part, key, "held", offset, failed, cause, self.backoff.longest)

    def seek(self, tp: TopicPartition, part: Partition, offset: int) -> None:
        self.consumer.seek(tp, offset)
        part.fetch_from = offset

    async def note(
        self,
        tp: TopicPartition,
        part: Partition,
        realm: str,
        kind: str,
        offset: int,
        failed: RecordFailed | None,
        cause: BaseException,
        retry_in: float,
    ) -> None:
        """Say in ``tidegraph.indexer_holds`` why ``realm`` waits (best effort: the
        database may be what failed)."""
        try:
            async with self.cluster.connection(MAIN, wait=2) as conn:
                await holds.put(
                    conn,
                    part.claim.group_id,
                    tp.topic,
                    tp.partition,
                    realm,
                    kind=kind,
                    offset=offset,
                    doc_key=failed.doc_key if failed else None,
                    error_class=type(cause).__name__,
                    error=str(cause),
                    retry_in=retry_in,
                )
            part.waiting.add(realm)
        except Exception as exc:  # noqa: BLE001 - bookkeeping never stops the indexer
            log.debug("could not record why realm %s waits: %s", realm, exc)

    async def cleared(
        self, tp: TopicPartition, part: Partition, keys: set[str], offset: int
    ) -> None:
        """Forget why the realms ``keys`` waited: their records are settled now."""
        waited = sorted(keys & part.waiting)
        if not waited:
            return
        async with self.cluster.connection(MAIN) as conn:
            for realm in waited:
                await holds.clear(conn, part.claim.group_id, tp.topic, tp.partition, realm)
        for realm in waited:
            part.waiting.discard(realm)
            log.info(
                "%s/%d: realm %s goes on: its record at offset %d is settled",
                tp.topic,
                tp.partition,
                realm,
                offset,
            )


def _schema_gone(cause: BaseException) -> bool:
    """A realm's tables or schema missing: deleted while cached here (`realm delete`)."""
    return isinstance(cause, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName)
