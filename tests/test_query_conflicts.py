"""Conflicting records resolve to the most recent statement (paper §8.5): the synthesis
prompt states the rule and gives every relation and passage the order of the document
stating it, so the model can name the dates that decided; query_data carries the same."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tidegraph.query_service.synthesis import SYSTEM_PROMPT, render_relation
from tidegraph.schemas.api import RelationOut
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import T0, GraphHarness, ent, rel
from query_helpers import api_client, open_pool, query_data, write_doc

pytestmark = pytest.mark.postgres

ADA = "Ada Lovelace"


class RecordingChat:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, system: str, prompt: str) -> str:
        self.calls.append((system, prompt))
        return "Globex, stated 2023-06-01 after Acme (2020-01-01) [2]."


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture(scope="module")
async def realm(pg_dsn: str) -> str:
    """Where Ada works, stated twice (no exclusive group, so both stay current), and the
    later statement repeated in another space by an even later document."""
    name = "k" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, RealmConfig(embedder="hashing:8"))
        for doc, org, order, space in (
            ("old.md", "Acme Mills", "2020-01-01", "default"),
            ("new.md", "Globex Works", "2023-06-01", "default"),
            ("copy.md", "Globex Works", "2024-02-02", "other"),
        ):
            await write_doc(
                g,
                doc,
                [
                    (
                        f"{ADA} works at {org}.",
                        [ent(ADA), ent(org, "Org")],
                        [rel(ADA, "works_at", org)],
                    )
                ],
                space=space,
                order_key=order,
            )
    return name


async def test_relations_and_passages_carry_their_documents_order(
    pool: AsyncConnectionPool[Any], realm: str
) -> None:
    async with api_client(pool) as client:
        out = await query_data(client, realm, query="Where does Ada Lovelace work?", mode="mix")
        stated = {r["object"]: r["order_key"] for r in out["relations"]}
        assert stated == {"Acme Mills": "2020-01-01", "Globex Works": "2023-06-01"}
        assert {c["doc_key"]: c["order_key"] for c in out["chunks"]} == {
            "old.md": "2020-01-01",
            "new.md": "2023-06-01",
        }
        every = await query_data(client, realm, query="Where does Ada Lovelace work?", space="*")
        merged = [r for r in every["relations"] if r["object"] == "Globex Works"]
        assert len(merged) == 1 and merged[0]["order_key"] == "2024-02-02"  # the latest
        assert merged[0]["doc_keys"] == ["copy.md", "new.md"]


async def test_the_prompt_states_the_rule_and_the_deciding_dates(
    pool: AsyncConnectionPool[Any], realm: str
) -> None:
    chat = RecordingChat()
    async with api_client(pool, chat=chat) as client:
        r = await client.post(
            f"/v1/realms/{realm}/query", json={"query": "Where does Ada Lovelace work?"}
        )
        assert r.status_code == 200, r.text
    system, prompt = chat.calls[-1]
    assert "most recent statement" in system and "dates that decided" in system
    assert "(Ada Lovelace) --[works_at]--> (Acme Mills) [stated 2020-01-01]" in prompt
    assert "(Ada Lovelace) --[works_at]--> (Globex Works) [stated 2023-06-01]" in prompt
    for n, ref in enumerate(r.json()["references"], start=1):
        order = {"old.md": "2020-01-01", "new.md": "2023-06-01"}[ref["doc_key"]]
        assert f"[{n}] ({ref['citation']}) [stated {order}]" in prompt


def test_stated_order_sits_between_validity_and_supersession() -> None:
    hit = RelationOut(
        id="1", space="default", subject="A", predicate="p", object="B", negated=False,
        valid_from="2020", valid_to=None, t_created=T0, t_expired=None, superseded_by="2",
        status="superseded", weight=1, hop=1, channels=[], doc_keys=[], score=1.0,
        order_key="2021-03-04",
    )  # fmt: skip
    assert render_relation(hit) == "(A) --[p]--> (B) [from 2020] [stated 2021-03-04] [superseded]"
    assert "[stated" in SYSTEM_PROMPT
