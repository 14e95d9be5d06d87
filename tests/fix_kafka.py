"""The Kafka broker for the test session.

Order: ``TIDEGRAPH_KAFKA_BOOTSTRAP`` when set; testcontainers when a Docker engine answers;
else the project's own local broker (``tidegraph up``).
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    bootstrap = os.environ.get("TIDEGRAPH_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise RuntimeError("set TIDEGRAPH_KAFKA_BOOTSTRAP (local fallback not wired yet)")
    return bootstrap
