"""Moving a realm to another server while it is written and read.

PostgreSQL's logical replication copies the realm's schema — every table, its history,
change outbox, extraction cache and its own position on the documents topic — and then
streams what is written meanwhile. The switch is short and fenced:

1. ``copying`` — a publication of the schema on the source, the same tables (and search
   indexes) created on the target, a subscription there; wait until every table is
   copied and streaming.
2. ``synced`` — pause: take the realm's ``meta`` row lock on the source (every write of
   the realm takes it first, so writes wait from here) and its switch lock (what the query
   service writes, coverage telemetry, takes it shared), write a marker row and wait until
   the target has applied it (everything committed before it is there), drop the
   subscription, carry the sequences over, and fence the source copy
   (``swapped_out``: any write that reaches it later is refused and retried where the
   catalogue says). Committing the fence ends the pause for the writers, who find the
   realm again through the catalogue… An attempt whose lock or catch-up takes longer than
   a short bound (a long write transaction holds the realm, or just committed and is still
   being applied) is rolled back, so writes never wait long, and made again.
3. ``switched`` — …which now names the target. Readers move within their cache period;
   after ``grace`` seconds the source copy is dropped, or kept as an audit copy.

Every step is recorded on ``main`` (``tidegraph.realm_moves``) and checked against what
the servers hold before it runs again, so a mover that crashed anywhere is resumed by
running the move again. The realm's replay lock is held on the source for the whole move:
a replay or a deletion of the realm meanwhile is refused, and a move while a replay runs
is refused too. The change feed needs nothing: its outbox is copied with the realm and
the publisher's position (on ``main``) stays valid, so it continues with the next
sequence.
"""

# Long on purpose: one protocol — each step, the check that resumes it after a crash, and the
# bounded pause — read together, since each step's resume depends on what the others left.

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.errors import LockNotAvailable

from tidegraph.schemas import MAIN, ConfigError, TidegraphError, copy_schema
from tidegraph.store.cluster import Cluster
from tidegraph.store.ddl import realm_ddl, search_index_ddl, telemetry_ddl
from tidegraph.store.errors import RealmBusy
from tidegraph.store.locks import replay_lock_key, switch_lock_key
from tidegraph.store.realms import RealmInfo, find_realm, realm_exists, realm_server
from tidegraph.store.upgrades import add_attribute_indexes, add_name_search

COPYING, SYNCED, SWITCHED = "copying", "synced", "switched"

MOVES_DDL = sql.SQL(
    "CREATE TABLE IF NOT EXISTS tidegraph.realm_moves ("
    " realm text PRIMARY KEY, source text NOT NULL, target text NOT NULL,"
    " step text NOT NULL, keep_copy boolean NOT NULL DEFAULT false,"
    " started_at timestamptz NOT NULL DEFAULT now(),"
    " updated_at timestamptz NOT NULL DEFAULT now())"
)
"""Moves in progress, on ``main``."""

Say = Callable[[str], None]

NEAR = 0.25
"""Seconds a marker may take to reach the target before the pause starts."""
NEAR_TRIES = 40
LOCK_WAIT = 0.5
"""Seconds an attempt at the pause waits for the realm's lock (writers queue behind it)."""
CATCH_UP_BUDGET = 1.0
"""Seconds the target may take, inside the pause, to apply the commits before it."""
PAUSE_TRIES = 10


class _PauseGivenUp(Exception):
    """An attempt at the pause rolled back so that writes go on."""

    def __init__(self, why: str, waited: float) -> None:
        super().__init__(why)
        self.waited = waited


class MoveError(TidegraphError):
    """A move that cannot go on; what was done stays recorded and the realm is served
    where the catalogue says."""


@dataclass(frozen=True)
class MoveOutcome:
    realm: str
    source: str
    target: str
    pause_seconds: float
    """From the realm's lock taken on the source to the catalogue naming the target: how
    long its writes waited."""
    total_seconds: float
    kept_copy: str | None


@dataclass(frozen=True)
class _Names:
    realm: str
    schema: str

    @property
    def link(self) -> str:
        """Publication, subscription and replication slot name."""
        return f"tg_move_{self.realm}"

    def marks(self) -> sql.Identifier:
        return sql.Identifier(self.schema, "move_marks")


def _marks_ddl(schema: str) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (token text PRIMARY KEY,"
        " at timestamptz NOT NULL DEFAULT now())"
    ).format(sql.Identifier(schema, "move_marks"))


class RealmMove:
    """One move of ``realm`` to ``target`` (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        realm: str,
        target: str,
        *,
        keep_copy: bool = False,
        grace: float = 15.0,
        wait_limit: float = 60.0,
        say: Say = lambda _: None,
    ) -> None:
        cluster.servers.dsn(target)  # an unknown server fails before anything is done
        self.cluster = cluster
        self.realm = realm
        self.target = target
        self.keep_copy = keep_copy
        self.grace = grace
        self.wait_limit = wait_limit
        self.say = say

    async def run(self) -> MoveOutcome:
        started = time.monotonic()
        source, step, keep = await self._begin()
        names = _Names(self.realm, await self._schema())
        pause = 0.0
        async with self.cluster.connection(source) as src:
            await self._hold_realm(src)
            try:
                if step == SYNCED and not await self._copy_alive(src, names):
                    step = await self._restart_copy(src, names)
                if step == COPYING:
                    await self._copy(src, source, names)
                    step = await self._record(SYNCED)
                if step == SYNCED:
                    pause = await self._switch(src, source, names)
                    step = SWITCHED
            finally:
                await src.execute(
                    "SELECT pg_advisory_unlock(hashtext(%s))", (replay_lock_key(self.realm),)
                )
        kept = await self._retire(source, names, keep)
        return MoveOutcome(self.realm, source, self.target, pause, time.monotonic() - started, kept)

    # -- bookkeeping on main -------------------------------------------------------------

    async def _begin(self) -> tuple[str, str, bool]:
        """(source, step, keep a copy) of the move, recorded now or resumed."""
        async with self.cluster.connection(MAIN) as main:
            await main.execute(MOVES_DDL)
            cur = await main.execute(
                "SELECT source, target, step, keep_copy FROM tidegraph.realm_moves"
                " WHERE realm = %s",
                (self.realm,),
            )
            row = await cur.fetchone()
            if row is not None:
                source, target, step, keep = (str(row[0]), str(row[1]), str(row[2]), row[3])
                if target != self.target:
                    raise MoveError(
                        f"a move of realm {self.realm!r} to server {target!r} is under way —"
                        f" run `tidegraph realm move {self.realm} --to {target}` to finish it"
                    )
                self.say(f"resuming the move of {self.realm} from {source} ({step})")
                return source, step, bool(keep)
            placed = await realm_server(main, self.realm)
            if placed is None:
                raise ConfigError(f"realm {self.realm!r} does not exist — `tidegraph realm list`")
            source = placed
            if source == self.target:
                raise ConfigError(f"realm {self.realm!r} is on server {source!r} already")
            await main.execute(
                "INSERT INTO tidegraph.realm_moves (realm, source, target, step, keep_copy)"
                " VALUES (%s, %s, %s, %s, %s)",
                (self.realm, source, self.target, COPYING, self.keep_copy),
            )
        self.say(f"moving realm {self.realm} from server {source} to {self.target}")
        return source, COPYING, self.keep_copy

    async def _record(self, step: str) -> str:
        async with self.cluster.connection(MAIN) as main:
            await main.execute(
                "UPDATE tidegraph.realm_moves SET step = %s, updated_at = now() WHERE realm = %s",
                (step, self.realm),
            )
        self.say(f"step: {step}")
        return step

    async def _schema(self) -> str:
        async with self.cluster.connection(MAIN) as main:
            cur = await main.execute(
                "SELECT schema_name FROM tidegraph.realms WHERE realm = %s", (self.realm,)
            )
            row = await cur.fetchone()
        if row is None:
            raise MoveError(f"realm {self.realm!r} left the catalogue during its move")
        return str(row[0])

    async def _hold_realm(self, conn: AsyncConnection[Any]) -> None:
        """The realm's replay lock, for the whole move (session level)."""
        cur = await conn.execute(
            "SELECT pg_try_advisory_lock(hashtext(%s))", (replay_lock_key(self.realm),)
        )
        row = await cur.fetchone()
        if row is None or not row[0]:
            raise RealmBusy(self.realm)

    # -- step 1: copy ----------------------------------------------------------------------

    async def _copy(self, src: AsyncConnection[Any], source: str, names: _Names) -> None:
        """Subscribe the target to the source's schema (afresh unless a subscription from
        before a crash is there) and wait until every table is copied."""
        async with self.cluster.connection(self.target) as conn:
            subscribed = await _subscribed(conn, names)
        if not subscribed:
            await _unlink(src, self.cluster, self.target, names)  # leftovers of a crash
            info = await self._prepare_source(src, source, names)
            async with self.cluster.connection(self.target) as conn:
                await conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.schema))
                )
                await _create_tables(conn, info, names)
                await _same_layout(src, conn, names.schema)
                await self._subscribe(conn, source, names)
        self.say("copying: the target subscribed; waiting for every table")
        await self._until_copied(names)

    async def _until_copied(self, names: _Names, poll: float = 0.2) -> None:
        """Wait for every table's copy; a big realm copies for as long as it takes, so the
        wait limit applies to progress (rows copied, a table finishing), not to the whole
        copy."""
        seen: tuple[int, int] | None = None
        deadline = time.monotonic() + self.wait_limit
        while (now := await _copy_state(self.cluster, self.target, names))[0] != 0:
            if now != seen:
                seen, deadline = now, time.monotonic() + self.wait_limit
            elif time.monotonic() > deadline:
                raise MoveError(
                    f"the initial copy made no progress in {self.wait_limit:.0f}s"
                    f" ({now[0]} tables left); the move stays recorded — run it again to go on"
                )
            await asyncio.sleep(poll)

    async def _subscribe(self, conn: AsyncConnection[Any], source: str, names: _Names) -> None:
        dsn = self.cluster.servers.dsn(source)
        await conn.execute(
            sql.SQL(
                "CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {}"
                " WITH (copy_data = true, slot_name = {})"
            ).format(
                sql.Identifier(names.link),
                sql.Literal(dsn),
                sql.Identifier(names.link),
                sql.Literal(names.link),
            )
        )

    async def _prepare_source(
        self, src: AsyncConnection[Any], source: str, names: _Names
    ) -> RealmInfo:
        """Open (and so upgrade) the realm, give tables without a key a replica identity,
        and publish the schema."""
        cur = await src.execute("SHOW wal_level")
        level = await cur.fetchone()
        if level is None or level[0] != "logical":
            raise MoveError(
                f"server {source!r} runs with wal_level={level[0] if level else '?'}:"
                " moving a realm off it needs wal_level=logical (a restart of the server)"
            )
        info = await find_realm(src, self.realm, source)
        if info is None:
            raise MoveError(f"realm {self.realm!r} has no schema on server {source!r}")
        await src.execute(_marks_ddl(names.schema))
        await _identify_rows(src, names.schema)
        await src.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLES IN SCHEMA {}").format(
                sql.Identifier(names.link), sql.Identifier(names.schema)
            )
        )
        return info

    async def _copy_alive(self, src: AsyncConnection[Any], names: _Names) -> bool:
        """After a crash in the pause: is the subscription still there (resume the pause),
        or was it dropped before the fence committed (copy again)?"""
        if await _fenced(src, names.schema):
            return True  # fenced: only the switch is left
        async with self.cluster.connection(self.target) as conn:
            return await _subscribed(conn, names)

    async def _restart_copy(self, src: AsyncConnection[Any], names: _Names) -> str:
        """Writes went on at the source after an interrupted pause: copy from scratch."""
        self.say("the interrupted pause left no subscription: copying again")
        return await self._record(COPYING)

    # -- step 2: pause, fence, switch ----------------------------------------------------------

    async def _switch(self, src: AsyncConnection[Any], source: str, names: _Names) -> float:
        """The pause (see the module docstring); returns how long writes waited. An attempt
        that cannot take the realm's lock within :data:`LOCK_WAIT`, or whose target needs
        more than :data:`CATCH_UP_BUDGET` to apply the last commits (a long write
        transaction just committed), is rolled back — writes go on — and made again after
        the stream is followed once more; the last of :data:`PAUSE_TRIES` waits as long
        as it takes."""
        fenced = await _fenced(src, names.schema)
        waited = 0.0
        for attempt in range(1, PAUSE_TRIES + 1):
            if not fenced:
                await self._near(src, names)
            last = attempt == PAUSE_TRIES
            try:
                pause, laps = await self._pause(src, source, names, fenced, bounded=not last)
            except _PauseGivenUp as exc:
                waited += exc.waited
                self.say(f"pause attempt {attempt} given up after {exc.waited:.2f}s ({exc})")
                continue
            await _unpublish(src, names)
            tried = f"; {attempt - 1} attempt(s) given up, {waited:.2f}s" if attempt > 1 else ""
            self.say(f"step: {SWITCHED} (writes waited {pause:.2f}s: {laps}{tried})")
            return pause
        raise AssertionError("the last attempt is unbounded")  # pragma: no cover

    async def _pause(
        self, src: AsyncConnection[Any], source: str, names: _Names, fenced: bool, *, bounded: bool
    ) -> tuple[float, str]:
        """One attempt at the pause: lock, catch up, fence, switch."""
        steps: dict[str, float] = {}
        async with self.cluster.connection(source) as guard:
            self.say("pausing the realm's writes")
            paused = last = time.monotonic()

            def lap(name: str) -> None:
                nonlocal last
                now = time.monotonic()
                steps[name] = now - last
                last = now

            try:
                async with guard.transaction():
                    if bounded:
                        await guard.execute(
                            sql.SQL("SET LOCAL lock_timeout = {}").format(
                                sql.Literal(f"{int(LOCK_WAIT * 1000)}ms")
                            )
                        )
                    await guard.execute(
                        sql.SQL("SELECT swapped_out FROM {} FOR UPDATE").format(
                            sql.Identifier(names.schema, "meta")
                        )
                    )
                    await guard.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))",
                        (switch_lock_key(self.realm),),
                    )
                    lap("lock")
                    if not fenced:
                        budget = CATCH_UP_BUDGET if bounded else None
                        if not await self._catch_up(src, names, budget):
                            raise _PauseGivenUp(
                                "the target applies a long transaction", time.monotonic() - paused
                            )
                        lap("catch-up")
                        await _unsubscribe(self.cluster, self.target, names)
                        await _carry_sequences(src, self.cluster, self.target, names.schema)
                        lap("unsubscribe")
                        await guard.execute(
                            sql.SQL("UPDATE {} SET swapped_out = true").format(
                                sql.Identifier(names.schema, "meta")
                            )
                        )
            except LockNotAvailable:
                raise _PauseGivenUp(
                    "a write transaction holds the realm", time.monotonic() - paused
                ) from None
            async with self.cluster.connection(MAIN) as main, main.transaction():
                await main.execute(
                    "UPDATE tidegraph.realms SET server = %s WHERE realm = %s",
                    (self.target, self.realm),
                )
                await main.execute(
                    "UPDATE tidegraph.realm_moves SET step = %s, updated_at = now()"
                    " WHERE realm = %s",
                    (SWITCHED, self.realm),
                )
            lap("fence and switch")
            pause = time.monotonic() - paused
        return pause, ", ".join(f"{k} {v:.2f}s" for k, v in steps.items())

    async def _near(self, src: AsyncConnection[Any], names: _Names) -> None:
        """Follow the stream until the target is close behind (a marker comes through
        quickly), so the pause waits for little: under steady writes, until a round trip
        takes under :data:`NEAR` seconds (at most :data:`NEAR_TRIES` rounds)."""
        for _ in range(NEAR_TRIES):
            started = time.monotonic()
            await self._catch_up(src, names)
            if time.monotonic() - started < NEAR:
                return

    async def _catch_up(
        self, src: AsyncConnection[Any], names: _Names, budget: float | None = None
    ) -> bool:
        """Write a marker on the source and wait until the target has applied it; False
        when ``budget`` seconds pass first."""
        token = uuid.uuid4().hex
        await src.execute(
            sql.SQL("INSERT INTO {} (token) VALUES (%s)").format(names.marks()), (token,)
        )

        async def arrived() -> bool:
            async with self.cluster.connection(self.target) as conn:
                cur = await conn.execute(
                    sql.SQL("SELECT 1 FROM {} WHERE token = %s").format(names.marks()), (token,)
                )
                return await cur.fetchone() is not None

        if budget is None:
            await self._until(arrived, "the target to apply the last writes", poll=0.005)
            return True
        deadline = time.monotonic() + budget
        while not await arrived():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    # -- step 3: retire the source copy --------------------------------------------------------

    async def _retire(self, source: str, names: _Names, keep: bool) -> str | None:
        """After ``grace`` (readers' cache period), drop the source copy or keep it as an
        audit copy; the move is then over."""
        async with self.cluster.connection(MAIN) as main:
            cur = await main.execute(
                "SELECT extract(epoch FROM now() - updated_at) FROM tidegraph.realm_moves"
                " WHERE realm = %s",
                (self.realm,),
            )
            row = await cur.fetchone()
        waited = float(row[0]) if row else self.grace
        if waited < self.grace:
            await asyncio.sleep(self.grace - waited)
        kept = None
        async with self.cluster.connection(source) as conn:
            await _unpublish(conn, names)  # left by a mover that stopped after the switch
            if await realm_exists(conn, names.schema):
                if keep:
                    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
                    kept = copy_schema(self.realm, f"audit_moved_{stamp}")
                    await conn.execute(
                        sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
                            sql.Identifier(names.schema), sql.Identifier(kept)
                        )
                    )
                else:
                    await conn.execute(
                        sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(names.schema))
                    )
        async with self.cluster.connection(MAIN) as main:
            await main.execute("DELETE FROM tidegraph.realm_moves WHERE realm = %s", (self.realm,))
        self.say("the source copy is " + (f"kept as {kept}" if kept else "dropped"))
        return kept

    async def _until(self, done: Callable[[], Any], what: str, poll: float = 0.2) -> None:
        deadline = time.monotonic() + self.wait_limit
        while not await done():
            if time.monotonic() > deadline:
                raise MoveError(
                    f"waited {self.wait_limit:.0f}s for {what}; the move stays recorded —"
                    f" run it again to go on"
                )
            await asyncio.sleep(poll)


async def _create_tables(conn: AsyncConnection[Any], info: RealmInfo, names: _Names) -> None:
    """The realm's tables and indexes on the target, empty: the copy fills them, the meta
    row included."""
    async with conn.transaction():
        await conn.execute(realm_ddl(names.schema, info.dimension))
        await conn.execute(search_index_ddl(names.schema, info.dimension))
        await conn.execute(telemetry_ddl(names.schema))
        await conn.execute(_marks_ddl(names.schema))
    await add_name_search(conn, names.schema)
    await add_attribute_indexes(conn, names.schema)


async def _columns(conn: AsyncConnection[Any], schema: str) -> dict[tuple[str, str], str]:
    cur = await conn.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped",
        (schema,),
    )
    return {(str(t), str(c)): str(ty) for t, c, ty in await cur.fetchall()}


async def _same_layout(src: AsyncConnection[Any], dst: AsyncConnection[Any], schema: str) -> None:
    """Refuse a copy whose tables differ (a source of a newer or older layout)."""
    here = await _columns(src, schema)
    there = await _columns(dst, schema)
    missing = sorted(f"{t}.{c} {ty}" for (t, c), ty in here.items() if there.get((t, c)) != ty)
    if missing:
        raise MoveError(
            "the target's tables differ from the source's (" + ", ".join(missing[:5]) + "):"
            " run the same tidegraph version against both servers"
        )


async def _identify_rows(conn: AsyncConnection[Any], schema: str) -> None:
    """Tables without a primary key replicate updates and deletes by their whole row."""
    cur = await conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind = 'r' AND c.relreplident = 'd'"
        " AND NOT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)",
        (schema,),
    )
    for (table,) in await cur.fetchall():
        await conn.execute(
            sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(sql.Identifier(schema, table))
        )


async def _copy_state(cluster: Cluster, target: str, names: _Names) -> tuple[int, int]:
    """Tables of the subscription not yet copied and streaming (-1: none listed yet), and
    the rows the copies under way have written so far."""
    async with cluster.connection(target) as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE r.srsubstate <> 'r'), count(*)"
            " FROM pg_subscription s JOIN pg_subscription_rel r ON r.srsubid = s.oid"
            " WHERE s.subname = %s",
            (names.link,),
        )
        row = await cur.fetchone()
        cur = await conn.execute(
            "SELECT coalesce(sum(tuples_processed), 0) FROM pg_stat_progress_copy"
            " WHERE datid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        rows = await cur.fetchone()
    left = int(row[0]) if row is not None and int(row[1]) > 0 else -1
    return left, int(rows[0]) if rows else 0


async def _subscribed(conn: AsyncConnection[Any], names: _Names) -> bool:
    cur = await conn.execute("SELECT 1 FROM pg_subscription WHERE subname = %s", (names.link,))
    return await cur.fetchone() is not None


async def _fenced(conn: AsyncConnection[Any], schema: str) -> bool:
    if not await realm_exists(conn, schema):
        return False
    cur = await conn.execute(
        sql.SQL("SELECT swapped_out FROM {}").format(sql.Identifier(schema, "meta"))
    )
    row = await cur.fetchone()
    return bool(row and row[0])


async def _unlink(src: AsyncConnection[Any], cluster: Cluster, target: str, names: _Names) -> None:
    """Drop the subscription, its slot and the publication (each only if there)."""
    await _unsubscribe(cluster, target, names)
    await _unpublish(src, names)


async def _unsubscribe(cluster: Cluster, target: str, names: _Names) -> None:
    """Stop and drop the subscription on the target, its slot left to :func:`_unpublish`
    (dropping it here would wait for the source's sender to let it go, inside the pause).
    Dropping a subscription stops its workers first: nothing is applied after."""
    async with cluster.connection(target) as conn:
        if await _subscribed(conn, names):
            sub = sql.Identifier(names.link)
            await conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(sub))
            await conn.execute(sql.SQL("ALTER SUBSCRIPTION {} SET (slot_name = NONE)").format(sub))
            await conn.execute(sql.SQL("DROP SUBSCRIPTION {}").format(sub))


async def _unpublish(src: AsyncConnection[Any], names: _Names) -> None:
    """Drop the replication slot (once its sender let it go) and the publication."""
    for _ in range(500):
        cur = await src.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (names.link,)
        )
        row = await cur.fetchone()
        if row is None:
            break
        if not row[0]:
            await src.execute("SELECT pg_drop_replication_slot(%s)", (names.link,))
            break
        await asyncio.sleep(0.01)
    await src.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(names.link)))


async def _carry_sequences(
    src: AsyncConnection[Any], cluster: Cluster, target: str, schema: str
) -> None:
    """Sequences are not replicated: give the target's the source's values."""
    cur = await src.execute(
        "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = %s", (schema,)
    )
    values = [(str(n), v) for n, v in await cur.fetchall()]
    async with cluster.connection(target) as conn:
        for name, value in values:
            if value is not None:
                await conn.execute(
                    "SELECT setval(%s, %s)", (sql.Identifier(schema, name).as_string(conn), value)
                )
