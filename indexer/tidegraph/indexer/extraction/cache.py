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

from tidegraph.schemas import ExtractionOutput


class PgExtractionCache:
    """``ExtractionCache`` over ``<schema>.extraction_cache`` tables."""

    def __init__(
        self,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        schema: str,
        read_through: Sequence[str] = (),
    ) -> None:
        self._pool = pool
        self._schema = schema
        # One statement reads the schemas in order and stops at the first hit.
        self._get = (
            sql.SQL(" UNION ALL ")
            .join(
                sql.SQL("(SELECT output FROM {} WHERE key = %(key)s)").format(
                    sql.Identifier(s, "extraction_cache")
                )
                for s in (schema, *read_through)
            )
            .as_bytes(None)
            + b" LIMIT 1"
        )
        self._put = (
            sql.SQL("INSERT INTO {} (key, output) VALUES (%s, %s) ON CONFLICT DO NOTHING")
            .format(sql.Identifier(schema, "extraction_cache"))
            .as_bytes(None)
        )

    async def get(self, key: str) -> ExtractionOutput | None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(self._get, {"key": key})
            row = await cur.fetchone()
        return None if row is None else ExtractionOutput.model_validate(row[0])

    async def put(self, key: str, output: ExtractionOutput) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(self._put, (key, Jsonb(output.model_dump(mode="json"))))
