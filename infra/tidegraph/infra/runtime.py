"""Process-level wiring shared by long-running commands: settings, model client, signals."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidegraph.schemas import RecordValidationError
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.realm_config import RealmConfig, parse_embedder


def default_realm_config(
    extractor: str | None = None, embedder: str | None = None, dimension: int | None = None
) -> RealmConfig:
    """Configuration of a realm first seen in a record (``TIDEGRAPH_EXTRACTOR``/``_EMBEDDER``).

    ``embedder`` is a full id (``hashing:384``, ``llm:<model>:<dim>``) or the shorthand
    ``hashing`` / ``llm``; the shorthand takes the dimension from ``TIDEGRAPH_EMBED_DIMENSION``
    (384 offline, 1536 for a model) and the model from ``TIDEGRAPH_EMBED_MODEL``.
    """
    extractor = extractor or os.environ.get("TIDEGRAPH_EXTRACTOR", "rules")
    embedder = embedder or os.environ.get("TIDEGRAPH_EMBEDDER", "hashing")
    dim_text = os.environ.get("TIDEGRAPH_EMBED_DIMENSION")
    if embedder == "hashing":
        embedder = f"hashing:{dimension or int(dim_text or 384)}"
    elif embedder == "llm":
        model = os.environ.get("TIDEGRAPH_EMBED_MODEL", "text-embedding-3-small")
        embedder = f"llm:{model}:{dimension or int(dim_text or 1536)}"
    if extractor not in ("rules", "llm"):
        raise ConfigError(f"TIDEGRAPH_EXTRACTOR={extractor!r}: expected 'rules' or 'llm'")
    try:
        parse_embedder(embedder)
    except ValueError as exc:
        raise ConfigError(f"TIDEGRAPH_EMBEDDER: {exc}") from None
    return RealmConfig(extractor=extractor, embedder=embedder)


def read_realm_config(path: Path) -> RealmConfig:
    """A ``--config`` file, or one :class:`ConfigError` line naming the file and the fix."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"--config {path}: {exc.strerror} — give the path of a realm configuration JSON "
            "file (README, `realm create`)"
        ) from None
    try:
        return RealmConfig.from_json(data)
    except RecordValidationError as exc:
        raise ConfigError(f"--config {path}: {exc} — correct the file") from None


def _endpoint_configured() -> bool:
    return bool(os.environ.get("TIDEGRAPH_LLM_BASE_URL") or os.environ.get("OPENAI_API_KEY"))


def llm_client_if_configured(**overrides: object) -> Any:
    """An ``LLMClient`` when ``TIDEGRAPH_LLM_BASE_URL`` or ``OPENAI_API_KEY`` is set, else None;
    ``overrides`` are settings given as flags."""
    if not _endpoint_configured():
        return None
    from tidegraph.indexer.models.client import LLMClient, load_llm_settings

    return LLMClient(load_llm_settings(**overrides))


def add_concurrency_option(parser: argparse.ArgumentParser) -> None:
    """``--concurrency``, read through :func:`documents_prepared_at_once`."""
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="documents prepared at once (default: 8, or 1.5 × TIDEGRAPH_LLM_MAX_IN_FLIGHT when a"
        " model endpoint is configured and that is more)",
    )


def documents_prepared_at_once(requested: int | None) -> int:
    """``--concurrency`` when given, else enough documents to keep the configured model
    endpoint's ``TIDEGRAPH_LLM_MAX_IN_FLIGHT`` calls busy
    (:func:`tidegraph.indexer.extraction.ahead.documents_at_once`)."""
    from tidegraph.indexer.extraction.ahead import documents_at_once

    calls = None
    if _endpoint_configured():
        from tidegraph.indexer.models.client import load_llm_settings

        calls = load_llm_settings().max_in_flight
    return documents_at_once(requested, calls)


def on_termination(stop: Callable[[], None]) -> None:
    """Call ``stop`` on SIGTERM and SIGINT (finish what is in flight, then exit)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
