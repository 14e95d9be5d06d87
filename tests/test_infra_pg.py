"""pgvector on the real server: the column type, HNSW index and ordering the store relies on."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from pgvector import Vector
from psycopg import sql

pytestmark = pytest.mark.postgres

DIM = 384


def _unit(values: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


async def test_hnsw_nearest_neighbour(
    pg_conn: psycopg.AsyncConnection[tuple[Any, ...]], unique_name: Callable[[str], str]
) -> None:
    rng = random.Random(7)
    vectors = [_unit([rng.gauss(0, 1) for _ in range(DIM)]) for _ in range(300)]
    name = unique_name("pgv")
    schema = sql.Identifier(name)
    table = sql.SQL("{}.items").format(schema)
    await pg_conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
    try:
        await pg_conn.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, embedding vector(384) NOT NULL)").format(
                table
            )
        )
        async with pg_conn.cursor() as cur:
            await cur.executemany(
                sql.SQL("INSERT INTO {} (id, embedding) VALUES (%s, %s)").format(table),
                [(i, Vector(v)) for i, v in enumerate(vectors)],
            )
        await pg_conn.execute(
            sql.SQL("CREATE INDEX ON {} USING hnsw (embedding vector_cosine_ops)").format(table)
        )
        probe = Vector(_unit([v + rng.gauss(0, 0.05) for v in vectors[42]]))
        query = sql.SQL("SELECT id FROM {} ORDER BY embedding <=> %s LIMIT 3").format(table)
        async with pg_conn.transaction():
            await pg_conn.execute("SET LOCAL enable_seqscan = off")
            plan = await (await pg_conn.execute(sql.SQL("EXPLAIN ") + query, [probe])).fetchall()
            rows = await (await pg_conn.execute(query, [probe])).fetchall()
        assert any("items_embedding_idx" in line[0] for line in plan), plan
        assert rows[0][0] == 42

        column = await (
            await pg_conn.execute(
                "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a"
                " JOIN pg_class c ON c.oid = a.attrelid"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relname = 'items' AND a.attname = 'embedding'",
                [name],
            )
        ).fetchone()
        assert column == ("vector(384)",)
        with pytest.raises(psycopg.errors.DataException):
            await pg_conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(table),
                [999, Vector([0.5] * (DIM + 1))],
            )
    finally:
        await pg_conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))
