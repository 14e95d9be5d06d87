"""Graph export: each format read back with the library or format description it claims to
fit — GraphML by networkx and python-igraph, CSV by neo4j-admin's header rules (read here
by a reader of those rules), JSON lines by the API's models — and compared with the API's
listings for the same filters, time-travel instants included; over HTTP (key checks
first) and through ``tidegraph export``."""

from __future__ import annotations

import io
import json
import tempfile
import uuid
import zipfile
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import igraph
import networkx as nx
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool

from tidegraph.query_service.export_formats import (
    EDGE_FIELDS,
    NODE_FIELDS,
    ExportRefused,
    GraphInfo,
    format_named,
)
from tidegraph.schemas.api import EntityListed, RelationListed
from tidegraph.schemas.realm_config import RealmConfig

from graph_helpers import GraphHarness, ent, rel
from local_services import env_without_settings, run_cli
from query_helpers import api_client, open_pool

pytestmark = pytest.mark.postgres

ADA = ent(
    "Ada Lovelace",
    desc='Wrote "notes" <on> the engine & more,\nover two lines',
    aliases=("Ada, Countess of Lovelace", "A. A. L."),
)
BEN = ent("Ben Arlo", "Person", desc="  spaced  ")
CHARLES = ent("Charles Babbage")
ENGINE = ent("Analytical Engine", "Machine")
CONFIG = RealmConfig(embedder="hashing:8", exclusive_groups=[["ally_of", "enemy_of"]])


@pytest.fixture(scope="module")
async def realm(pg_dsn: str) -> tuple[str, list[datetime]]:
    """A realm written in four steps; the belief instant after each."""
    name = "ex" + uuid.uuid4().hex[:12]
    instants: list[datetime] = []
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, CONFIG)
        steps = [
            ("a", "default", "1", [ADA, BEN, CHARLES], [
                rel("Ada Lovelace", "worked_with", "Charles Babbage", vf="1833"),
                rel("Ada Lovelace", "ally_of", "Ben Arlo"),
            ]),
            ("b", "default", "2", [ADA, BEN, CHARLES, ENGINE], [
                rel("Ada Lovelace", "enemy_of", "Ben Arlo"),
                rel("Charles Babbage", "designed", "Analytical Engine", vf="1834", vt="1871"),
            ]),
            ("c", "lab", "3", [ent("Mara Ellison"), ent("Brindle Works", "Organization")], [
                rel("Mara Ellison", "works_for", "Brindle Works", vf="2020-05"),
            ]),
            ("a", "default", "4", [ADA, BEN, CHARLES], [
                rel("Ada Lovelace", "worked_with", "Charles Babbage", vf="1833"),
                rel("Ada Lovelace", "ally_of", "Ben Arlo"),  # later: enemy_of is superseded
                rel("Ada Lovelace", "wrote", "Charles Babbage", negated=True),
            ]),
        ]  # fmt: skip
        for key, space, order, entities, relations in steps:
            await g.upsert(key, [(entities, relations)], order_key=order, space=space)
            instants.append(g.clock)
    return name, instants


@pytest.fixture(scope="module")
async def pool(pg_dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with open_pool(pg_dsn) as p:
        yield p


@pytest.fixture
async def client(pool: AsyncConnectionPool[Any]) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(pool) as c:
        yield c


Case = tuple[str, str | None, int | None, bool]
"""space, as_of, index of the belief instant (None: now), include_superseded."""
CASES: list[Case] = [
    ("*", None, None, False),
    ("*", None, None, True),
    ("default", "1840", None, True),
    ("*", None, 1, True),
    ("default", None, 0, False),
    ("lab", "2021", 2, False),
]


def _params(case: Case, instants: list[datetime]) -> dict[str, str]:
    space, as_of, at, superseded = case
    out = {"space": space, "include_superseded": str(superseded).lower()}
    if as_of is not None:
        out["as_of"] = as_of
    if at is not None:
        out["as_believed_at"] = instants[at].isoformat()
    return out


async def _api(client: httpx.AsyncClient, realm: str, params: dict[str, str]) -> Any:
    """What the listings answer: relations, live entities (both as the API's JSON)."""
    r = await client.get(f"/v1/realms/{realm}/relations", params={**params, "limit": 1000})
    assert r.status_code == 200, r.text
    relations = r.json()["relations"]
    entity_params = {k: v for k, v in params.items() if k in ("space", "as_believed_at")}
    r = await client.get(f"/v1/realms/{realm}/entities", params={**entity_params, "limit": 1000})
    assert r.status_code == 200, r.text
    return relations, r.json()["entities"]


def _norm(record: dict[str, Any], fields: tuple[str, ...]) -> tuple[Any, ...]:
    """A record comparable across formats: instants as datetimes, lists as tuples."""
    out = []
    for f in fields:
        v = record.get(f)
        if isinstance(v, str) and f in (
            "t_created",
            "t_expired",
            "dormant_since",
            "archived_since",
        ):
            v = datetime.fromisoformat(v.replace("Z", "+00:00"))
        if isinstance(v, list):
            v = tuple(v)
        out.append(v)
    return tuple(out)


API_NODE = tuple(f for f in NODE_FIELDS if f != "state")
API_EDGE = tuple(f for f in EDGE_FIELDS if f not in ("subject_id", "object_id"))


def _expected(relations: list[Any], entities: list[Any]) -> tuple[set[Any], set[Any]]:
    return {_norm(e, API_NODE) for e in entities}, {_norm(r, API_EDGE) for r in relations}


def _check_graph(
    nodes: list[dict[str, Any]], edges: list[dict[str, Any]], relations: Any, entities: Any
) -> None:
    """Nodes are the listed entities (live), edges the listed relations, each edge's ends
    are nodes with the names the relation gives."""
    want_nodes, want_edges = _expected(relations, entities)
    assert {_norm(n, API_NODE) for n in nodes} == want_nodes
    assert len(nodes) == len(want_nodes) and all(n["state"] == "live" for n in nodes)
    assert {_norm(e, API_EDGE) for e in edges} == want_edges and len(edges) == len(want_edges)
    names = {n["id"]: n["name"] for n in nodes}
    for e in edges:
        assert (names[e["subject_id"]], names[e["object_id"]]) == (e["subject"], e["object"])


# ------------------------------------------------------------------ readers


def _from_graphml(data: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """networkx's reading, the lists back from their JSON text."""
    g = nx.read_graphml(io.BytesIO(data), force_multigraph=True)
    assert g.is_directed()
    nodes = []
    for node_id, attrs in g.nodes(data=True):
        assert attrs.pop("label") == attrs["name"]
        nodes.append({"id": node_id, **attrs, "aliases": json.loads(attrs["aliases"])})
    edges = []
    for source, target, key, attrs in g.edges(keys=True, data=True):
        assert (source, target) == (attrs["subject_id"], attrs["object_id"])
        edges.append({"id": str(key), **attrs, "doc_keys": json.loads(attrs["doc_keys"])})
    return nodes, edges


def _igraph_agrees(data: bytes, nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> None:
    with tempfile.NamedTemporaryFile(suffix=".graphml") as fh:  # igraph reads files only
        fh.write(data)
        fh.flush()
        g = igraph.Graph.Read_GraphML(fh.name)
    assert g.is_directed() and g.vcount() == len(nodes) and g.ecount() == len(edges)
    ids = g.vs["id"]
    assert sorted(ids) == sorted(n["id"] for n in nodes)
    assert sorted(g.vs["name"]) == sorted(n["name"] for n in nodes)
    got = sorted((ids[e.source], ids[e.target], e["predicate"], e["weight"]) for e in g.es)
    want = [(e["subject_id"], e["object_id"], e["predicate"], e["weight"]) for e in edges]
    assert got == sorted(want)


def neo4j_fields(text: str) -> Iterator[list[str | None]]:
    """Rows of a CSV file as neo4j-admin reads them: comma-separated, a field in double
    quotes may hold commas, line breaks and doubled quotes; an empty unquoted field is no
    value (``None``), a quoted empty one an empty string."""
    row: list[str | None] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == '"':
            j, buf = i + 1, []
            while True:
                k = text.index('"', j)
                buf.append(text[j:k])
                if text[k + 1 : k + 2] == '"':
                    buf.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            row.append("".join(buf))
        else:
            j = i
            while j < n and text[j] not in ",\n":
                j += 1
            row.append(text[i:j] or None)
            i = j
        if i < n and text[i] == ",":
            i += 1
            if i == n or text[i] == "\n":
                row.append(None)
        if i < n and text[i] == "\n":
            yield row
            row = []
            i += 1
    if row:
        yield row


def _typed(header: str, value: str | None) -> tuple[str, Any]:
    """A header ``name:type`` and a field, as a property (the name part; no value: None)."""
    name, _, typ = header.partition(":")
    if value is None:
        return name, [] if typ.endswith("[]") else None
    if typ == "string[]":
        return name, value.split(";")
    if typ == "int":
        return name, int(value)
    if typ == "boolean":
        return name, value == "true"
    if typ == "datetime":
        return name, datetime.fromisoformat(value)
    return name, value


def _from_csv(nodes_csv: str, edges_csv: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    [node_header, *node_rows] = list(neo4j_fields(nodes_csv))
    [edge_header, *edge_rows] = list(neo4j_fields(edges_csv))
    assert "id:ID" in node_header and ":LABEL" in node_header
    assert edge_header[:3] == [":START_ID", ":END_ID", ":TYPE"]
    nodes = []
    for row in node_rows:
        assert len(row) == len(node_header)
        fields = dict(zip(node_header, row, strict=True))
        record = dict(_typed(h, v) for h, v in fields.items() if not h.startswith(":"))
        assert (fields[":LABEL"] or "").split(";") == ["Entity", record["type"]]
        nodes.append(record)
    edges = []
    for row in edge_rows:
        assert len(row) == len(edge_header)
        fields = dict(zip(edge_header, row, strict=True))
        record = dict(_typed(h, v) for h, v in fields.items() if not h.startswith(":"))
        assert fields[":TYPE"] == record["predicate"]
        edges.append({**record, "subject_id": fields[":START_ID"], "object_id": fields[":END_ID"]})
    ids = [n["id"] for n in nodes]
    assert len(set(ids)) == len(ids)  # neo4j-admin refuses duplicate ids
    assert {e["subject_id"] for e in edges} | {e["object_id"] for e in edges} <= set(ids)
    return nodes, edges


def _from_jsonl(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in data.decode().splitlines()]
    head, rest = lines[0], lines[1:]
    assert head["kind"] == "graph"
    nodes = [x for x in rest if x["kind"] == "entity"]
    edges = [x for x in rest if x["kind"] == "relation"]
    assert len(nodes) + len(edges) == len(rest)
    for n in nodes:
        EntityListed.model_validate(n)
    for e in edges:
        RelationListed.model_validate(e)
    return head, nodes, edges


# ------------------------------------------------------------------ over HTTP


async def _download(client: httpx.AsyncClient, realm: str, fmt: str, params: dict[str, str]) -> Any:
    r = await client.get(f"/v1/realms/{realm}/export", params={"format": fmt, **params})
    assert r.status_code == 200, r.text
    return r


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
async def test_each_format_holds_what_the_api_lists(
    client: httpx.AsyncClient, realm: tuple[str, list[datetime]], case: Case
) -> None:
    name, instants = realm
    params = _params(case, instants)
    relations, entities = await _api(client, name, params)

    r = await _download(client, name, "graphml", params)
    assert r.headers["content-type"].startswith("application/graphml+xml")
    assert r.headers["content-disposition"].startswith(f'attachment; filename="{name}')
    nodes, edges = _from_graphml(r.content)
    _check_graph(nodes, edges, relations, entities)
    _igraph_agrees(r.content, nodes, edges)

    r = await _download(client, name, "csv", params)
    assert r.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(r.content)) as archive:
        assert archive.namelist() == ["nodes.csv", "relationships.csv"]
        nodes, edges = _from_csv(
            archive.read("nodes.csv").decode(), archive.read("relationships.csv").decode()
        )
    _check_graph(nodes, edges, relations, entities)

    r = await _download(client, name, "jsonl", params)
    head, nodes, edges = _from_jsonl(r.content)
    _check_graph(nodes, edges, relations, entities)
    assert head["realm"] == name and head["space"] == case[0] and head["as_of"] == case[1]


async def test_the_filters_make_a_difference(
    client: httpx.AsyncClient, realm: tuple[str, list[datetime]]
) -> None:
    """The cases above are not all one graph: superseded, valid-time, space and
    belief-time filters each change what is exported."""
    name, instants = realm
    sizes = []
    for case in CASES:
        _, nodes, edges = _from_jsonl(
            (await _download(client, name, "jsonl", _params(case, instants))).content
        )
        sizes.append((len(nodes), len(edges), {e["status"] for e in edges}))
    now, superseded, in_1840, at_1, at_0, lab = sizes
    assert superseded[1] > now[1] and "superseded" in superseded[2]
    assert in_1840[1] < superseded[1]
    assert at_0[1] < now[1] and at_1 != superseded
    assert lab[1] == 1


async def test_every_route_checks_the_key_first(
    pool: AsyncConnectionPool[Any], realm: tuple[str, list[datetime]]
) -> None:
    name, _ = realm
    async with api_client(pool, api_keys=f"k1={name};k2=other;k3=*") as c:
        url = f"/v1/realms/{name}/export"
        assert (await c.get(url)).status_code == 401
        denied = await c.get(url, headers={"Authorization": "Bearer k2"})
        assert denied.status_code == 403
        ok = await c.get(url, headers={"Authorization": "Bearer k1"})
        assert ok.status_code == 200 and b"<graphml" in ok.content
        missing = await c.get("/v1/realms/nosuch/export", headers={"Authorization": "Bearer k3"})
        assert missing.status_code == 404
        bad = await c.get(url, params={"format": "dot"}, headers={"Authorization": "Bearer k1"})
        assert bad.status_code == 422
        bad = await c.get(url, params={"space": "a b"}, headers={"Authorization": "Bearer k1"})
        assert bad.status_code == 422
        bad = await c.get(url, params={"as_of": "18x"}, headers={"Authorization": "Bearer k1"})
        assert bad.status_code == 422


# ------------------------------------------------------------------ the command


def test_the_command_writes_the_same_graph(
    pg_dsn: str, realm: tuple[str, list[datetime]], tmp_path: Path
) -> None:
    name, instants = realm
    env = env_without_settings(TIDEGRAPH_PG_DSN=pg_dsn)
    at = ["--as-believed-at", instants[1].isoformat(), "--include-superseded"]
    done = run_cli(
        ["export", name, "--format", "graphml", "-o", str(tmp_path / "g.graphml"), *at], env
    )
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stderr and "entities" in done.stderr
    graphml = _from_graphml((tmp_path / "g.graphml").read_bytes())
    done = run_cli(["export", name, "--format", "csv", "-o", str(tmp_path / "csv"), *at], env)
    assert done.returncode == 0, done.stderr
    csv = _from_csv(
        (tmp_path / "csv" / "nodes.csv").read_text(),
        (tmp_path / "csv" / "relationships.csv").read_text(),
    )
    done = run_cli(["export", name, "--format", "jsonl", *at], env)
    assert done.returncode == 0, done.stderr
    _, *jsonl = _from_jsonl(done.stdout.encode())
    for nodes, edges in (graphml, csv, jsonl):
        assert {_norm(n, NODE_FIELDS) for n in nodes} == {_norm(n, NODE_FIELDS) for n in jsonl[0]}
        assert {_norm(e, EDGE_FIELDS) for e in edges} == {_norm(e, EDGE_FIELDS) for e in jsonl[1]}
    assert sorted(p.name for p in tmp_path.rglob("*")) == [
        "csv", "g.graphml", "nodes.csv", "relationships.csv",
    ]  # fmt: skip


async def test_a_value_holding_the_array_delimiter_is_refused_not_split(
    pg_dsn: str, tmp_path: Path
) -> None:
    name = "exd" + uuid.uuid4().hex[:10]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        g = await GraphHarness.create(conn, name, CONFIG)
        odd = ent("Odd One", aliases=("first; second",))
        await g.upsert("d", [([odd, BEN], [rel("Odd One", "ally_of", "Ben Arlo")])])
    env = env_without_settings(TIDEGRAPH_PG_DSN=pg_dsn)
    out = tmp_path / "csv"
    refused = run_cli(["export", name, "--format", "csv", "-o", str(out)], env)
    assert refused.returncode == 1
    assert "array delimiter" in refused.stderr and "first; second" in refused.stderr
    assert list(out.iterdir()) == []  # no file that looks whole
    done = run_cli(
        ["export", name, "--format", "csv", "-o", str(out), "--array-delimiter", "|"], env
    )
    assert done.returncode == 0, done.stderr
    text = (out / "nodes.csv").read_text()
    assert '"Entity|Person","Odd One","Person","","first; second"' in text
    bad = run_cli(["export", name, "--format", "csv"], env)
    assert bad.returncode == 2 and "--output" in bad.stderr


# ------------------------------------------------------------------ pure


text_st = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@given(text_st, st.lists(text_st.filter(lambda s: ";" not in s), max_size=3), text_st)
def test_any_text_survives_each_format(name: str, aliases: list[str], description: str) -> None:
    """Quotes, commas, line breaks, markup and control characters: the CSV reads back
    exactly, GraphML exactly but for what XML cannot hold in text (U+FFFD instead; lists
    are JSON, whose escapes carry them)."""
    node = {
        "id": "7", "space": "default", "name": name, "type": "T", "description": description,
        "aliases": aliases, "dormant_since": None, "archived_since": None, "state": "live",
    }  # fmt: skip
    info = GraphInfo("r", "*", None, None, False)
    csv = format_named("csv")
    [header, row] = list(neo4j_fields(csv.head(info) + csv.node(node)))
    props = dict(_typed(h, v) for h, v in zip(header, row, strict=True) if not h.startswith(":"))
    assert props == {k: v for k, v in node.items() if k != "state"} | {"state": "live"}
    graphml = format_named("graphml")
    doc = (graphml.head(info) + graphml.node(node) + graphml.tail()).encode()
    [(_, attrs)] = nx.read_graphml(io.BytesIO(doc)).nodes(data=True)
    assert attrs["name"] == _xml_visible(name) or (not name and "name" not in attrs)
    assert attrs.get("description", "") == _xml_visible(description)
    assert json.loads(attrs["aliases"]) == aliases  # JSON escapes control characters


def _xml_visible(text: str) -> str:
    """What an XML 1.0 reader can be given of ``text``."""
    bad = {*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xFFFE, 0xFFFF}
    return "".join("\ufffd" if ord(c) in bad else c for c in text)


def test_a_bad_array_delimiter_is_refused() -> None:
    for bad in ("", ",", '"', "\n", "ab"):
        with pytest.raises(ExportRefused):
            format_named("csv", bad)
