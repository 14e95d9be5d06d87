"""Property-based run of every operation in /openapi.json: no input yields a 5xx, and every
answer (status, content type, body) is one the document declares, so it cannot drift from
the handlers.

The app runs under a real uvicorn (tests/thread_server.py) over a small realm of a database
of its own, written through the writer, with a scripted chat model so ``/query`` answers.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import psycopg
import pytest
import schemathesis

from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings
from tidegraph.query_service.db import make_pool
from tidegraph.schemas.realm_config import RealmConfig

from fix_pg import database_of_its_own
from graph_helpers import GraphHarness, ent, rel
from openapi_run import EXAMPLES, call_and_check
from query_helpers import embedders, write_doc
from thread_server import served

pytestmark = pytest.mark.postgres

REALM = "sx" + uuid.uuid4().hex[:10]


class _Chat:
    async def __call__(self, system: str, prompt: str) -> str:
        return "scripted answer [1]"


async def _build_realm(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, REALM, RealmConfig(embedder="hashing:8"))
        await write_doc(
            g,
            "a.md",
            [
                (
                    "Ada Lovelace worked with Charles Babbage from 1833.",
                    [ent("Ada Lovelace"), ent("Charles Babbage")],
                    [rel("Ada Lovelace", "worked_with", "Charles Babbage", vf="1833")],
                ),
            ],
        )
        await write_doc(
            g,
            "b.md",
            [
                (
                    "Babbage never met Mordred.",
                    [ent("Charles Babbage"), ent("Mordred")],
                    [rel("Charles Babbage", "met", "Mordred", negated=True)],
                ),
            ],
            space="other",
        )


async def _build_app(dsn: str, stack: AsyncExitStack) -> Any:
    await _build_realm(dsn)
    pool = make_pool(dsn, min_size=1, max_size=4)
    await pool.open(wait=True)
    stack.push_async_callback(pool.close)
    return create_app(
        QuerySettings(api_keys=None), Deps(pool=pool, embedders=embedders(), chat=_Chat())
    )


@pytest.fixture(scope="module")
def own_dsn(pg_dsn: str) -> Iterator[str]:
    """A database holding only this module's realm, so that /readyz answers for it alone."""
    with database_of_its_own(pg_dsn, "sx" + uuid.uuid4().hex[:10]) as dsn:
        yield dsn


@pytest.fixture(scope="module")
def base_url(own_dsn: str) -> Iterator[str]:
    with served(functools.partial(_build_app, own_dsn)) as url:
        yield url


@pytest.fixture(scope="module")
def api_schema(base_url: str) -> Any:
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@EXAMPLES
def test_no_input_makes_a_server_error(case: Any, base_url: str) -> None:
    call_and_check(case, base_url, REALM)
