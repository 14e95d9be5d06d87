"""``tidegraph doctor``: does the configured model path work? One line says.

It calls each configured endpoint once (:mod:`tidegraph.infra.doctor`): the chat model
(``TIDEGRAPH_LLM_BASE_URL``, ``TIDEGRAPH_LLM_MODEL``), the embeddings model
(``TIDEGRAPH_EMBED_MODEL``, or the model a realm named with ``--realm`` is pinned to) and
the rerank endpoint (``TIDEGRAPH_RERANK_URL``). Exit 0 when every configured part works,
1 when one does not; nothing configured is not a failure: tidegraph runs offline.
"""

from __future__ import annotations

import argparse
import sys

from tidegraph.infra.reach import connect_pg
from tidegraph.infra.runtime import llm_client_if_configured
from tidegraph.schemas.errors import ConfigError
from tidegraph.schemas.realm_config import parse_embedder
from tidegraph.schemas.settings import load_settings
from tidegraph.store.realms import find_realm


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "doctor",
        help="call the configured model endpoints once and say in one line what works",
        description="Extract a test sentence with the chat model, embed it with the"
        " embeddings model and rank two documents with the rerank endpoint, each as the"
        " pipeline does, and print one line saying what works and what does not. Exit 0"
        " when every configured part works, 1 otherwise.",
    )
    p.add_argument(
        "--realm",
        metavar="R",
        help="check the embeddings model and dimension realm R is pinned to (needs PostgreSQL)",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="longest each call may take, retries included: a local server loads a model"
        " on its first request (default 120)",
    )
    p.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN), with --realm")
    p.set_defaults(func=run)


async def _pinned(args: argparse.Namespace) -> tuple[str | None, int | None]:
    """The embeddings model and dimension ``--realm`` is pinned to (``None``: no realm, or
    one pinned to the offline hashing embedder)."""
    if args.realm is None:
        return None, None
    dsn = load_settings(pg_dsn=args.pg_dsn).pg_dsn.get_secret_value()
    async with connect_pg(dsn) as conn:
        info = await find_realm(conn, args.realm)
    if info is None:
        raise ConfigError(f"realm {args.realm!r} does not exist")
    spec = parse_embedder(info.embedder)
    if spec.kind == "hashing":
        return None, None
    return spec.model, spec.dimension


async def run(args: argparse.Namespace) -> int:
    # imported here: every command's module is imported to build the parser, and these
    # load the model client
    from tidegraph.infra import doctor
    from tidegraph.infra.doctor import Finding
    from tidegraph.query_service.rerank_endpoint import RerankEndpoint, RerankSettings

    model, dimension = await _pinned(args)
    findings: list[Finding] = []
    llm = llm_client_if_configured(deadline=args.deadline, attempt_timeout=args.deadline)
    if llm is None:
        findings.append(
            Finding(
                "chat",
                None,
                "no model endpoint configured (TIDEGRAPH_LLM_BASE_URL): realms use the rules"
                " extractor and the hashing embedder",
            )
        )
    else:
        try:
            findings.append(await doctor.check_chat(llm, llm.settings.model))
            embed_model = model or llm.settings.embed_model
            findings.append(await doctor.check_embeddings(llm, embed_model, dimension, args.realm))
        finally:
            await llm.aclose()
    rerank_settings = RerankSettings()
    if rerank_settings.url:
        reranker = RerankEndpoint(rerank_settings)
        try:
            findings.append(await doctor.check_rerank(reranker))
        finally:
            await reranker.aclose()
    else:
        findings.append(Finding("rerank", None, "rerank not configured (TIDEGRAPH_RERANK_URL)"))
    print(f"doctor: {doctor.summary(findings)}", file=sys.stdout, flush=True)
    return 1 if any(f.ok is False for f in findings) else 0
