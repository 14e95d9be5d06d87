"""Drive the writer directly with hand-made prepared documents (no Kafka, no extractor).

Used by the write-path tests: each call applies one record at the next offset of a private
partition, with belief instants one second apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import AsyncConnection, sql

from tidegraph.indexer.extraction.prepared import (
    EntityFact,
    PreparedChunk,
    PreparedDocument,
    RecordPosition,
    RelationFact,
)
from tidegraph.indexer.graph.rules import render_entity, render_relation
from tidegraph.indexer.write.writer import Stamp, WriteResult, write_document
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import positions
from tidegraph.store.realms import RealmInfo, create_realm, ensure_control

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class HashEmbedder:
    """Deterministic tiny embedder for write-path tests (dimension 8)."""

    id = "hashing:8"
    dimension = 8

    async def embed(self, texts: list[str]) -> list[list[float]]:
        import hashlib

        out = []
        for t in texts:
            d = hashlib.sha256(t.encode()).digest()
            v = [b / 255 + 0.01 for b in d[:8]]
            n = sum(x * x for x in v) ** 0.5
            out.append([x / n for x in v])
        return out


def rel(
    s: str, p: str, o: str, *, negated: bool = False, vf: str | None = None, vt: str | None = None
) -> RelationFact:
    return RelationFact(s, p, o, negated, "", 1.0, vf, vt)


def ent(
    name: str, typ: str = "Person", desc: str = "", aliases: tuple[str, ...] = ()
) -> EntityFact:
    return EntityFact(name, typ, desc, aliases)


@dataclass
class GraphHarness:
    conn: AsyncConnection[Any]
    info: RealmInfo
    topic: str
    epoch: int
    offset: int = 0
    clock: datetime = T0
    embedder: HashEmbedder = field(default_factory=HashEmbedder)

    @classmethod
    async def create(
        cls, conn: AsyncConnection[Any], realm: str, config: RealmConfig | None = None
    ) -> GraphHarness:
        await ensure_control(conn)
        cfg = config or RealmConfig(embedder="hashing:8")
        info = await create_realm(conn, realm, cfg)
        topic = f"test.{realm}"
        _, epoch = await positions.claim(conn, "test", topic, 0, 0)
        return cls(conn, info, topic, epoch)

    def _pos(self, at: datetime | None = None) -> RecordPosition:
        """The next record's position, appended to the log one second after the last one
        (or at ``at``)."""
        self.clock = at if at is not None else self.clock + timedelta(seconds=1)
        return RecordPosition("test", self.topic, 0, self.offset, self.epoch, self.clock)

    async def upsert(
        self,
        doc_key: str,
        chunks: list[tuple[list[EntityFact], list[RelationFact]]],
        *,
        order_key: str | None = None,
        space: str = "default",
        content: str | None = None,
        at: datetime | None = None,
        stamp: Stamp | None = None,
    ) -> WriteResult:
        embed = await self.embedder.embed([f"{doc_key}:{i}" for i in range(len(chunks))])
        prepared = PreparedDocument(
            space=space,
            doc_key=doc_key,
            content_hash="sha256:" + "0" * 64 if content is None else content,
            source_version=None,
            order_key=order_key,
            title=None,
            source="test",
            metadata={},
            chunks=tuple(
                PreparedChunk(i, f"chunk {i} of {doc_key}", embed[i], tuple(es), tuple(rs))
                for i, (es, rs) in enumerate(chunks)
            ),
            vectors={},
        )
        result = await write_document(
            self.conn,
            self.info,
            self._pos(at),
            self.embedder,
            prepared,
            space=space,
            doc_key=doc_key,
            source_version=None,
            stamp=stamp,
        )
        self.offset += 1
        return result

    async def delete(self, doc_key: str, space: str = "default") -> WriteResult:
        result = await write_document(
            self.conn,
            self.info,
            self._pos(),
            self.embedder,
            None,
            space=space,
            doc_key=doc_key,
            source_version=None,
        )
        self.offset += 1
        return result

    async def relations(
        self, *, believed_at: datetime | None = None, include_superseded: bool = False
    ) -> set[tuple[str, str, str, bool, str]]:
        """(subject, predicate, object, negated, state) as believed now or at an instant."""
        s = sql.Identifier(self.info.schema)
        if believed_at is None:
            q = sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.negated, r.status FROM {s}.relations r"
                " JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id WHERE r.status <> 'retracted'"
            ).format(s=s)
            cur = await self.conn.execute(q)
        else:
            q = sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.negated, h.state"
                " FROM {s}.relation_history h"
                " JOIN {s}.relations r ON r.id = h.relation_id"
                " JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id"
                " WHERE h.t_created <= %s AND (h.t_expired IS NULL OR h.t_expired > %s)"
            ).format(s=s)
            cur = await self.conn.execute(q, (believed_at, believed_at))
        rows = {(a, b, c, bool(d), e) for a, b, c, d, e in await cur.fetchall()}
        if not include_superseded:
            rows = {r for r in rows if r[4] == "current"}
        return rows

    async def entities(self) -> dict[str, tuple[str, bool, frozenset[str]]]:
        """name → (type, dormant, aliases)."""
        cur = await self.conn.execute(
            sql.SQL(
                "SELECT name, type, dormant_since IS NOT NULL, aliases FROM {}.entities"
            ).format(sql.Identifier(self.info.schema))
        )
        return {n: (t, bool(d), frozenset(a)) for n, t, d, a in await cur.fetchall()}

    async def weights(self) -> dict[tuple[str, str, str], int]:
        s = sql.Identifier(self.info.schema)
        cur = await self.conn.execute(
            sql.SQL(
                "SELECT es.name, r.predicate, eo.name, r.weight FROM {s}.relations r"
                " JOIN {s}.entities es ON es.id = r.subject_id"
                " JOIN {s}.entities eo ON eo.id = r.object_id"
            ).format(s=s)
        )
        return {(a, b, c): int(w) for a, b, c, w in await cur.fetchall()}

    async def changes(self) -> list[tuple[int, int, str]]:
        cur = await self.conn.execute(
            sql.SQL("SELECT seq, idx, kind FROM {}.outbox ORDER BY seq, idx").format(
                sql.Identifier(self.info.schema)
            )
        )
        return [(int(a), int(b), str(c)) for a, b, c in await cur.fetchall()]


__all__ = ["GraphHarness", "ent", "rel", "render_entity", "render_relation", "T0"]
