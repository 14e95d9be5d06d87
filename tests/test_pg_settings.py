"""The embedded server's memory and planner settings, sized for the machine."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidegraph.infra.local_pg import MIB, machine_settings, sized_settings

GIB = 1024 * MIB


def _mb(settings: tuple[str, ...], name: str) -> int:
    [value] = [s.split("=", 1)[1] for s in settings if s.startswith(f"{name}=")]
    assert value.endswith("MB")
    return int(value[:-2])


def test_a_large_machine_gets_capped_buffers_and_index_build_memory() -> None:
    settings = sized_settings(24 * GIB, 2)
    assert _mb(settings, "shared_buffers") == 2048
    assert _mb(settings, "effective_cache_size") == 12 * 1024
    assert _mb(settings, "maintenance_work_mem") == 1024
    assert "jit=off" in settings
    assert "max_parallel_maintenance_workers=1" in settings


def test_a_small_machine_keeps_the_defaults_as_a_floor() -> None:
    settings = sized_settings(512 * MIB, 1)
    assert _mb(settings, "shared_buffers") == 128
    assert _mb(settings, "maintenance_work_mem") == 64
    assert "max_parallel_maintenance_workers=1" in settings


@given(st.integers(256 * MIB, 1024 * GIB), st.integers(1, 256))
def test_settings_stay_within_memory(memory: int, cores: int) -> None:
    settings = sized_settings(memory, cores)
    shared = _mb(settings, "shared_buffers")
    maintenance = _mb(settings, "maintenance_work_mem")
    assert 128 <= shared <= 2048
    assert shared * MIB <= max(memory // 8, 128 * MIB)
    assert 64 <= maintenance <= 1024
    assert shared + maintenance <= max(memory // 4, 192 * MIB) // MIB + 1
    assert _mb(settings, "effective_cache_size") >= shared


@pytest.mark.postgres
def test_the_embedded_server_runs_with_the_machine_settings(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT setting FROM pg_settings WHERE name = 'jit'").fetchone()
        source = conn.execute(
            "SELECT source FROM pg_settings WHERE name = 'shared_buffers'"
        ).fetchone()
    if source is None or source[0] != "command line":
        pytest.skip("an external server: its settings are the operator's")
    assert row == ("off",)
    assert "jit=off" in machine_settings()
