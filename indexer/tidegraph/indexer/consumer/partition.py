"""One owned partition as the indexer sees it: the claim, where to read, what waits, and
where each realm on it stands.

Whether a record is settled is the realm's to say (its own position, or its key's while no
realm schema holds it: :mod:`tidegraph.store.realm_positions`). The partition remembers
what it read of those positions, and on which server each is kept (:class:`Stands`), so
passing over settled records — a second consumer group reading the topic from the
beginning, a restart from a cursor below a realm that went on — costs no statement per
record; a write still compares and sets the
stored position, so a stale memory can never apply a record twice, only cost a retry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tidegraph.schemas import MAIN, is_realm
from tidegraph.store import Claim, Cluster, Mark, RealmInfo, realm_positions

FindRealm = Callable[[str], Awaitable[RealmInfo | None]]
"""The realm of a name, when it exists (through the indexer's cache)."""


@dataclass(frozen=True)
class Stand:
    """Where a key stands, and who keeps that."""

    server: str
    """The server keeping the position (``main`` for a key no realm holds)."""
    schema: str | None
    """The realm schema holding it, ``None`` for the control schema."""
    next_offset: int


@dataclass
class Stands:
    """Where each key seen on the partition stands."""

    topic: str
    partition: int
    known: dict[str, Stand] = field(default_factory=dict)

    def settled(self, key: str, offset: int) -> bool:
        return offset < self.known[key].next_offset

    def schema(self, key: str) -> str | None:
        return self.known[key].schema

    def server(self, key: str) -> str:
        return self.known[key].server

    def forget(self) -> None:
        """Read every position again (after a failure, a swap, a move, a deletion)."""
        self.known.clear()

    async def learn(self, cluster: Cluster, key: str, find: FindRealm) -> None:
        """Read the position of ``key`` when not known yet: its realm's own (created where
        its key stood, for a realm that has none on this partition yet), else its key's."""
        if key in self.known:
            return
        info = await find(key) if is_realm(key) else None
        if info is not None:
            await self.hold(cluster, info)
            return
        async with cluster.connection(MAIN) as conn:
            at = await realm_positions.key_position(conn, key, self.topic, self.partition)
        self.known[key] = Stand(MAIN, None, at)

    async def hold(self, cluster: Cluster, info: RealmInfo) -> None:
        """The realm ``info`` holds its key's position from now on (it was just created or
        opened)."""
        start = None  # read on the realm's own server, in the statement that creates it
        if info.server != MAIN:
            async with cluster.connection(MAIN) as conn:
                start = await realm_positions.key_position(
                    conn, info.realm, self.topic, self.partition
                )
        async with cluster.connection(info.server) as conn:
            at = await realm_positions.ensure(
                conn, info.schema, info.realm, self.topic, self.partition, start
            )
        self.known[info.realm] = Stand(info.server, info.schema, at)

    def mark(self, keyed: list[tuple[str, int]]) -> tuple[Mark, ...]:
        """The marks settling records ``keyed`` ((key, offset), in log order)."""
        return tuple(realm_positions.marks_of([(k, self.schema(k), o) for k, o in keyed]))

    def moved(self, marks: tuple[Mark, ...]) -> None:
        """The marks committed."""
        for m in marks:
            stand = self.known[m.key]
            self.known[m.key] = Stand(stand.server, m.schema, max(stand.next_offset, m.after))


@dataclass
class Partition:
    """A partition this process owns."""

    claim: Claim
    cursor: int
    """The group's cursor as committed: where reading resumes after a restart."""
    fetch_from: int
    """Offset the consumer was last sought to: records fetched before are dropped."""
    stands: Stands
    reached: int = 0
    """One past the last record settled or passed over in this process (the cursor the
    next commit stores, unless a held realm keeps it lower)."""
    failures: int = 0
    resume_at: float | None = None
    """A transient failure paused the partition until then."""
    paused_for: str = ""
    """Why (said again when it resumes)."""
    held: dict[str, int] = field(default_factory=dict)
    """Realm → offset of the record it is held at."""
    retry_held_at: float | None = None
    waiting: set[str] = field(default_factory=set)
    """Realms with a row in ``tidegraph.indexer_holds``."""
    server_failures: dict[str, int] = field(default_factory=dict)
    """Server → failed attempts in a row (its realms' backoff grows with them)."""

    def cursor_after(self, offset: int) -> int:
        """The group's cursor once records up to ``offset`` are settled: never past a held
        realm's record, whose realm reads from there again."""
        return max(self.cursor, min([offset + 1, *self.held.values()]))
