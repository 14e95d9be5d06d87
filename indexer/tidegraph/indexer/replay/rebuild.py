"""Rebuild a realm from the documents topic into a shadow schema, then swap it in.

The documents topic is the system of record (retention forever), so a realm can always be
rebuilt from it: after a bug fix, a vocabulary or prompt change, a new embedding model, or
a lost database. The rebuild runs while the live realm keeps serving and indexing:

1. **Shadow.** Create ``realm_<r>__shadow_<label>`` with the live realm's configuration
   (or a changed one), *without* search indexes (HNSW, full text) and foreign keys. Like
   any realm it keeps its own position; the replay claims the partition under the group
   ``tidegraph-replay:<schema>``, which fences a second replay process of the same shadow.
2. **Load.** Read the realm's partition from the beginning (:mod:`replay_log`), skipping
   other realms' records, and apply the realm's records with the live indexer's decide /
   prepare / write functions (:mod:`replay_apply`). Belief stamps come from the records'
   log-append times, so the shadow's history equals the live one. The shadow never runs
   ahead of the live realm's own position: the live indexer will apply what lies beyond
   it to the swapped-in realm, and applying a record twice would rewrite history. A realm
   deleted and created again is rebuilt from its new life only: the shadow starts where
   the realm's key stood when it was created again.
3. **Index.** Follow what arrived during the load while still without search indexes
   (every write afterwards maintains them, which costs more than the write), then add
   the foreign keys, each checked once over the loaded rows instead of a lookup per
   written row, and build the search indexes once (bulk loading). A shadow an
   interrupted replay left behind lacks both; it is never swapped in.
4. **Catch up and swap** (:mod:`swap`): follow the live position to within a couple of
   records, compare the old graph and the shadow, take the live realm's lock, apply the
   last records up to the live position, and exchange the schemas in one transaction.
   The live indexer is held only for that transaction; the change feed continues with a
   rebuild notice (``communities_stale``) and what the rebuild changed. The old schema is
   kept as ``realm_<r>__retired_<n>``.

``swap=False`` stops after step 3 with the shadow caught up to the live position and kept
under its name; ``until`` builds an audit copy ``realm_<r>__audit_<label>`` from the
records whose log-append time is at most ``until`` — the realm as the log stood then —
and is never swapped in.

A changed configuration re-extracts only what it must: the caller's pipeline reads the
extraction cache of the shadow and then of the live realm (``ModelRegistry.read_through``);
the cache key covers chunk text, context, model and prompt version, so only chunks whose
key changed cost a model call. A different embedder gives the shadow another dimension.
Embeddings have no cache of their own: a realm pinned to a model embedder is embedded
again, so its replay calls the embeddings endpoint (the hashing embedder calls nothing).

Names of shadows, audit copies and retired schemas: :mod:`replay_names`.
"""

# Long on purpose: the replay driver keeps its steps (claim, read, apply, catch up, swap) next to
# the state they share.
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import TopicPartition
from psycopg import AsyncConnection, sql
from pydantic import ValidationError

from tidegraph.indexer.decide import log_time
from tidegraph.indexer.replay.applier import Batch, EmbedderFor, Prepare, ShadowApplier
from tidegraph.indexer.replay.carry import premerge_cache, premerge_retention
from tidegraph.indexer.replay.errors import (
    ReplayApplyError,
    ReplayBusy,
    ReplayError,
    ShadowExists,
    SwapLockTimeout,
    SwapRefused,
)
from tidegraph.indexer.replay.log import PartitionReader
from tidegraph.indexer.replay.names import (
    audit_schema,
    derived_schema,
    drop_copy,
    next_label,
    replay_group,
    retired_schema,
    shadow_schema,
)
from tidegraph.indexer.replay.swap import SwapOutcome, SwapPlan, baseline, swap_in
from tidegraph.indexer.write import Backoff, JudgeFor, RecordFailed, Verdict, retry_after, verdict
from tidegraph.schemas import ConfigError, RealmConfig, realm_schema, validate_realm
from tidegraph.store import (
    Fenced,
    RealmInfo,
    classify_db_error,
    create_realm,
    drop_foreign_keys_ddl,
    ensure_control,
    foreign_keys_ddl,
    open_realm,
    positions,
    realm_exists,
    realm_positions,
    replay_lock_key,
    search_index_ddl,
)

__all__ = [
    "ReplayOptions",
    "ReplayProgress",
    "ReplayResult",
    "audit_schema",
    "drop_copy",
    "rebuild_config",
    "replay_group",
    "replay_realm",
    "retired_schema",
    "shadow_schema",
]

log = logging.getLogger("tidegraph.replay")


@dataclass(frozen=True)
class ReplayOptions:
    """What to rebuild, from where, and how."""

    realm: str
    """Realm to rebuild."""
    bootstrap: str
    """Kafka bootstrap servers."""
    pg_dsn: str
    """PostgreSQL connection string."""
    topic: str = "tidegraph.documents"
    """Documents topic."""
    swap: bool = True
    """Swap the caught-up shadow in; ``False`` keeps it under its name."""
    label: str | None = None
    """Shadow (or audit) label; the next free number when ``None``."""
    until: datetime | None = None
    """Build an audit copy of the log up to this instant (implies no swap)."""
    config: RealmConfig | None = None
    """Configuration of the rebuild; ``None`` keeps the live realm's."""
    extractor: str | None = None
    """Extractor of the rebuild (``rules`` or ``llm``), on top of the configuration."""
    embedder: str | None = None
    """Embedder id of the rebuild (``hashing:<dim>``, ``llm:<model>:<dim>``), likewise."""
    default_config: RealmConfig = field(default_factory=RealmConfig)
    """Used when neither ``config`` nor a live realm gives one (a lost database)."""
    fetch_records: int = 500
    """Records per fetch, and per write transaction at most."""
    prepare_concurrency: int = 8
    """Documents prepared at once."""
    bulk_rounds: int = 5
    """Catch-up rounds without search indexes after the load, while each covers more than
    one fetch."""
    swap_margin: int = 0
    """Follow the live position outside the lock until at most this many records remain
    (what is left, and what arrives meanwhile, is applied while the live realm is held, so
    it bounds the hold: a record costs hundreds of milliseconds in a large realm)."""
    chase_seconds: float = 30.0
    """After following the live position this long, settle for ``4 * swap_margin + 4``
    records left for the lock (records may arrive as fast as the shadow applies them)."""
    lock_timeout: float = 5.0
    """Longest wait for a lock during the swap, seconds."""
    swap_attempts: int = 3
    """Swaps tried when a lock times out (the live realm is untouched by a failed one)."""
    max_retries: int = 8
    """Transient failures retried (with growing backoff) before giving up."""
    index_memory: str = "256MB"
    """``maintenance_work_mem`` while building the search indexes."""


def rebuild_config(options: ReplayOptions, live: RealmConfig | None) -> RealmConfig:
    """The rebuild's configuration: given or live (else default), overrides on top."""
    base = options.config or live or options.default_config
    overrides = {
        k: v
        for k, v in (("extractor", options.extractor), ("embedder", options.embedder))
        if v is not None
    }
    if not overrides:
        return base
    try:
        return RealmConfig.model_validate({**base.model_dump(), **overrides})
    except ValidationError as exc:
        raise ConfigError(f"replay configuration: {exc.errors()[0]['msg']}") from None


@dataclass(frozen=True)
class ReplayProgress:
    """A progress report, sent after every write transaction and phase change."""

    phase: str
    """``loading``, ``indexing``, ``catching up``, ``swapping`` or ``done``."""
    read: int
    """Records of the partition passed so far (any realm)."""
    total: int
    """Records of the partition up to the current target."""
    realm_records: int
    """Records of the realm among those read."""
    written: int
    """Records that wrote into the shadow (applies and deletes)."""
    elapsed: float
    """Seconds since the replay started."""


@dataclass(frozen=True)
class ReplayResult:
    """What a replay built, and how long it took."""

    realm: str
    schema: str
    """Where the rebuilt graph is now: ``realm_<r>`` after a swap, else the shadow/audit."""
    built_in: str
    """The schema name it was built under."""
    swapped: bool
    retired: str | None
    """The replaced schema's new name, after a swap of an existing realm."""
    partition: int
    position: int
    """Offset the rebuilt realm reflects the log up to (exclusive)."""
    records_read: int
    realm_records: int
    written: int
    load_seconds: float
    """Load phase (bulk, no search indexes or foreign keys)."""
    load_records: int
    """Records passed during the load phase."""
    load_written: int
    """Records written during the load phase."""
    index_seconds: float
    """Adding the foreign keys and building the search indexes."""
    total_seconds: float
    swap: SwapOutcome | None = None
    """Details of the swap (hold time, rebuild commit) when one happened."""
    config_changed: bool = False
    """The rebuild's configuration differs from the live realm's (extractor, embedder,
    vocabulary, aliases or groups)."""
    follow_seconds: float = 0.0
    """Following the live position after the search indexes were built (every write now
    maintains them), before the swap."""
    baseline_seconds: float = 0.0
    """Comparing the old graph with the shadow ahead of the swap, outside the lock."""


OnProgress = Callable[[ReplayProgress], None]


async def replay_realm(
    options: ReplayOptions,
    prepare: Prepare,
    embedder_for: EmbedderFor,
    *,
    on_progress: OnProgress | None = None,
    judge_for: JudgeFor | None = None,
) -> ReplayResult:
    """Run a replay as described in the module docstring (``judge_for``: who answers the
    residue questions of a realm asking the model that the caches do not answer)."""
    return await _Replay(options, prepare, embedder_for, on_progress, judge_for).run()


class _Replay:
    def __init__(
        self,
        options: ReplayOptions,
        prepare: Prepare,
        embedder_for: EmbedderFor,
        on_progress: OnProgress | None,
        judge_for: JudgeFor | None,
    ) -> None:
        self.o = options
        self.prepare = prepare
        self.embedder_for = embedder_for
        self.judge_for = judge_for
        self.on_progress = on_progress
        self.started = time.perf_counter()
        self.live = realm_schema(validate_realm(options.realm))
        self.phase = "loading"
        self.start_offset = 0
        self.total = 0
        self.until_bound: int | None = None
        self.config_changed = False
        self._conns: list[AsyncConnection[Any]] = []
        self.reader: PartitionReader | None = None
        self.applier: ShadowApplier | None = None
        self.follow_seconds = 0.0
        self.baseline_seconds = 0.0
        self._backoff = Backoff()

    async def _connect(self) -> AsyncConnection[Any]:
        conn = await AsyncConnection.connect(self.o.pg_dsn, autocommit=True)
        self._conns.append(conn)
        return conn

    async def run(self) -> ReplayResult:
        try:
            return await self._run()
        finally:
            if self.reader is not None:
                await self.reader.stop()
            for conn in self._conns:
                await conn.close()

    async def _run(self) -> ReplayResult:
        o = self.o
        swap = o.swap and o.until is None
        info, tp, group, writer = await self._start(swap)
        applier = self.applier
        assert applier is not None
        await self._run_to(await self._fixed_bound())
        for _ in range(o.bulk_rounds):
            # What arrived during the load is cheaper to apply before the search indexes
            # exist than after (each write then maintains them): follow while it is a lot.
            before = applier.next_offset
            await self._run_to(await self._fixed_bound())
            if applier.next_offset - before <= o.fetch_records:
                break
        load_seconds = time.perf_counter() - self.started
        loaded = (applier.counters.read, applier.counters.written)
        self._report("indexing")
        index_started = time.perf_counter()
        await self._build_indexes(writer, info)
        index_seconds = time.perf_counter() - index_started
        self.phase = "catching up"
        outcome: SwapOutcome | None = None
        if swap:
            outcome = await self._swap(tp.partition, info, group)
        else:
            await self._run_to(await self._fixed_bound())
        self._report("done")
        return ReplayResult(
            realm=o.realm,
            schema=self.live if outcome else info.schema,
            built_in=info.schema,
            swapped=outcome is not None,
            retired=outcome.retired if outcome else None,
            partition=tp.partition,
            position=applier.next_offset,
            records_read=applier.counters.read,
            realm_records=applier.counters.realm_records,
            written=applier.counters.written,
            load_seconds=load_seconds,
            load_records=loaded[0],
            load_written=loaded[1],
            index_seconds=index_seconds,
            total_seconds=time.perf_counter() - self.started,
            swap=outcome,
            config_changed=self.config_changed,
            follow_seconds=self.follow_seconds,
            baseline_seconds=self.baseline_seconds,
        )

    # -- setup -------------------------------------------------------------------------

    async def _start(
        self, swap: bool
    ) -> tuple[RealmInfo, TopicPartition, str, AsyncConnection[Any]]:
        """Step 1: the replay's lock (a swapping one), the shadow, the partition reader, the
        claim and where the shadow starts; returns (shadow, partition, claim group, the
        write connection)."""
        o = self.o
        control = await self._connect()
        await ensure_control(control)
        if swap:
            cur = await control.execute(
                "SELECT pg_try_advisory_lock(hashtext(%s))", (replay_lock_key(o.realm),)
            )
            row = await cur.fetchone()
            if row is None or not row[0]:
                raise ReplayBusy(o.realm)
        info = await self._create_target(control, await self._live_info(control))
        self.reader = PartitionReader(
            o.bootstrap, o.topic, o.realm, fetch_max_records=o.fetch_records
        )
        tp = await self.reader.start()
        self.start_offset = await self.reader.log_start()
        if o.until is not None:
            self.until_bound = await self.reader.offset_after(o.until)
        group = replay_group(info.schema)
        claim, _ = await positions.claim(control, group, o.topic, tp.partition, self.start_offset)
        stands = await realm_positions.ensure(control, info.schema, o.realm, o.topic, tp.partition)
        self.start_offset = max(self.start_offset, stands)
        writer = await self._write_connection()
        self.applier = ShadowApplier(
            writer,
            info,
            claim,
            self.start_offset,
            self.prepare,
            self.embedder_for,
            concurrency=o.prepare_concurrency,
            judge=self.judge_for(info) if self.judge_for is not None else None,
        )
        log.info(
            "replaying realm %s from %s/%d into %s", o.realm, o.topic, tp.partition, info.schema
        )
        return info, tp, group, writer

    async def _live_info(self, conn: AsyncConnection[Any]) -> RealmInfo | None:
        if not await realm_exists(conn, self.live):
            return None
        return await open_realm(conn, self.o.realm)

    async def _create_target(
        self, conn: AsyncConnection[Any], live_info: RealmInfo | None
    ) -> RealmInfo:
        o = self.o
        kind = "audit" if o.until is not None else "shadow"
        label = o.label or await next_label(conn, o.realm, kind)
        schema = derived_schema(o.realm, kind, label)
        cur = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        if await cur.fetchone() is not None:
            raise ShadowExists(schema)
        cur = await conn.execute(
            "SELECT realm FROM tidegraph.realms WHERE schema_name = %s", (schema,)
        )
        if await cur.fetchone() is not None:
            raise ShadowExists(schema)
        config = rebuild_config(o, live_info.config if live_info else None)
        self.config_changed = live_info is not None and config != live_info.config
        info = await create_realm(conn, o.realm, config, schema=schema, search_indexes=False)
        await conn.execute(drop_foreign_keys_ddl(schema))
        what = f"audit copy as of {o.until.isoformat()}" if o.until else "rebuild"
        await conn.execute(
            sql.SQL("COMMENT ON SCHEMA {} IS {}").format(
                sql.Identifier(schema),
                sql.Literal(f"tidegraph: {what} of realm {o.realm} from {o.topic}"),
            )
        )
        return info

    # -- the load loop -----------------------------------------------------------------

    async def _bound(self) -> int:
        """Offset the shadow may apply up to now (exclusive)."""
        assert self.reader is not None and self.applier is not None
        if self.until_bound is not None:
            return self.until_bound
        live = await self._live_position(self.applier.conn)
        return live if live is not None else await self.reader.log_end()

    async def _fixed_bound(self) -> Callable[[], Awaitable[int]]:
        """The bound as it is now, held still: a phase that must end does not chase."""
        bound = await self._bound()

        async def fixed() -> int:
            return min(bound, self.until_bound) if self.until_bound is not None else bound

        return fixed

    async def _live_position(self, conn: AsyncConnection[Any]) -> int | None:
        """Where the live realm stands: every record of it below is settled in the live
        schema, none above (``None`` without a live realm or before it settled any)."""
        assert self.applier is not None
        if not await realm_exists(conn, self.live):
            return None
        return await realm_positions.stand(
            conn, self.live, self.o.topic, self.applier.claim.partition
        )

    async def _run_to(
        self,
        bound_of: Callable[[], Awaitable[int]],
        *,
        margin: int = 0,
        within: float | None = None,
    ) -> None:
        """Apply until at most ``margin`` records remain below the bound (four times as many
        once ``within`` seconds have passed following a moving bound: records may arrive as
        fast as they are applied), retrying transient failures from the stored position."""
        deadline = None if within is None else time.monotonic() + within
        failures = 0
        while True:
            try:
                await self._load(bound_of, margin, deadline)
                return
            except (asyncio.CancelledError, KeyboardInterrupt, ReplayError):
                raise
            except Fenced as exc:
                raise ReplayError(
                    f"realm {self.o.realm!r}: another process took over this replay ({exc})"
                ) from None
            except Exception as exc:  # noqa: BLE001 - judged by the failure policy
                judged = verdict(exc)
                if judged is Verdict.HOLD:
                    raise self._failure(exc) from exc
                cause = exc.cause if isinstance(exc, RecordFailed) else classify_db_error(exc)
                if judged is Verdict.RETRY and failures >= self.o.max_retries:
                    raise cause from exc
                failures += 1
                delay = self._backoff.delay(failures, retry_after(exc))
                log.warning("replay of %s: %s; retrying in %.1fs", self.o.realm, cause, delay)
                await asyncio.sleep(delay)
                await self._recover()

    def _failure(self, exc: Exception) -> ReplayApplyError:
        """A failure retrying cannot help: the replay gives up, naming the record."""
        assert self.applier is not None
        if isinstance(exc, RecordFailed):
            return ReplayApplyError(
                self.o.realm,
                exc.partition,
                exc.offset,
                exc.doc_key or "",
                f"{exc.error_class}: {exc.cause}",
            )
        return ReplayApplyError(
            self.o.realm,
            self.applier.claim.partition,
            self.applier.next_offset,
            "",
            f"{type(exc).__name__}: {exc}",
        )

    async def _write_connection(self) -> AsyncConnection[Any]:
        """The applier's connection: commits not waited for, generic plans
        (:mod:`replay_apply` says why)."""
        conn = await self._connect()
        await conn.execute("SET synchronous_commit = off")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        return conn

    async def _recover(self) -> None:
        """After a failed batch: fresh write connection, states re-read from the shadow."""
        assert self.applier is not None
        old = self.applier.conn
        with contextlib.suppress(Exception):
            await old.close()
        if old in self._conns:
            self._conns.remove(old)
        self.applier.conn = await self._write_connection()
        self.applier.forget()

    async def _load(
        self, bound_of: Callable[[], Awaitable[int]], margin: int, deadline: float | None
    ) -> None:
        """Fetch and plan batch n+1 (its preparation starts) while batch n is written."""
        reader, applier = self.reader, self.applier
        assert reader is not None and applier is not None
        outstanding: list[Batch] = []
        at = applier.next_offset
        try:
            while True:
                bound = await bound_of()
                self.total = max(bound - self.start_offset, 0)
                overdue = deadline is not None and time.monotonic() > deadline
                if not outstanding and bound - at <= (4 * margin + 4 if overdue else margin):
                    return
                added = False
                if at < bound:
                    fetched = await reader.fetch(at, bound)
                    msgs, reached = fetched.messages, fetched.reached
                    if self.o.until is not None:
                        late = next((m for m in msgs if log_time(m) > self.o.until), None)
                        if late is not None:
                            msgs = [m for m in msgs if m.offset < late.offset]
                            reached = self.until_bound = late.offset
                    if reached > at:
                        outstanding.append(await applier.plan(at, reached, msgs))
                        at, added = reached, True
                if len(outstanding) > 1 or (outstanding and not added):
                    await applier.write(outstanding.pop(0))
                    self._report()
        finally:
            for batch in outstanding:
                await batch.ahead.cancel()

    def _report(self, phase: str | None = None) -> None:
        if phase is not None:
            self.phase = phase
        if self.on_progress is None or self.applier is None:
            return
        c = self.applier.counters
        self.on_progress(
            ReplayProgress(
                self.phase,
                c.read,
                max(self.total, c.read),
                c.realm_records,
                c.written,
                time.perf_counter() - self.started,
            )
        )

    # -- indexes and swap --------------------------------------------------------------

    async def _build_indexes(self, conn: AsyncConnection[Any], info: RealmInfo) -> None:
        """Foreign keys (each checked once over the loaded rows), then search indexes."""
        await conn.execute(
            sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(self.o.index_memory))
        )
        async with conn.transaction():
            await conn.execute(foreign_keys_ddl(info.schema))
        await conn.execute(search_index_ddl(info.schema, info.dimension))
        await conn.execute("RESET maintenance_work_mem")

    async def _swap(self, partition: int, info: RealmInfo, group: str) -> SwapOutcome:
        o = self.o
        chase_started = time.perf_counter()
        await self._run_to(self._bound, margin=o.swap_margin, within=o.chase_seconds)
        self.follow_seconds = time.perf_counter() - chase_started
        self._report("swapping")
        conn = await self._connect()
        retired = retired_schema(o.realm, await next_label(conn, o.realm, "retired"))
        plan = SwapPlan(
            realm=o.realm,
            live=self.live,
            shadow=info.schema,
            retired=retired,
            replay_group=group,
            topic=o.topic,
            partition=partition,
            lock_timeout=o.lock_timeout,
        )
        assert self.applier is not None
        applier = self.applier

        async def catch_up(bound: int | None) -> tuple[int, int]:
            before = applier.counters.written
            if bound is None:
                assert self.reader is not None
                bound = await self.reader.log_end()
            if applier.next_offset > bound:
                raise SwapRefused(
                    f"realm {o.realm!r}: the shadow is at offset {applier.next_offset}, past "
                    f"the live position {bound}; the live group's position went backwards"
                )

            target = bound

            async def fixed() -> int:
                return target

            await self._run_to(fixed)
            return applier.next_offset, applier.counters.written - before

        base = None
        baseline_started = time.perf_counter()
        if await realm_exists(conn, self.live):
            await premerge_cache(conn, self.live, info.schema)
            await premerge_retention(conn, self.live, info.schema)
            base = await baseline(conn, self.live, info.schema)
        self.baseline_seconds = time.perf_counter() - baseline_started
        for attempt in range(1, max(1, o.swap_attempts) + 1):
            # What came in meanwhile, briefly: the baseline is cheaper to patch the closer
            # the swap follows it.
            await self._run_to(self._bound, margin=o.swap_margin, within=o.chase_seconds / 4)
            try:
                outcome = await swap_in(conn, plan, catch_up, base)
                break
            except SwapLockTimeout as exc:
                if attempt == o.swap_attempts:
                    raise
                log.warning("%s; trying again", exc)
                await asyncio.sleep(attempt)
        log.info(
            "realm %s: rebuilt schema swapped in at offset %d (held %.0f ms, %d records "
            "caught up under the lock); old schema kept as %s",
            o.realm,
            outcome.position,
            outcome.hold_seconds * 1000,
            outcome.catch_up_records,
            outcome.retired,
        )
        return outcome
