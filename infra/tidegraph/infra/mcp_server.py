"""``tidegraph mcp``: the query API as tools for agents, over the official MCP SDK.

A thin layer over the HTTP API through :mod:`tidegraph.client` — no retrieval of its own.
Every tool call carries an API key to the query service, which decides what it may read
exactly as for any HTTP caller: over stdio the key given at start (``--api-key`` or
``TIDEGRAPH_API_KEY``), over streamable HTTP the caller's own ``Authorization: Bearer``
header (the server's key is never lent to an HTTP caller). A refused realm comes back as a
tool error naming the status.

Results are compact and cited: a relation carries its id and the ``doc_keys`` behind it, a
passage its ``doc_key#chunk`` citation, so an agent can quote and fetch provenance.

Arguments are checked as the HTTP API checks its requests, with the same rules (``as_of``
as a year, month or date; ``as_believed_at`` through the one belief-time reading) and the
same error shape (``422 invalid_request: <argument>: <rule>``); an argument a tool does not
take is refused naming the ones it takes, never ignored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.context import LifespanContextT, RequestT
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import Field, ValidationError

from tidegraph.client import ApiError, AsyncClient, ClientError
from tidegraph.schemas import (
    BELIEVED_AT_DOC,
    AsOf,
    BeliefInstant,
    BeliefInterval,
    ContractError,
    GraphChange,
    RelationListed,
    RelationOut,
    bearer_token,
    problems_from,
)

T = TypeVar("T")

INSTRUCTIONS = (
    "tidegraph holds bi-temporal knowledge graphs (realms) built from documents. Start with "
    "list_realms, ask with query_data, then follow entities, their relations and history, "
    "and the documents behind a relation. Cite doc_key (and #chunk) for every claim."
)

Realm = Annotated[str, Field(description="Realm name, as listed by list_realms.")]
Mode = Literal["mix", "local", "global", "hybrid", "naive", "bypass"]
HISTORY_AT_ONCE = 8
"""Belief histories ``entity_relations`` reads at once."""


class CheckedTool(Tool):
    """A tool whose arguments are checked before the SDK sees them: unknown ones refused,
    broken ones reported as the HTTP API reports them (no pydantic links), after the SDK's
    usual ``Error executing tool <name>:``."""

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> CheckedTool:
        tool = cls.from_function(fn)
        assert isinstance(tool, CheckedTool)
        tool.parameters["additionalProperties"] = False
        return tool

    async def run(
        self,
        arguments: dict[str, Any],
        context: Context[LifespanContextT, RequestT],
        convert_result: bool = False,
    ) -> Any:
        taken = sorted(self.parameters.get("properties", {}))
        unknown = sorted(set(arguments) - set(taken))
        if unknown:
            raise ToolError(
                f"Error executing tool {self.name}: 422 invalid_request: {self.name} takes no"
                f" argument {', '.join(unknown)}; it takes {', '.join(taken)}"
            )
        try:
            self.fn_metadata.validate_arguments(arguments)
        except ValidationError as exc:
            raise ToolError(
                f"Error executing tool {self.name}: 422 invalid_request: {_rules(exc)}"
            ) from None
        return await super().run(arguments, context, convert_result)


class QueryServer(MCPServer[Any]):
    """The MCP server over one query service; a tool finds it as ``ctx.mcp_server``."""

    def __init__(self, base_url: str | None, api_key: str | None) -> None:
        super().__init__(
            "tidegraph", instructions=INSTRUCTIONS, tools=[CheckedTool.of(t) for t in TOOLS]
        )
        self.base_url = base_url
        self.api_key = api_key
        """The key stdio calls use; an HTTP caller brings its own."""


def build_server(base_url: str | None, api_key: str | None) -> MCPServer[Any]:
    """The MCP server over the query service at ``base_url``; ``api_key`` serves stdio."""
    return QueryServer(base_url, api_key)


async def call(ctx: Context, use: Callable[[AsyncClient], Awaitable[T]]) -> T:
    """Run ``use`` with a client carrying the caller's key; errors become tool errors worded
    as the HTTP API words them."""
    server = ctx.mcp_server
    assert isinstance(server, QueryServer)
    key = server.api_key if ctx.headers is None else bearer_token(ctx.headers.get("authorization"))
    try:
        async with AsyncClient(server.base_url, key or "") as tg:
            return await use(tg)
    except ApiError as exc:
        raise ToolError(f"{exc.status} {exc.code}: {exc.message}") from None
    except ClientError as exc:
        raise ToolError(str(exc)) from None
    except ValidationError as exc:  # a request the contract's model refuses
        raise ToolError(f"422 invalid_request: {_rules(exc)}") from None
    except ContractError as exc:  # a name the contract refuses (space, realm)
        raise ToolError(f"422 invalid_request: {exc}") from None


async def list_realms(ctx: Context) -> list[dict[str, Any]]:
    """Realms this key may read, with their document, entity and relation counts and
    head change sequence."""
    found = await call(ctx, lambda tg: tg.realms())
    return [r.model_dump() for r in found.realms]


async def query_data(
    ctx: Context,
    realm: Realm,
    query: Annotated[str, Field(description="The question, in natural language.")],
    mode: Annotated[
        Mode,
        Field(
            description="mix (default): graph + passages; local: around matched entities; "
            "global: community reports; hybrid: local + global; naive: passages only."
        ),
    ] = "mix",
    space: Annotated[str, Field(description="A space, or * for every space.")] = "default",
    as_of: Annotated[
        AsOf,
        Field(
            description="Valid time: facts whose period overlaps this year, month or day "
            "(YYYY, YYYY-MM or YYYY-MM-DD); undated facts always."
        ),
    ] = None,
    as_believed_at: Annotated[BeliefInstant | None, Field(description=BELIEVED_AT_DOC)] = None,
    hops: Annotated[int, Field(ge=0, le=6, description="Traversal depth.")] = 2,
    top_k: Annotated[int, Field(ge=1, le=100, description="Entities and passages.")] = 10,
    include_superseded: Annotated[
        bool, Field(description="Also return relations later superseded.")
    ] = False,
) -> dict[str, Any]:
    """Retrieve the graph facts and passages that answer a question (no synthesis).
    Relations carry validity, state and the doc_keys they come from; passages carry a
    doc_key#chunk citation."""
    options: dict[str, Any] = {"mode": mode, "space": space, "hops": hops, "top_k": top_k}
    options.update(include_superseded=include_superseded)
    if as_of is not None:
        options["as_of"] = as_of
    if as_believed_at is not None:
        options["as_believed_at"] = as_believed_at
    data = await call(ctx, lambda tg: tg.query_data(realm, query, **options))
    return {
        "entities": [
            {"id": e.id, "name": e.name, "type": e.type, "description": e.description}
            for e in data.entities
        ],
        "relations": [compact_relation(r) for r in data.relations],
        "passages": [
            {"cite": c.citation, "doc_key": c.doc_key, "chunk": c.ordinal, "text": c.text}
            for c in data.chunks
        ],
        "communities": [{"title": c.title, "summary": c.summary} for c in data.communities],
    }


async def find_entity(
    ctx: Context,
    realm: Realm,
    name: Annotated[str, Field(description="Canonical name or alias, any case.")],
    include_dormant: Annotated[
        bool, Field(description="Also entities no live document mentions any more.")
    ] = False,
) -> list[dict[str, Any]]:
    """Look an entity up by name or alias: id, canonical name, type, description,
    aliases, and since when it is dormant (if it is)."""
    found = await call(
        ctx, lambda tg: tg.entities(realm, name=name, include_dormant=include_dormant)
    )
    return [e.model_dump(mode="json") for e in found.entities]


async def entity_relations(
    ctx: Context,
    realm: Realm,
    name: Annotated[str, Field(description="Canonical entity name.")],
    include_history: Annotated[
        bool,
        Field(
            description="Also superseded relations, and each relation's belief history:"
            " every interval it was believed current or superseded (by what), oldest"
            " first. Without it: the current relations only."
        ),
    ] = True,
    as_believed_at: Annotated[BeliefInstant | None, Field(description=BELIEVED_AT_DOC)] = None,
) -> list[dict[str, Any]]:
    """Relations in which the entity is subject or object, with their validity period,
    belief interval (t_created, t_expired), state, superseded_by and doc_keys; with
    include_history, superseded ones too and each one's belief history."""

    async def both(tg: AsyncClient) -> list[dict[str, Any]]:
        out: dict[str, RelationListed] = {}
        for subject, object_ in ((name, None), (None, name)):
            page = await tg.relations(
                realm,
                subject=subject,
                object=object_,
                include_superseded=include_history,
                as_believed_at=as_believed_at,
                limit=1000,
            )
            out.update((r.id, r) for r in page.relations)
        listed = [compact_relation(out[k]) for k in sorted(out, key=int)]
        if include_history:
            bound = asyncio.Semaphore(HISTORY_AT_ONCE)

            async def history(item: dict[str, Any]) -> None:
                async with bound:
                    found = await tg.relation_history(realm, item["id"])
                item["history"] = [compact_interval(i) for i in found.history]

            await asyncio.gather(*(history(item) for item in listed))
        return listed

    return await call(ctx, both)


async def relation_sources(
    ctx: Context,
    realm: Realm,
    relation_id: Annotated[str, Field(description="A relation id from another tool.")],
) -> dict[str, Any]:
    """The documents behind a relation (provenance): each doc_key with its title,
    status and when it was indexed."""

    async def sources(tg: AsyncClient) -> dict[str, Any]:
        page = await tg.relations(
            realm, after_id=int(relation_id) - 1, limit=1, include_superseded=True
        )
        if not page.relations or page.relations[0].id != relation_id:
            raise ToolError(f"realm {realm!r} has no readable relation {relation_id}")
        rel = page.relations[0]
        docs = [await tg.document(realm, k, space=rel.space) for k in rel.doc_keys]
        return {
            "relation": compact_relation(rel),
            "documents": [d.model_dump(mode="json") for d in docs],
        }

    if not relation_id.isdigit():
        raise ToolError("relation_id is the numeric id another tool returned")
    return await call(ctx, sources)


async def recent_changes(
    ctx: Context,
    realm: Realm,
    limit: Annotated[int, Field(ge=1, le=200, description="How many changes.")] = 20,
    after_seq: Annotated[
        int | None, Field(description="Read on from this commit sequence instead.")
    ] = None,
) -> dict[str, Any]:
    """The realm's latest graph changes (documents indexed, relations added or
    superseded, entities gone dormant …), newest last, and the head sequence to pass
    as after_seq next time."""

    async def recent(tg: AsyncClient) -> dict[str, Any]:
        start = after_seq
        if start is None:
            head = (await tg.changes(realm, limit=1)).head_seq
            start = max(0, head - limit)
        page = await tg.changes(realm, start, limit=1000)
        picked = page.changes if after_seq is not None else page.changes[-limit:]
        return {
            "changes": [compact_change(c) for c in picked[:limit]],
            "next_seq": page.next_seq,
        }

    return await call(ctx, recent)


TOOLS: list[Callable[..., Awaitable[Any]]] = [
    list_realms,
    query_data,
    find_entity,
    entity_relations,
    relation_sources,
    recent_changes,
]
"""The tools, in the order an agent meets them."""


def compact_relation(r: RelationOut | RelationListed) -> dict[str, Any]:
    """A relation in a few fields, cited by the documents it comes from."""
    out: dict[str, Any] = {
        "id": r.id,
        "fact": f"{r.subject} {'NOT ' if r.negated else ''}{r.predicate} {r.object}",
        "state": r.status,
        "valid": [r.valid_from, r.valid_to],
        "believed": [_iso(r.t_created), _iso(r.t_expired)],
        "weight": r.weight,
        "doc_keys": r.doc_keys,
    }
    if r.superseded_by:
        out["superseded_by"] = r.superseded_by
    return out


def compact_interval(i: BeliefInterval) -> dict[str, Any]:
    """One belief interval: the state, when, and what superseded it."""
    out: dict[str, Any] = {"state": i.state, "believed": [_iso(i.t_created), _iso(i.t_expired)]}
    if i.superseded_by:
        out["superseded_by"] = i.superseded_by
        out["superseded_via"] = i.superseded_via
    return out


def compact_change(c: GraphChange) -> dict[str, Any]:
    out: dict[str, Any] = {"id": c.id, "kind": c.kind.value, "at": _iso(c.belief_time)}
    if c.doc_key:
        out["doc_key"] = c.doc_key
    if c.entity:
        out["entity"] = c.entity.name
    if c.relation:
        r = c.relation
        out["relation"] = f"{r.subject} {'NOT ' if r.negated else ''}{r.predicate} {r.object}"
        out["relation_id"] = r.id
    if c.superseded_by:
        out["superseded_by"] = c.superseded_by
    return out


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat().replace("+00:00", "Z")


def _rules(exc: ValidationError) -> str:
    """Each broken rule as ``field: rule``, the way the HTTP API words its 422s."""
    return "; ".join(f"{p.field}: {p.rule}" for p in problems_from(exc))
