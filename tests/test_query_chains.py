"""Evidence chains through ``query_data`` on real PostgreSQL: a question whose answer lies
beyond the entity it names gets the chain first, ahead of that entity's other relations
and of people with similar names; each relation reached along a path reports it, whole
and earlier in the answer; ``as_of`` and ``as_believed_at`` hold for every link."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.models.client import LLMClient
from tidegraph.indexer.models.hashing import HashingEmbedder
from tidegraph.infra.commands.serve import chat_model
from tidegraph.schemas.periods import covered
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from llm_server import Fault, ScriptedLLMServer
from query_helpers import api_client, open_pool, query_data, write_doc

pytestmark = pytest.mark.postgres

Line = tuple[str, str, str]
MODES = ("mix", "local", "hybrid")


class Built:
    def __init__(self, realm: str, instants: list[datetime]) -> None:
        self.realm = realm
        self.instants = instants
        """Belief instants after the first, second and last version of Rhea's facts."""


def _person(name: str) -> Any:
    return ent(name, "Person")


@pytest.fixture(scope="module")
async def built(pg_dsn: str) -> Built:
    realm = "c" + uuid.uuid4().hex[:12]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, realm, RealmConfig(embedder="hashing:384"))
        g.embedder = HashingEmbedder(384)
        ilse = [
            rel("Ilse Marr", "studied_at", "Vell University"),
            rel("Ilse Marr", "born_in", "Tarnland"),
            rel("Ilse Marr", "lives_in", "Quay"),
            rel("Ilse Marr", "knows", "Ilse Mauer"),
            rel("Ilse Marr", "wrote", "Notes on Tides"),
            rel("Ilse Marr", "collaborated_with", "Odo Brenn"),
            rel("Ilse Mauer", "studied_at", "Dorr University"),
            rel("Dorr University", "located_in", "Pellia"),
            rel("Vell University", "located_in", "Orskland"),
        ]
        ilse += [rel(f"Student {c}", "studied_at", "Vell University") for c in "ABCDEFGHIJKL"]
        ents = [
            _person("Ilse Marr"),
            _person("Ilse Mauer"),
            _person("Odo Brenn"),
            ent("Vell University", "University"),
            ent("Dorr University", "University"),
            ent("Tarnland", "Country"),
            ent("Orskland", "Country"),
            ent("Pellia", "Country"),
            ent("Quay", "City"),
            ent("Notes on Tides", "Work"),
            *[_person(f"Student {c}") for c in "ABCDEFGHIJKL"],
        ]
        await write_doc(g, "people/ilse.md", [("Ilse Marr and her university.", ents, ilse)])
        juno = [
            rel("Juno Pike", "member_of", "Kest Lab", vf="2001", vt="2004"),
            rel("Juno Pike", "member_of", "Norr Lab", vf="2005"),
            rel("Kest Lab", "funded_by", "Arden Foundation", vf="2001", vt="2002"),
            rel("Kest Lab", "funded_by", "Cole Foundation", vf="2003"),
            rel("Norr Lab", "funded_by", "Brisk Foundation"),
            rel("Brisk Foundation", "based_in", "Orskland"),
            rel("Cole Foundation", "based_in", "Pellia"),
        ]
        labs = [ent(n, "Organization") for n in ("Kest Lab", "Norr Lab")]
        funds = [ent(f"{n} Foundation", "Organization") for n in ("Arden", "Cole", "Brisk")]
        countries = [ent("Orskland", "Country"), ent("Pellia", "Country")]
        await write_doc(
            g,
            "people/juno.md",
            [("Juno Pike's labs.", [_person("Juno Pike"), *labs, *funds, *countries], juno)],
        )
        # Odo wrote a paper in a journal Ama edits, and edits a journal that published Pia's:
        # the mirror chain names the same three terms the other way round
        odo = [
            rel("Odo Brenn", "wrote", "Tide Tables"),
            rel("Tide Tables", "published_in", "Sound Review"),
            rel("Sound Review", "edited_by", "Ama Roe"),
            rel("Wave Review", "edited_by", "Odo Brenn"),
            rel("Gull Notes", "published_in", "Wave Review"),
            rel("Pia Lunn", "wrote", "Gull Notes"),
        ]
        odo_ents = [_person(n) for n in ("Odo Brenn", "Ama Roe", "Pia Lunn")]
        odo_ents += [ent(n, "Work") for n in ("Tide Tables", "Gull Notes")]
        odo_ents += [ent(n, "Periodical") for n in ("Sound Review", "Wave Review")]
        await write_doc(g, "people/odo.md", [("Odo.", odo_ents, odo)])
        instants = []
        rhea = [_person("Rhea Quill"), ent("Sorn Lab", "Organization")]
        await write_doc(
            g, "people/rhea.md", [("Rhea.", rhea, [rel("Rhea Quill", "member_of", "Sorn Lab")])]
        )
        sorn = [ent("Sorn Lab", "Organization"), ent("Dane Foundation", "Organization")]
        funded = [rel("Sorn Lab", "funded_by", "Dane Foundation")]
        await write_doc(g, "labs/sorn.md", [("Sorn.", sorn, funded)])
        instants.append(g.clock)
        sorn = [ent("Sorn Lab", "Organization"), ent("Eld Foundation", "Organization")]
        funded = [rel("Sorn Lab", "funded_by", "Eld Foundation")]
        await write_doc(g, "labs/sorn.md", [("Sorn, later.", sorn, funded)])
        instants.append(g.clock)
        rhea = [_person("Rhea Quill"), ent("Tove Lab", "Organization")]
        tove = [rel("Rhea Quill", "member_of", "Tove Lab")]
        await write_doc(g, "people/rhea.md", [("Rhea moved.", rhea, tove)])
        tove_funds = [ent("Tove Lab", "Organization"), ent("Fisk Foundation", "Organization")]
        funded = [rel("Tove Lab", "funded_by", "Fisk Foundation")]
        await write_doc(g, "labs/tove.md", [("Tove.", tove_funds, funded)])
        instants.append(g.clock)
    return Built(realm, instants)


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture(scope="module")
async def client(pool: AsyncConnectionPool[Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(pool, embedder=HashingEmbedder(384)) as c:
        yield c


def _line(r: dict[str, Any]) -> Line:
    return (r["subject"], r["predicate"], r["object"])


def _chains(out: dict[str, Any]) -> list[list[Line]]:
    """Each relation's reported path as lines (path ids resolved within the answer)."""
    by_id = {r["id"]: r for r in out["relations"]}
    return [[_line(by_id[x]) for x in r["path"]] for r in out["relations"] if r["path"]]


def _assert_whole(out: dict[str, Any]) -> None:
    """Every id on a path is a relation of the answer placed before the one it reaches."""
    seen: list[str] = []
    for r in out["relations"]:
        if r["path"]:
            assert r["path"][-1] == r["id"]
            assert set(r["path"][:-1]) <= set(seen), (r, seen)
            assert r["hop"] is not None and r["hop"] <= len(r["path"])
        seen.append(r["id"])


STUDIED = ("Ilse Marr", "studied_at", "Vell University")
LOCATED = ("Vell University", "located_in", "Orskland")


@pytest.mark.parametrize("mode", MODES)
async def test_the_chain_beats_the_named_entitys_other_relations(
    client: httpx.AsyncClient, built: Built, mode: str
) -> None:
    q = "In which country is the university where Ilse Marr studied located?"
    # top_k 1: Ilse is the only matched entity (no vector match nearer the chain's end)
    out = await query_data(client, built.realm, query=q, mode=mode, top_k=1)
    lines = [_line(r) for r in out["relations"]]
    # Ilse's own relations (born_in a country among them) and Ilse Mauer's university
    # and its country all come after the chain
    assert lines[:2] == [STUDIED, LOCATED], lines
    located = out["relations"][1]
    assert located["path"] == [out["relations"][0]["id"], located["id"]]
    assert located["hop"] == 2 and "path" in located["channels"]
    assert out["relations"][0]["path"] is None  # on the named entity
    assert out["stats"]["chains"]["leading"] >= 1
    _assert_whole(out)


async def test_a_chain_the_question_names_by_its_far_end(
    client: httpx.AsyncClient, built: Built
) -> None:
    # "located" is not written: the chain ends at an entity whose type the question names
    q = "Which country is the university Ilse Marr studied at in?"
    out = await query_data(client, built.realm, query=q, mode="local")
    assert [_line(r) for r in out["relations"][:2]] == [STUDIED, LOCATED]
    assert _chains(out)[0] == [STUDIED, LOCATED]


async def test_a_single_entity_question_follows_no_chain(
    client: httpx.AsyncClient, built: Built
) -> None:
    # Ilse's own studied_at explains the question: no path to other students' universities
    out = await query_data(client, built.realm, query="Where did Ilse Marr study?")
    assert _line(out["relations"][0]) == STUDIED
    assert out["stats"]["chains"] == {"read": 0, "leading": 0, "following": 0}
    assert all("path" not in r["channels"] for r in out["relations"])


async def test_three_hops_report_the_whole_path(client: httpx.AsyncClient, built: Built) -> None:
    q = "In which country is the foundation based that funds the lab of Juno Pike?"
    out = await query_data(client, built.realm, query=q, mode="mix", hops=3, as_of="2006")
    chain = [
        ("Juno Pike", "member_of", "Norr Lab"),
        ("Norr Lab", "funded_by", "Brisk Foundation"),
        ("Brisk Foundation", "based_in", "Orskland"),
    ]
    assert [_line(r) for r in out["relations"][:3]] == chain
    assert out["relations"][2]["path"] == [r["id"] for r in out["relations"][:3]]
    assert out["relations"][1]["path"] == [r["id"] for r in out["relations"][:2]]
    _assert_whole(out)
    two = await query_data(client, built.realm, query=q, mode="mix", hops=2, as_of="2006")
    assert all(len(r["path"] or ()) <= 2 for r in two["relations"])


@pytest.mark.parametrize("mode", MODES)
async def test_the_chain_read_the_right_way_round_leads(
    client: httpx.AsyncClient, built: Built, mode: str
) -> None:
    q = "Who edited the journals that published the papers Odo Brenn wrote?"
    out = await query_data(client, built.realm, query=q, mode=mode, hops=3)
    assert [_line(r) for r in out["relations"][:3]] == [
        ("Odo Brenn", "wrote", "Tide Tables"),
        ("Tide Tables", "published_in", "Sound Review"),
        ("Sound Review", "edited_by", "Ama Roe"),
    ]
    _assert_whole(out)


@pytest.mark.parametrize(
    ("as_of", "lab", "foundation"),
    [
        ("2002", "Kest Lab", "Arden Foundation"),
        ("2003", "Kest Lab", "Cole Foundation"),
        ("2006", "Norr Lab", "Brisk Foundation"),
    ],
)
async def test_as_of_holds_for_every_link_of_a_chain(
    client: httpx.AsyncClient, built: Built, as_of: str, lab: str, foundation: str
) -> None:
    q = "Which foundation funds the lab that Juno Pike is a member of?"
    for mode in MODES:
        out = await query_data(client, built.realm, query=q, mode=mode, as_of=as_of)
        lines = [_line(r) for r in out["relations"]]
        assert lines[:2] == [("Juno Pike", "member_of", lab), (lab, "funded_by", foundation)]
        first, last = covered(as_of)
        by_id = {r["id"]: r for r in out["relations"]}
        for r in out["relations"]:
            for x in r["path"] or ():
                link = by_id[x]  # a period overlapping the year asked about, or none
                assert link["valid_from"] is None or covered(link["valid_from"])[0] <= last
                assert link["valid_to"] is None or covered(link["valid_to"])[1] >= first
        _assert_whole(out)


async def test_as_believed_at_holds_for_every_link_of_a_chain(
    client: httpx.AsyncClient, built: Built
) -> None:
    q = "Which foundation funds the lab that Rhea Quill is a member of?"
    expected = [
        [("Rhea Quill", "member_of", "Sorn Lab"), ("Sorn Lab", "funded_by", "Dane Foundation")],
        [("Rhea Quill", "member_of", "Sorn Lab"), ("Sorn Lab", "funded_by", "Eld Foundation")],
        [("Rhea Quill", "member_of", "Tove Lab"), ("Tove Lab", "funded_by", "Fisk Foundation")],
    ]
    for at, chain in zip(built.instants, expected, strict=True):
        out = await query_data(
            client, built.realm, query=q, mode="local", as_believed_at=at.isoformat()
        )
        assert [_line(r) for r in out["relations"][:2]] == chain
        paths = _chains(out)
        assert paths[0] == chain
        by_id = {r["id"]: r for r in out["relations"]}
        for r in out["relations"]:  # every link as believed then: current, stated by then
            for x in r["path"] or ():
                link = by_id[x]
                assert link["status"] == "current"
                assert datetime.fromisoformat(link["t_created"]) <= at
        _assert_whole(out)
    now = await query_data(client, built.realm, query=q, mode="local")
    assert [_line(r) for r in now["relations"][:2]] == expected[-1]


async def test_query_presents_the_chain_with_the_source_of_every_link(
    pool: AsyncConnectionPool[Any],
    built: Built,
    llm_server: ScriptedLLMServer,
    make_llm_client: Callable[..., LLMClient],
) -> None:
    # the real chat path: the openai client against the scripted server, which records
    # the prompt it is sent
    llm_server.enqueue(Fault.reply("Orskland: Ilse Marr studied at Vell University."))
    chat = chat_model(make_llm_client())
    q = "In which country is the university where Ilse Marr studied located?"
    async with api_client(pool, embedder=HashingEmbedder(384), chat=chat) as c:
        r = await c.post(
            f"/v1/realms/{built.realm}/query", json={"query": q, "mode": "local", "top_k": 1}
        )
    assert r.status_code == 200, r.text
    [(_, body)] = [x for x in llm_server.requests if x[0] == "chat"]
    prompt = body["messages"][-1]["content"]
    assert (
        "- chain: (Ilse Marr) --[studied_at]--> (Vell University) --[located_in]--> (Orskland)\n"
        "  1. (Ilse Marr) --[studied_at]--> (Vell University) (source: people/ilse.md)\n"
        "  2. (Vell University) --[located_in]--> (Orskland) (source: people/ilse.md)"
    ) in prompt
    assert "cites the source of every link" in body["messages"][0]["content"]
