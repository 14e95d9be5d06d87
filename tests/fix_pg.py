"""The PostgreSQL (+pgvector) server for the test session.

Order: ``TIDEGRAPH_PG_DSN`` when set; testcontainers when a Docker engine answers; else the
project's own embedded server (``tidegraph up`` into ``.tidegraph/test``). Whichever it is,
``CREATE EXTENSION IF NOT EXISTS vector`` must work, or the session fails loudly.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from pgvector.psycopg import register_vector_async

from tidegraph.infra import local_pg

from local_services import docker_engine_answers, local_service, pg_container


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """DSN of a real server with the ``vector`` extension created in its database."""
    dsn = os.environ.get("TIDEGRAPH_PG_DSN")
    if dsn:
        local_pg.ensure_vector(dsn)
        yield dsn
    elif docker_engine_answers():
        with pg_container() as dsn:
            local_pg.ensure_vector(dsn)
            yield dsn
    else:
        with local_service("postgres") as dsn:
            yield dsn


@pytest.fixture
async def pg_conn(pg_dsn: str) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
    """An autocommit async connection with pgvector's types registered; closed after the test."""
    conn = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    try:
        await register_vector_async(conn)
        yield conn
    finally:
        await conn.close()
