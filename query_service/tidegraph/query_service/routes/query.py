"""Retrieval (``query_data``) and retrieval with a synthesised answer (``query``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from tidegraph.query_service.context import BLOCKS
from tidegraph.query_service.errors import ChatModelNotConfigured, Unavailable
from tidegraph.query_service.responses import json_response
from tidegraph.query_service.routes.params import Auth, CopyQuery, RealmPath
from tidegraph.query_service.service import Service
from tidegraph.query_service.synthesis import SYSTEM_PROMPT, ChatModel, build_prompt
from tidegraph.schemas import (
    QueryDataRequest,
    QueryDataResponse,
    QueryRequest,
    QueryResponse,
    TidegraphError,
)


def router(svc: Service, chat: ChatModel | None) -> APIRouter:
    api = APIRouter(tags=["query"])

    @api.post("/v1/realms/{realm}/query_data", response_model=QueryDataResponse)
    async def query_data(
        realm: RealmPath, body: QueryDataRequest, copy: CopyQuery = None, auth: Auth = None
    ) -> Response:
        """Retrieval without synthesis."""
        return json_response(await svc.retrieve(realm, auth, svc.params_of(body), copy))

    @api.post("/v1/realms/{realm}/query", response_model=QueryResponse)
    async def query(
        realm: RealmPath, body: QueryRequest, copy: CopyQuery = None, auth: Auth = None
    ) -> Response:
        """Retrieval plus a synthesised answer with references."""
        params = svc.params_of(body)
        if chat is None:
            await svc.lookup(realm, auth, copy)
            raise ChatModelNotConfigured()
        data = await svc.retrieve(realm, auth, params, copy)
        given = body.token_budgets
        budgets = {b: n for b in BLOCKS if given and (n := getattr(given, b)) is not None}
        prompt = build_prompt(body.query, data, body.max_prompt_chars, budgets)
        for block, st in prompt.blocks.items():
            svc.metrics.context_items.labels(block, "retrieved").observe(st.retrieved_items)
            svc.metrics.context_items.labels(block, "prompt").observe(st.prompt_items)
            svc.metrics.context_chars.labels(block, "retrieved").observe(st.retrieved_chars)
            svc.metrics.context_chars.labels(block, "prompt").observe(st.prompt_chars)
        try:
            answer = await chat(SYSTEM_PROMPT, prompt.text)
        except TidegraphError as exc:
            raise Unavailable(f"the chat model failed: {exc}") from exc
        return json_response(
            {
                "answer": answer,
                "references": prompt.references,
                "prompt": {
                    "retrieved_chars": prompt.retrieved_chars,
                    "prompt_chars": prompt.prompt_chars,
                    "clipped": prompt.clipped,
                    "budget": prompt.budget,
                    "blocks": prompt.blocks,
                },
                "data": data,
            }
        )

    return api
