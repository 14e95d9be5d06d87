"""How an exported graph is written: GraphML, neo4j-admin CSV and JSON lines.

Pure functions from records to text, so the same bytes come out of ``tidegraph export``
and the HTTP download, and a test can read them back with the tool each format is for.
A node is an entity as the entity list shows it (``EntityListed``) plus its ``state``
(``live``, or ``dormant`` for an entity that is only the end of an exported relation); an
edge is a relation as the relation list shows it (``RelationListed``) plus ``subject_id``
and ``object_id``. Each format is written as a head, the nodes, a head for the edges, the
edges and a tail; one-file formats write all of it to one file, CSV the nodes and the
edges to two.

* **GraphML** (Gephi, networkx, python-igraph, yEd): a directed multigraph; node and edge
  ids are the API's ids; every attribute is a declared ``<key>`` (``weight`` an ``int``,
  ``negated`` a ``boolean``, the rest strings — lists as JSON arrays, instants as ISO
  8601); an absent value is an absent ``<data>``. The node's name is also its ``label``,
  the attribute Gephi shows. Characters XML 1.0 cannot hold (control characters other
  than tab and newlines) are written as U+FFFD.
* **CSV for** ``neo4j-admin database import full --nodes=nodes.csv
  --relationships=relationships.csv --multiline-fields=true``: typed headers (``id:ID``,
  ``:LABEL`` — ``Entity`` and the entity type —, ``:START_ID``, ``:END_ID``, ``:TYPE`` —
  the predicate —, ``weight:int``, ``negated:boolean``, ``…:datetime``,
  ``…:string[]``); strings always quoted (so the importer keeps their whitespace), an
  absent value or an empty list an empty unquoted field (no property). Array elements
  are joined by the array delimiter (``;``, as neo4j-admin's ``--array-delimiter``
  defaults); a value containing it cannot be told apart from two, so the export refuses
  it (:class:`ExportRefused`) rather than write a different graph.
* **JSON lines**: a ``graph`` line saying what was exported, then one ``entity`` line per
  node and one ``relation`` line per edge, each the API's object with a ``kind``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

from tidegraph.schemas.errors import TidegraphError

FormatName = Literal["graphml", "csv", "jsonl"]
FORMATS: tuple[FormatName, ...] = ("graphml", "csv", "jsonl")
Record = Mapping[str, Any]

NODE_FIELDS = (
    "id", "space", "name", "type", "description", "aliases",
    "dormant_since", "archived_since", "state",
)  # fmt: skip
EDGE_FIELDS = (
    "id", "space", "subject_id", "object_id", "subject", "predicate", "object", "negated",
    "valid_from", "valid_to", "t_created", "t_expired", "status", "superseded_by",
    "superseded_via", "weight", "doc_keys",
)  # fmt: skip


class ExportRefused(TidegraphError):
    """A value the chosen format cannot write faithfully."""


@dataclass(frozen=True)
class GraphInfo:
    """What an export holds: written into its head."""

    realm: str
    space: str
    as_of: str | None
    as_believed_at: datetime | None
    include_superseded: bool


@dataclass(frozen=True)
class Format:
    """One output format: the pieces in the order they are written."""

    name: FormatName
    files: tuple[str, str]
    """File names of the nodes and of the edges (the same for a one-file format)."""
    media_type: str
    head: Callable[[GraphInfo], str]
    node: Callable[[Record], str]
    edges_head: Callable[[], str]
    edge: Callable[[Record], str]
    tail: Callable[[], str]


def format_named(name: FormatName, array_delimiter: str = ";") -> Format:
    """The format ``name``; ``array_delimiter`` is CSV's (one character)."""
    if name == "graphml":
        return Format(
            name,
            ("graph.graphml", "graph.graphml"),
            "application/graphml+xml",
            _graphml_head,
            _graphml_node,
            lambda: "",
            _graphml_edge,
            lambda: "  </graph>\n</graphml>\n",
        )
    if name == "jsonl":
        return Format(
            name,
            ("graph.jsonl", "graph.jsonl"),
            "application/x-ndjson",
            _jsonl_head,
            lambda n: _jsonl("entity", n, NODE_FIELDS),
            lambda: "",
            lambda e: _jsonl("relation", e, EDGE_FIELDS),
            lambda: "",
        )
    if len(array_delimiter) != 1 or array_delimiter in '",\r\n':
        raise ExportRefused(
            f"the array delimiter must be one character other than a quote, a comma or a"
            f" line break (got {array_delimiter!r})"
        )
    csv = _Neo4jCsv(array_delimiter)
    return Format(
        name,
        ("nodes.csv", "relationships.csv"),
        "text/csv",
        lambda info: _csv_line(h for h, _, _ in _NODE_COLUMNS),
        csv.node,
        lambda: _csv_line(h for h, _, _ in _EDGE_COLUMNS),
        csv.edge,
        lambda: "",
    )


# ------------------------------------------------------------------------------ GraphML

_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_GRAPH_KEYS = (("realm", "string"), ("space", "string"), ("as_of", "string"),
               ("as_believed_at", "string"), ("include_superseded", "boolean"))  # fmt: skip
_NODE_KEYS = (("label", "string"), *((f, "string") for f in NODE_FIELDS if f != "id"))
_EDGE_TYPES = {"negated": "boolean", "weight": "int"}
_EDGE_KEYS = tuple((f, _EDGE_TYPES.get(f, "string")) for f in EDGE_FIELDS if f != "id")


def xml_text(value: str) -> str:
    """``value`` escaped for XML character data or a quoted attribute."""
    value = _XML_INVALID.sub("\ufffd", value)
    return (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("\r", "&#13;")
    )


def _value(value: Any) -> str | None:
    """An attribute value as GraphML and CSV write it (``None``: absent)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return orjson.dumps(list(value)).decode()
    return str(value)


def _keys(kind: str, keys: Sequence[tuple[str, str]]) -> str:
    return "".join(
        f'  <key id="{kind[0]}_{name}" for="{kind}" attr.name="{name}" attr.type="{typ}"/>\n'
        for name, typ in keys
    )


def _data(prefix: str, pairs: Sequence[tuple[str, Any]]) -> str:
    out = []
    for name, raw in pairs:
        value = _value(raw)
        if value is not None:
            out.append(f'<data key="{prefix}_{name}">{xml_text(value)}</data>')
    return "".join(out)


def _graphml_head(info: GraphInfo) -> str:
    graph = _data(
        "g",
        [
            ("realm", info.realm),
            ("space", info.space),
            ("as_of", info.as_of),
            ("as_believed_at", info.as_believed_at),
            ("include_superseded", info.include_superseded),
        ],
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'
        + _keys("graph", _GRAPH_KEYS)
        + _keys("node", _NODE_KEYS)
        + _keys("edge", _EDGE_KEYS)
        + f'  <graph id="{xml_text(info.realm)}" edgedefault="directed">\n    {graph}\n'
    )


def _graphml_node(n: Record) -> str:
    pairs = [("label", n["name"]), *((f, n[f]) for f in NODE_FIELDS if f != "id")]
    return f'    <node id="{xml_text(str(n["id"]))}">{_data("n", pairs)}</node>\n'


def _graphml_edge(e: Record) -> str:
    pairs = [(f, e[f]) for f in EDGE_FIELDS if f != "id"]
    return (
        f'    <edge id="{xml_text(str(e["id"]))}" source="{xml_text(str(e["subject_id"]))}"'
        f' target="{xml_text(str(e["object_id"]))}">{_data("e", pairs)}</edge>\n'
    )


# ------------------------------------------------------------------------------ JSON lines


def _jsonl_head(info: GraphInfo) -> str:
    return _line(
        {
            "kind": "graph",
            "realm": info.realm,
            "space": info.space,
            "as_of": info.as_of,
            "as_believed_at": info.as_believed_at,
            "include_superseded": info.include_superseded,
        }
    )


def _jsonl(kind: str, record: Record, fields: Sequence[str]) -> str:
    return _line({"kind": kind, **{f: record[f] for f in fields}})


def _line(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_UTC_Z).decode() + "\n"


# ------------------------------------------------------------------------------ neo4j CSV

Column = tuple[str, str, str]
"""(header, record field, kind): kind ``str``, ``raw`` (unquoted: ids, numbers, booleans,
instants), ``list`` (an array of strings) or ``labels``."""

_NODE_COLUMNS: tuple[Column, ...] = (
    ("id:ID", "id", "str"),
    (":LABEL", "type", "labels"),
    ("name", "name", "str"),
    ("type", "type", "str"),
    ("description", "description", "str"),
    ("aliases:string[]", "aliases", "list"),
    ("space", "space", "str"),
    ("state", "state", "str"),
    ("dormant_since:datetime", "dormant_since", "raw"),
    ("archived_since:datetime", "archived_since", "raw"),
)
_EDGE_COLUMNS: tuple[Column, ...] = (
    (":START_ID", "subject_id", "str"),
    (":END_ID", "object_id", "str"),
    (":TYPE", "predicate", "str"),
    ("id", "id", "str"),
    ("predicate", "predicate", "str"),
    ("negated:boolean", "negated", "raw"),
    ("valid_from", "valid_from", "str"),
    ("valid_to", "valid_to", "str"),
    ("t_created:datetime", "t_created", "raw"),
    ("t_expired:datetime", "t_expired", "raw"),
    ("status", "status", "str"),
    ("superseded_by", "superseded_by", "str"),
    ("superseded_via", "superseded_via", "str"),
    ("weight:int", "weight", "raw"),
    ("doc_keys:string[]", "doc_keys", "list"),
    ("space", "space", "str"),
    ("subject", "subject", "str"),
    ("object", "object", "str"),
)
NODE_HEADER = tuple(h for h, _, _ in _NODE_COLUMNS)
EDGE_HEADER = tuple(h for h, _, _ in _EDGE_COLUMNS)


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _csv_line(cells: Any) -> str:
    return ",".join(cells) + "\n"


class _Neo4jCsv:
    def __init__(self, array_delimiter: str) -> None:
        self.delimiter = array_delimiter

    def node(self, n: Record) -> str:
        return self._row(n, _NODE_COLUMNS)

    def edge(self, e: Record) -> str:
        return self._row(e, _EDGE_COLUMNS)

    def _row(self, record: Record, columns: Sequence[Column]) -> str:
        return _csv_line(self._cell(record, field, kind) for _, field, kind in columns)

    def _cell(self, record: Record, field: str, kind: str) -> str:
        value = record[field]
        if value is None or (kind == "list" and not value):
            return ""  # no property (an empty array is none either)
        if kind == "labels":
            labels = ["Entity", str(value)] if value else ["Entity"]
            return _quoted(self._joined(record, field, labels))
        if kind == "list":
            return _quoted(self._joined(record, field, [str(v) for v in value]))
        text = _value(value)
        assert text is not None
        return text if kind == "raw" else _quoted(text)

    def _joined(self, record: Record, field: str, items: list[str]) -> str:
        for item in items:
            if self.delimiter in item:
                raise ExportRefused(
                    f"{field} {item!r} of {record.get('name') or 'relation ' + str(record['id'])}"
                    f" contains the array delimiter {self.delimiter!r}: export again with"
                    " another (--array-delimiter) and pass the same to neo4j-admin"
                )
        return self.delimiter.join(items)
