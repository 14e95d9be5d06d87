"""Unique realm names and topic prefixes, so tests sharing one broker and server never meet."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest


def _unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    """``unique_name("r")`` → ``r3f9c…``: valid as a realm name and as a topic prefix part."""
    return _unique
