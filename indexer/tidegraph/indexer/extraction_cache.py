"""Extraction results kept in the realm's own schema, addressed by content (invariant 6).

The key (``llm_extractor.cache_key``) covers chunk text, document context, model, prompt
version and parameters, so a hit is exactly the answer the model would be asked for again.
Reads may fall through several schemas: a replay shadow reads its own cache, then the live
realm's, so rebuilding an unchanged configuration costs no model call at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from tidegraph.schemas.extraction import ExtractionOutput


class PgExtractionCache:
    """``ExtractionCache`` over ``<schema>.extraction_cache`` tables."""

    def __init__(
        self, pool: AsyncConnectionPool[AsyncConnection[Any]], schema: str,
        read_through: Sequence[str] = (),
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._read = (schema, *read_through)

    async def get(self, key: str) -> ExtractionOutput | None:
        async with self._pool.connection() as conn:
            for schema in self._read:
                cur = await conn.execute(
                    sql.SQL("SELECT output FROM {} WHERE key = %s").format(
                        sql.Identifier(schema, "extraction_cache")
                    ),
                    (key,),
                )
                row = await cur.fetchone()
                if row is not None:
                    return ExtractionOutput.model_validate(row[0])
        return None

    async def put(self, key: str, output: ExtractionOutput) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (key, output) VALUES (%s, %s) ON CONFLICT DO NOTHING"
                ).format(sql.Identifier(self._schema, "extraction_cache")),
                (key, Jsonb(output.model_dump(mode="json"))),
            )
