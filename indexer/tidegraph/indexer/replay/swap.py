"""Swapping a caught-up shadow in for the live realm: one transaction, the realm held briefly.

Steps, all in one PostgreSQL transaction on the swap's own connection:

1. take the live realm's lock — the ``meta`` row, ``FOR UPDATE`` — which is the lock every
   write of the realm takes first (``writer.begin``), so from here on no record of the
   realm is applied to the old schema; the hold is timed from this step;
2. read the live realm's own position on its partition: every record the live realm
   reflects lies below it, because the position commits with the graph (and every settle
   of the realm takes the lock held in step 1 first);
3. let the replay apply the shadow up to exactly that position (on its own connection);
4. carry over what is not in the log (:mod:`~tidegraph.indexer.replay.carry`): the
   retention state (:func:`carry_retention`), the archived flags of the old realm's
   entities and its coverage telemetry, mapped by entity id; and its community builds
   (:func:`carry_communities`);
5. work out what the rebuild changed relative to the old graph (:mod:`diff`, by names):
   a comparison made before the lock (:func:`baseline`), with the objects either side
   changed since — the change feeds name them — compared again through the indexes;
6. hand the old realm's change feed and model caches (extraction results, contradiction
   answers) to the shadow: the tables move (``ALTER TABLE … SET SCHEMA``, no copy), the
   shadow's cached answers are merged into the moved caches first, the shadow's own outbox
   (the history of building it) is dropped;
7. append one commit to the moved outbox under the next sequence number after the old
   head: ``communities_stale`` first (its payload carries a ``rebuild`` object), then the
   changes of step 5 in feed form; the shadow's ``meta.seq`` continues from there;
8. mark the old ``meta`` swapped out, rename the old schema to its retired name and the
   shadow to ``realm_<realm>``; give the retired schema empty ``outbox`` and cache
   tables so it stays a complete realm for inspection;
9. drop the replay's claim, record the realm in ``tidegraph.realms``; commit. The
   shadow's own position, equal to the live one, is renamed with it: readers of the log
   go on from there.

Why the feed stays gap-free (DESIGN invariant 7): the outbox a reader or the publisher pages
through is the same table before and after, and the rebuild commit becomes visible
atomically at ``head + 1``. ``publisher_positions.published_seq`` therefore stays valid and
is not touched. A realm that had no live schema (a lost database) gets a publisher position
just below the rebuild notice, so the rebuilt history is not published a second time (its
consumers saw the original) but the notice is.

What a feed consumer sees is that one commit, ``seq = head + 1``, stamped with the later of
the two sides' latest belief instants — the last record's, or the last community build's —
and never the swap's clock: a record applied after the swap is then stamped as a rebuild of
the whole log stamps it, so the realm's history stays what the log makes it (DESIGN
invariant 6):

* ``communities_stale`` at index 0 — the rebuild notice, under the kind consumers already
  rebuild their own derived views on. The old realm's community builds are carried over
  (:func:`carry_communities`) when the embedder is the same; under another they are stale
  in the plainest sense. Its outbox payload holds ``rebuild``: the retired schema, the log
  position the rebuild reflects and the number of differences (``GraphChange`` carries it
  as its ``rebuild`` field); on the changes topic the notice is a ``communities_stale``
  heading a commit that names no document first (a writer's commit always starts with
  its document's change);
* then, for every object whose feed-visible state differs: ``document_indexed`` /
  ``_replaced`` / ``_failed`` / ``_deleted``; ``entity_added`` / ``_dormant`` /
  ``_revived``; ``relation_added`` / ``_superseded`` / ``_retracted`` / ``_restored`` —
  exactly the kinds the writer would have emitted moving the old state to the new one.
  A consumer that applied the old feed and applies this commit holds the rebuilt graph.
  Changed descriptions, weights or periods have no change kind and are not announced.

Row ids derive from log offsets (``write.ids``), so a rebuild of the same log under the
same configuration gives each entity and relation the id it had; under another
configuration (or for a realm numbered before ids came from the log) an id seen before
the notice may not resolve after it, or name another object (names do resolve).

Retention state is not in the log, so step 4 carries it: an archived entity of the old
realm is archived in the rebuilt one (same ``archived_since``) when the rebuilt realm has
an entity with the same id, space and name; coverage telemetry rows are copied with their
ids and instants, each keeping the entity ids that so resolve when it is copied (a row
left with none is dropped) and no community ids (communities are rebuilt with new ids, so
their counts restart). Most of it is carried ahead of the lock
(:func:`premerge_retention`); the swap carries what changed since.
Neither has a change kind of its own here: archival is carried, not changed, so the
rebuild commit announces nothing for it. An entity the log names again after its
archival was restored by that write in the old realm already (``write.entities``).

A live indexer blocked on the ``meta`` row at step 1 wakes up after the commit, sees
``swapped_out`` on the row it was waiting for, rolls back and retries (``RealmSwapped`` is
retriable); the retry resolves ``realm_<realm>`` afresh, i.e. to the rebuilt schema. Reads
never block: renaming a schema takes no table lock; moving the outbox waits only for the
reads of it in flight (bounded by ``lock_timeout``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from tidegraph.indexer.replay.carry import (
    CACHES,
    carry_communities,
    carry_retention,
    merge_cache,
    qualified,
)
from tidegraph.indexer.replay.diff import (
    KINDS,
    Difference,
    changed_since,
    diff_schemas,
    feed_changes,
    merge_keys,
    patch,
)
from tidegraph.indexer.replay.errors import SwapLockTimeout, SwapRefused
from tidegraph.store import (
    contradiction_answers_ddl,
    lock_realm_schema,
    positions,
    realm_exists,
    realm_positions,
)


@dataclass(frozen=True)
class SwapPlan:
    """What to swap."""

    realm: str
    live: str
    """The live schema, ``realm_<realm>``."""
    shadow: str
    """The caught-up shadow."""
    retired: str
    """Name the live schema is given."""
    replay_group: str
    """The replay's claim, dropped at the swap."""
    topic: str
    partition: int
    lock_timeout: float = 5.0
    """Longest wait for a lock inside the swap, seconds."""


@dataclass(frozen=True)
class SwapOutcome:
    """What the swap did."""

    retired: str | None
    """Retired schema (``None`` when there was no live realm)."""
    position: int
    """Offset both realms had reached: the live indexer continues from here."""
    rebuild_seq: int
    """Sequence number of the rebuild commit in the change feed."""
    changes: int
    """Changes in that commit (the notice included)."""
    hold_seconds: float
    """From taking the live realm's lock to commit."""
    catch_up_records: int
    """Records applied to the shadow while the realm was held."""
    catch_up_seconds: float
    """Part of the hold spent applying them."""
    diff_seconds: float
    """Part of the hold spent working out what the rebuild changed."""
    committed_at: datetime
    """Database clock just before the commit (when the rebuilt realm became live)."""
    archived_carried: int = 0
    """Archived entities the rebuilt realm holds, carried from the old one."""
    retrievals_carried: int = 0
    """Coverage telemetry rows the rebuilt realm holds, carried from the old one."""
    communities_carried: int = 0
    """Communities (of every build the old realm kept) carried into the rebuilt realm."""


@dataclass(frozen=True)
class Baseline:
    """What the rebuild changed, worked out before the lock (a full comparison is too slow
    to run while the live realm is held)."""

    differences: list[Difference]
    """Old graph against shadow, both read in one snapshot."""
    since: datetime
    """The earlier of the two sides' latest belief instants in that snapshot: whatever
    either side writes afterwards is stamped at or after it."""


async def baseline(conn: AsyncConnection[Any], live: str, shadow: str) -> Baseline | None:
    """Compare the old graph and the shadow in one snapshot; ``None`` when either is empty."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        await conn.execute("SET LOCAL work_mem = '64MB'")
        stamps: list[datetime] = []
        for schema in (live, shadow):
            cur = await conn.execute(
                sql.SQL("SELECT last_write_at FROM {}").format(qualified(schema, "meta"))
            )
            row = await cur.fetchone()
            if row is None or row[0] is None:
                return None
            stamps.append(row[0])
        differences = await diff_schemas(conn, live, shadow, kinds=KINDS)
    return Baseline(differences, min(stamps))


async def rebuild_differences(
    conn: AsyncConnection[Any], live: str, shadow: str, base: Baseline | None
) -> list[Difference]:
    """The old graph against the shadow now: the baseline, with every object either side
    changed since compared again (by key, through the indexes), else a full comparison."""
    if base is None:
        return await diff_schemas(conn, live, shadow, kinds=KINDS)
    dirty = merge_keys(
        await changed_since(conn, live, base.since), await changed_since(conn, shadow, base.since)
    )
    fresh = await diff_schemas(conn, live, shadow, kinds=KINDS, keys=dirty)
    return patch(base.differences, dirty, fresh)


CatchUp = Callable[[int | None], Awaitable[tuple[int, int]]]
"""``catch_up(bound)`` → (shadow position, records applied): apply the shadow up to
``bound`` (``None``: the end of the log) and return where it stands."""


async def swap_in(
    conn: AsyncConnection[Any], plan: SwapPlan, catch_up: CatchUp, base: Baseline | None = None
) -> SwapOutcome:
    """Run the swap transaction (module docstring); raise :class:`SwapRefused` to abort.

    ``base`` (see :func:`baseline`) keeps step 5 short: only what changed since is compared.
    """
    try:
        async with conn.transaction():
            return await _swap(conn, plan, catch_up, base)
    except psycopg.errors.LockNotAvailable as exc:
        raise SwapLockTimeout(
            f"realm {plan.realm!r}: a lock needed for the swap was not granted within "
            f"{plan.lock_timeout:g}s ({exc.diag.message_primary}); nothing was changed"
        ) from None


@dataclass
class _Held:
    """The live realm as the swap found it under its lock (step 1)."""

    exists: bool
    seq: int = 0
    last: datetime | None = None
    started: float = 0.0
    """When the hold began (``time.perf_counter``)."""


async def _swap(
    conn: AsyncConnection[Any], plan: SwapPlan, catch_up: CatchUp, base: Baseline | None
) -> SwapOutcome:
    """The steps of the module docstring, in order, in the caller's transaction."""
    held = await _hold(conn, plan)
    live_position = (
        await realm_positions.stand(conn, plan.live, plan.topic, plan.partition)
        if held.exists
        else None
    )
    caught_from = time.perf_counter()
    shadow_position, caught = await catch_up(live_position)
    catch_up_seconds = time.perf_counter() - caught_from
    if live_position is not None and shadow_position != live_position:
        raise SwapRefused(
            f"realm {plan.realm!r}: the shadow stands at offset {shadow_position} but the "
            f"live realm at {live_position}; refusing to swap"
        )
    carried = await carry_retention(conn, plan.live, plan.shadow) if held.exists else (0, 0)
    communities = await carry_communities(conn, plan.live, plan.shadow) if held.exists else 0
    diff_from = time.perf_counter()
    changes = (
        feed_changes(await rebuild_differences(conn, plan.live, plan.shadow, base))
        if held.exists
        else []
    )
    diff_seconds = time.perf_counter() - diff_from
    if held.exists:
        await _hand_over(conn, plan)
    seq, entries = await _announce(conn, plan, held, shadow_position, changes)
    await _rename(conn, plan, held, shadow_position, seq)
    cur = await conn.execute("SELECT clock_timestamp()")
    clock = await cur.fetchone()
    assert clock is not None
    return SwapOutcome(
        plan.retired if held.exists else None,
        shadow_position,
        seq,
        entries,
        time.perf_counter() - held.started,
        caught,
        catch_up_seconds,
        diff_seconds,
        clock[0],
        *carried,
        communities,
    )


async def _hold(conn: AsyncConnection[Any], plan: SwapPlan) -> _Held:
    """Step 1: the live realm's lock, and what its ``meta`` row says."""
    await conn.execute(
        sql.SQL("SET LOCAL lock_timeout = {}").format(
            sql.Literal(f"{int(plan.lock_timeout * 1000)}ms")
        )
    )
    await lock_realm_schema(conn, plan.live)
    if not await realm_exists(conn, plan.live):
        return _Held(False, started=time.perf_counter())
    cur = await conn.execute(
        sql.SQL("SELECT seq, last_write_at, swapped_out FROM {} FOR UPDATE").format(
            qualified(plan.live, "meta")
        )
    )
    row = await cur.fetchone()
    started = time.perf_counter()
    if row is None or row[2]:
        raise SwapRefused(
            f"realm {plan.realm!r}: {plan.live}.meta is missing or already swapped out; "
            "another replay replaced the realm meanwhile"
        )
    return _Held(True, int(row[0]), row[1], started)


async def _announce(
    conn: AsyncConnection[Any],
    plan: SwapPlan,
    held: _Held,
    position: int,
    changes: list[tuple[str, str, dict[str, Any]]],
) -> tuple[int, int]:
    """Step 7: the rebuild commit on the feed, and the shadow's ``meta`` continuing from
    it; returns its sequence number and how many changes it holds."""
    cur = await conn.execute(
        sql.SQL("SELECT seq, last_write_at FROM {}").format(qualified(plan.shadow, "meta"))
    )
    shadow_row = await cur.fetchone()
    assert shadow_row is not None
    # The feed continues the old head; with no old realm, the shadow's own history is the
    # feed (nothing was published from it) and the notice follows it.
    seq = (held.seq if held.exists else int(shadow_row[0])) + 1
    belief = _latest(held.last, shadow_row[1])
    notice = {
        "rebuild": {
            "retired_schema": plan.retired if held.exists else None,
            "log_position": {"topic": plan.topic, "partition": plan.partition, "offset": position},
            "differences": len(changes),
        }
    }
    entries = [("communities_stale", "default", notice), *changes]
    await conn.execute(
        sql.SQL(
            "INSERT INTO {} (seq, idx, kind, space, belief_time, payload)"
            " SELECT %s, i - 1, k, s, coalesce(%s, now()), p"
            " FROM unnest(%s::text[], %s::text[], %s::jsonb[]) WITH ORDINALITY AS u(k, s, p, i)"
        ).format(qualified(plan.shadow, "outbox")),
        (
            seq,
            belief,
            [e[0] for e in entries],
            [e[1] for e in entries],
            [Jsonb(e[2]) for e in entries],
        ),
    )
    await conn.execute(
        sql.SQL("UPDATE {} SET seq = %s, last_write_at = %s, swapped_out = false").format(
            qualified(plan.shadow, "meta")
        ),
        (seq, belief),
    )
    return seq, len(entries)


async def _rename(
    conn: AsyncConnection[Any], plan: SwapPlan, held: _Held, position: int, seq: int
) -> None:
    """Steps 8 and 9: the old schema retired, the shadow live, the catalogue and claims."""
    if held.exists:
        await conn.execute(
            sql.SQL("UPDATE {} SET swapped_out = true").format(qualified(plan.live, "meta"))
        )
        await conn.execute(
            sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
                sql.Identifier(plan.live), sql.Identifier(plan.retired)
            )
        )
    await conn.execute(
        sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
            sql.Identifier(plan.shadow), sql.Identifier(plan.live)
        )
    )
    if held.exists:
        for table in ("outbox", *CACHES):
            await conn.execute(
                sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                    qualified(plan.retired, table), qualified(plan.live, table)
                )
            )
        await conn.execute(
            sql.SQL("COMMENT ON SCHEMA {} IS {}").format(
                sql.Identifier(plan.retired),
                sql.Literal(
                    f"tidegraph: realm {plan.realm} before the rebuild swapped in at "
                    f"offset {position} of {plan.topic}/{plan.partition}; its change "
                    f"feed and extraction cache moved on with {plan.live} (feed seq {seq})"
                ),
            )
        )
    await positions.drop(conn, plan.replay_group)
    await conn.execute(
        "INSERT INTO tidegraph.realms (realm, schema_name) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (plan.realm, plan.live),
    )
    if not held.exists:
        await conn.execute(
            "INSERT INTO tidegraph.publisher_positions (realm, published_seq) VALUES (%s, %s)"
            " ON CONFLICT (realm) DO NOTHING",
            (plan.realm, seq - 1),
        )


async def _hand_over(conn: AsyncConnection[Any], plan: SwapPlan) -> None:
    """Step 6: the old feed and caches move to the shadow; the shadow's answers merge in."""
    await conn.execute(contradiction_answers_ddl(plan.live))
    for table in CACHES:
        await conn.execute(merge_cache(table, plan.live, plan.shadow, moving=False))
    for table in (*CACHES, "outbox"):
        await conn.execute(sql.SQL("DROP TABLE {}").format(qualified(plan.shadow, table)))
        await conn.execute(
            sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(
                qualified(plan.live, table), sql.Identifier(plan.shadow)
            )
        )


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or b is None:
        return a or b
    return max(a, b)
