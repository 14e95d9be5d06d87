"""The Kafka broker for the test session.

Order: ``TIDEGRAPH_KAFKA_BOOTSTRAP`` when set; testcontainers when a Docker engine answers;
else the project's own local broker (``tidegraph up`` into ``.tidegraph/test``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from local_services import docker_engine_answers, kafka_container, local_service


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``host:port`` of a real broker; use unique topic names (``unique_name``) per test."""
    bootstrap = os.environ.get("TIDEGRAPH_KAFKA_BOOTSTRAP")
    if bootstrap:
        yield bootstrap
    elif docker_engine_answers():
        with kafka_container() as bootstrap:
            yield bootstrap
    else:
        with local_service("kafka") as bootstrap:
            yield bootstrap
