"""``tidegraph query REALM "question"``: ask a running query service from the shell.

The answer with the facts it rests on, each with its validity, belief state and the
documents behind it, and the passages it cites; ``--json`` prints the API's own answer.
Through :mod:`tidegraph.client` (URL and key from ``--url`` / ``--api-key``, else
``TIDEGRAPH_URL`` / ``TIDEGRAPH_API_KEY``, else ``http://127.0.0.1:8080``), so it reads only
what that key reads. Without a chat model on the service the answer is the retrieved facts
and passages (``query_data``), said on stderr; ``--facts-only`` asks for those alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import ValidationError

from tidegraph.client import ApiError, Client, ConnectError, Unavailable
from tidegraph.schemas import (
    BELIEF_INSTANT_FORMS,
    ConfigError,
    QueryDataRequest,
    QueryDataResponse,
    QueryRequest,
    QueryResponse,
    RelationOut,
    TidegraphError,
    problems_from,
)

MODES = ("mix", "local", "global", "hybrid", "naive", "bypass")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "query",
        help="ask a running query service a question; print the answer and its facts",
        description=__doc__,
    )
    p.add_argument("realm")
    p.add_argument("question")
    p.add_argument("--mode", choices=MODES, default="mix", help="retrieval mode")
    p.add_argument("--space", default="default", help="a space, or * for every space")
    p.add_argument("--as-of", help="valid time: YYYY, YYYY-MM or YYYY-MM-DD")
    p.add_argument("--as-believed-at", help=f"belief time: {BELIEF_INSTANT_FORMS}")
    p.add_argument("--include-superseded", action="store_true", help="superseded facts too")
    p.add_argument("--top-k", type=int, default=10, help="entities, passages and reports")
    p.add_argument("--hops", type=int, default=2, help="traversal depth")
    p.add_argument("--facts-only", action="store_true", help="no synthesis: query_data only")
    p.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    p.add_argument("--url", help="query service (TIDEGRAPH_URL, else http://127.0.0.1:8080)")
    p.add_argument("--api-key", help="bearer key (TIDEGRAPH_API_KEY)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {
        "query": args.question,
        "mode": args.mode,
        "space": args.space,
        "top_k": args.top_k,
        "hops": args.hops,
        "include_superseded": args.include_superseded,
    }
    if args.as_of is not None:
        fields["as_of"] = args.as_of
    if args.as_believed_at is not None:
        fields["as_believed_at"] = args.as_believed_at
    try:
        request = QueryDataRequest(**fields)
    except ValidationError as exc:
        rules = "; ".join(f"--{p.field.replace('_', '-')}: {p.rule}" for p in problems_from(exc))
        raise ConfigError(rules) from None
    try:
        answer = _ask(args, request)
    except ApiError as exc:
        raise TidegraphError(f"{exc.status} {exc.code}: {exc.message}") from None
    except ConnectError as exc:
        raise TidegraphError(f"{exc} — is `tidegraph serve` running there?") from None
    if args.json:
        print(json.dumps(answer.model_dump(mode="json"), indent=2, ensure_ascii=False))
    elif isinstance(answer, QueryResponse):
        print(render_answer(answer))
    else:
        print(render_facts(answer))
    return 0


def _ask(args: argparse.Namespace, request: QueryDataRequest) -> QueryResponse | QueryDataResponse:
    with Client(args.url, args.api_key) as tg:
        if args.facts_only:
            return tg.query_data(args.realm, request)
        with Client(args.url, args.api_key, retries=0) as once:
            try:
                return once.query(args.realm, QueryRequest(**request.model_dump()))
            except Unavailable as exc:
                if exc.code != "chat_model_not_configured":
                    return tg.query(args.realm, QueryRequest(**request.model_dump()))
        print(
            "tidegraph: the service has no chat model (TIDEGRAPH_LLM_BASE_URL on `serve`):"
            " the facts and passages retrieved, without a synthesised answer",
            file=sys.stderr,
        )
        return tg.query_data(args.realm, request)


def _fact(r: RelationOut) -> str:
    return f"{r.subject} {'NOT ' if r.negated else ''}{r.predicate} {r.object}"


def _relations(relations: list[RelationOut]) -> list[str]:
    """One line a fact: validity, belief state (what superseded it) and its documents."""
    by_id = {r.id: r for r in relations}
    lines = ["Facts:"] if relations else []
    for r in relations:
        valid = (
            f"valid {r.valid_from or '…'}–{r.valid_to or '…'}" if r.valid_from or r.valid_to else ""
        )
        state = r.status
        if r.superseded_by:
            later = by_id.get(r.superseded_by)
            state = f"superseded by {_fact(later) if later else 'relation ' + r.superseded_by}"
        notes = ", ".join(x for x in (valid, state) if x)
        lines.append(f"  {_fact(r)} ({notes}) — {', '.join(r.doc_keys)}")
    return lines


def render_facts(data: QueryDataResponse) -> str:
    """The facts and passages of a retrieval, cited by document and chunk."""
    lines = _relations(data.relations)
    if data.chunks:
        lines.append("Passages:")
        lines += [f"  [{c.citation}] {' '.join(c.text.split())[:200]}" for c in data.chunks]
    return "\n".join(lines) or "nothing retrieved"


def render_answer(answer: QueryResponse) -> str:
    """The synthesised answer, its references, then the facts it rests on."""
    lines = [answer.answer.strip(), ""]
    if answer.references:
        lines.append("References:")
        lines += [f"  [{ref.n}] {ref.citation}" for ref in answer.references]
    lines += _relations(answer.data.relations)
    return "\n".join(lines).rstrip()
