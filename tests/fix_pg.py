"""The PostgreSQL (+pgvector) server for the test session.

Order: ``TIDEGRAPH_PG_DSN`` when set; testcontainers when a Docker engine answers; else the
project's own embedded server (``tidegraph up``).
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    dsn = os.environ.get("TIDEGRAPH_PG_DSN")
    if not dsn:
        raise RuntimeError("set TIDEGRAPH_PG_DSN (local fallback not wired yet)")
    return dsn
