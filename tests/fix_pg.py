"""The PostgreSQL (+pgvector) server for the test session.

Order: ``TIDEGRAPH_PG_DSN`` when set; testcontainers when a Docker engine answers; else the
project's own embedded server (``tidegraph up`` into ``.tidegraph/test``). Whichever it is,
``CREATE EXTENSION IF NOT EXISTS vector`` must work, or the session fails loudly.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from pgvector.psycopg import register_vector_async
from psycopg import sql

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


@contextmanager
def database_of_its_own(pg_dsn: str, name: str) -> Iterator[str]:
    """DSN of a new database ``name`` on the session server (with ``vector``), dropped on
    exit: for assertions about everything a database holds, which other tests' realms
    would spoil."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname=name)
    try:
        local_pg.ensure_vector(dsn)
        yield dsn
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def own_database(pg_dsn: str, unique_name: Callable[[str], str]) -> Iterator[str]:
    """A database of this test's own (see :func:`database_of_its_own`)."""
    with database_of_its_own(pg_dsn, unique_name("db")) as dsn:
        yield dsn
