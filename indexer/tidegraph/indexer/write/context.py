"""What one write transaction shares: the connection, the realm, its changes and its SQL.

Queries are written once as templates naming the realm's tables in braces
(``"SELECT … FROM {entities}"``); each table becomes a quoted ``schema.table`` identifier
through ``psycopg.sql``. The composed bytes are cached per schema: composing a query costs
more than running most of the small statements a write issues, and identical bytes let
psycopg prepare each statement on the server once per connection.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.adapt import PyFormat

from tidegraph.indexer.extraction import Embedder
from tidegraph.indexer.write.ids import take
from tidegraph.schemas import ChangeKind
from tidegraph.store import RealmInfo

Params = Sequence[Any] | Mapping[str, Any]


@functools.lru_cache(maxsize=4096)
def realm_query(schema: str, template: str) -> bytes:
    """``template`` with every ``{table}`` replaced by the quoted ``schema.table``."""
    names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    tables = {name: sql.Identifier(schema, name) for name in names}
    return sql.SQL(template).format(**tables).as_bytes(None)


def vec_param(v: Sequence[float]) -> Vector:
    """An embedding as a query parameter, sent in pgvector's binary form (``%b``): packing
    floats costs a fraction of writing them out as text, and an array of text vectors
    would also be quoted and escaped element by element."""
    return Vector(list(v))


async def ensure_vector_types(conn: AsyncConnection[Any]) -> None:
    """Teach the connection pgvector's types (once per connection)."""
    try:
        conn.adapters.get_dumper(Vector, PyFormat.BINARY)
    except psycopg.ProgrammingError:
        await register_vector_async(conn)


@dataclass
class ChangeSet:
    """Changes of one transaction, in the order they happened."""

    space: str
    items: list[tuple[ChangeKind, str, dict[str, Any]]] = field(default_factory=list)

    def add(self, kind: ChangeKind, space: str | None = None, **payload: Any) -> None:
        self.items.append((kind, space or self.space, payload))

    def restate_entity(self, space: str, entity: dict[str, Any]) -> None:
        """Report an entity's final attributes once per transaction: they replace those of
        the ``entity_added`` or ``entity_updated`` already reported for it, else a new
        ``entity_updated`` carries them."""
        for i, (kind, sp, payload) in enumerate(self.items):
            if (
                kind in (ChangeKind.ENTITY_ADDED, ChangeKind.ENTITY_UPDATED)
                and payload.get("entity", {}).get("id") == entity["id"]
            ):
                self.items[i] = (kind, sp, {**payload, "entity": entity})
                return
        self.add(ChangeKind.ENTITY_UPDATED, space, entity=entity)


@dataclass
class WriteContext:
    """State of one write transaction; nothing outlives it."""

    conn: AsyncConnection[Any]
    info: RealmInfo
    embedder: Embedder
    changes: ChangeSet
    vectors: dict[str, list[float]] = field(default_factory=dict)
    """Rendered text → embedding: computed by the prepare phase, completed on demand."""
    touched_relations: set[int] = field(default_factory=set)
    """Relations re-pointed or emptied by an entity merge: reconciled with the rest."""
    unannounced: set[int] = field(default_factory=set)
    """Relations this transaction inserted (born current) whose birth reconciliation has
    not yet put on the feed: it treats them as coming from retracted."""
    absorbed: set[int] = field(default_factory=set)
    """Entities merged into another by this transaction: their attribute history closes."""
    names: dict[int, str] = field(default_factory=dict)
    """Entity id → name as this transaction leaves it, for the entities it resolved."""
    offset: int = 0
    """Log offset of the record written: the ids of the rows it creates derive from it."""
    created: int = 0
    """Rows created so far (chunks, entities and relations share the record's ids)."""

    def new_ids(self, count: int) -> list[int]:
        """Ids for ``count`` new rows, the same whoever applies the record (``ids``)."""
        taken = take(self.offset, self.created + count)[self.created :]
        self.created += count
        return taken

    def q(self, template: str) -> bytes:
        return realm_query(self.info.schema, template)

    async def rows(self, template: str, params: Params = ()) -> list[Any]:
        return await self.fetch(await self.send(template, params))

    async def send(self, template: str, params: Params = ()) -> AsyncCursor[Any]:
        """Queue a statement whose rows are read later with :meth:`fetch`: in pipeline
        mode, statements sent before the first of them is fetched share one round trip."""
        return await self.conn.execute(self.q(template), params)

    @staticmethod
    async def fetch(cur: AsyncCursor[Any]) -> list[Any]:
        rows: list[Any] = await cur.fetchall()
        return rows

    async def run(self, template: str, params: Params = ()) -> None:
        """A statement whose result is not read: in pipeline mode it costs no round trip."""
        await self.conn.execute(self.q(template), params)

    async def many(self, template: str, params: Iterable[Params]) -> None:
        async with self.conn.cursor() as cur:
            await cur.executemany(self.q(template), params)

    async def embeddings(self, texts: Sequence[str]) -> list[Vector]:
        """Each text's embedding as a parameter, embedding only what is not known yet."""
        missing = sorted({t for t in texts if t not in self.vectors})
        if missing:
            for text, vec in zip(missing, await self.embedder.embed(missing), strict=True):
                self.vectors[text] = vec
        return [vec_param(self.vectors[t]) for t in texts]

    async def entity_names(self, entity_ids: Iterable[int]) -> dict[int, str]:
        """Names of the given entities, read only for those this transaction has not
        resolved itself."""
        wanted = set(entity_ids)
        missing = sorted(wanted - self.names.keys())
        if missing:
            for i, n in await self.rows(
                "SELECT id, name FROM {entities} WHERE id = ANY(%s)", (missing,)
            ):
                self.names[int(i)] = str(n)
        return {i: self.names[i] for i in wanted if i in self.names}
