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
    RelationFact,
)
from tidegraph.indexer.graph.rules import render_entity, render_relation
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.indexer.write.contradictions import Judge, answering
from tidegraph.indexer.write.sequencer import Sequencer
from tidegraph.indexer.write.units import RecordUnit, Settlement
from tidegraph.indexer.write.writer import UNKNOWN, Version, WriteResult, apply_version
from tidegraph.schemas.realm_config import RealmConfig
from tidegraph.store import positions, realm_positions
from tidegraph.store.positions import Claim
from tidegraph.store.realms import RealmInfo, create_realm, ensure_control

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def HashEmbedder() -> HashingEmbedder:  # noqa: N802 - reads as the embedder it returns
    """The production hashing embedder at dimension 8 (``hashing:8``), small for tests."""
    return HashingEmbedder(8)


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
    """Applies hand-made versions one transaction each, as the live unit of work does: the
    stamp drawn by ``sequencer`` (the database's by default), the position moved with it."""

    conn: AsyncConnection[Any]
    info: RealmInfo
    claim: Claim
    offset: int = 0
    clock: datetime = T0
    embedder: HashingEmbedder = field(default_factory=HashEmbedder)
    judge: Judge | None = None
    """Asked about the residue, as the units ask it (``contradictions.answering``)."""

    @property
    def topic(self) -> str:
        return self.claim.topic

    @classmethod
    async def create(
        cls, conn: AsyncConnection[Any], realm: str, config: RealmConfig | None = None
    ) -> GraphHarness:
        await ensure_control(conn)
        cfg = config or RealmConfig(embedder="hashing:8")
        info = await create_realm(conn, realm, cfg)
        claim, _ = await positions.claim(conn, "test", f"test.{realm}", 0, 0)
        await realm_positions.ensure(conn, info.schema, realm, claim.topic, 0)
        return cls(conn, info, claim)

    def prepared(
        self,
        doc_key: str,
        chunks: list[tuple[str, list[EntityFact], list[RelationFact]]],
        vectors: list[list[float]],
        *,
        space: str = "default",
        order_key: str | None = None,
        content_hash: str | None = None,
        title: str | None = None,
    ) -> PreparedDocument:
        """A prepared version with the given chunk texts, facts and embeddings."""
        return PreparedDocument(
            space=space,
            doc_key=doc_key,
            content_hash="sha256:" + "0" * 64 if content_hash is None else content_hash,
            source_version=None,
            order_key=order_key,
            title=title,
            source="test",
            metadata={},
            chunks=tuple(
                PreparedChunk(i, text, vectors[i], tuple(es), tuple(rs))
                for i, (text, es, rs) in enumerate(chunks)
            ),
            vectors={},
        )

    async def write(
        self,
        space: str,
        doc_key: str,
        doc: PreparedDocument | None,
        *,
        at: datetime | None = None,
        sequencer: Sequencer | None = None,
    ) -> WriteResult:
        """Write one version at the next offset, appended to the log one second after the
        last one (or at ``at``)."""
        self.clock = at if at is not None else self.clock + timedelta(seconds=1)
        version = Version(space, doc_key, doc, None, UNKNOWN, self.offset)
        unit = RecordUnit()
        settlement = Settlement.of_realm(self.claim, self.info, self.offset, self.offset + 1)

        async def attempt() -> WriteResult:
            async with unit.transaction(self.conn, self.info, settlement) as live:
                stamp = await (sequencer or live).draw(self.conn, self.clock)
                return await apply_version(self.conn, self.info, self.embedder, version, stamp)

        result = await answering(self.conn, self.info, self.judge, attempt)
        self.offset += 1
        return result

    async def upsert(
        self,
        doc_key: str,
        chunks: list[tuple[list[EntityFact], list[RelationFact]]],
        *,
        order_key: str | None = None,
        space: str = "default",
        content: str | None = None,
        at: datetime | None = None,
        sequencer: Sequencer | None = None,
    ) -> WriteResult:
        texts = [f"{doc_key}:{i}" for i in range(len(chunks))]
        prepared = self.prepared(
            doc_key,
            [(f"chunk {i} of {doc_key}", es, rs) for i, (es, rs) in enumerate(chunks)],
            await self.embedder.embed(texts),
            space=space,
            order_key=order_key,
            content_hash=content,
        )
        return await self.write(space, doc_key, prepared, at=at, sequencer=sequencer)

    async def delete(self, doc_key: str, space: str = "default") -> WriteResult:
        return await self.write(space, doc_key, None)

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
