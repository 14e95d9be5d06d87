"""Mirror a realm into an in-memory python-igraph graph from its change feed alone, then
answer a neighbourhood question locally.

    TIDEGRAPH_URL=http://127.0.0.1:8080 python examples/igraph_mirror.py demo "Charles Babbage"

Folding a realm's changes from the start reconstructs its current relations (DESIGN
invariant 7), so the answer equals what the query service's relation listing gives for
the same question: every current relation within ``--hops`` of the entity, and the entities
they reach. ``--after-id`` shows where a longer-lived mirror would resume.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field

import igraph

from tidegraph.client import Client
from tidegraph.schemas.changes import ChangeKind, GraphChange

STATE_OF = {
    ChangeKind.RELATION_ADDED: "current",
    ChangeKind.RELATION_RESTORED: "current",
    ChangeKind.RELATION_SUPERSEDED: "superseded",
    ChangeKind.RELATION_RETRACTED: "retracted",
}


@dataclass
class Mirror:
    """Relations of one space as the feed describes them, keyed by relation id."""

    space: str = "default"
    relations: dict[str, tuple[str, str, str, bool, str]] = field(default_factory=dict)
    """id → (subject, predicate, object, negated, state)."""
    last_id: str | None = None
    """Id of the last change applied: where to resume."""

    def apply(self, change: GraphChange) -> None:
        self.last_id = change.id
        state = STATE_OF.get(change.kind)
        if state is None or change.relation is None or change.space != self.space:
            return
        r = change.relation
        self.relations[r.id] = (r.subject, r.predicate, r.object, r.negated, state)

    def graph(self) -> igraph.Graph:
        """The current relations as a directed multigraph with named vertices."""
        current = [v for v in self.relations.values() if v[4] == "current"]
        names = sorted({n for s, _, o, _, _ in current for n in (s, o)})
        g = igraph.Graph(n=len(names), directed=True)
        g.vs["name"] = names
        index = {n: i for i, n in enumerate(names)}
        g.add_edges([(index[s], index[o]) for s, _, o, _, _ in current])
        g.es["predicate"] = [p for _, p, _, _, _ in current]
        g.es["negated"] = [neg for _, _, _, neg, _ in current]
        return g


def neighbourhood(g: igraph.Graph, name: str, hops: int) -> dict[str, list[object]]:
    """Current relations touching an entity within ``hops - 1`` steps of ``name`` (either
    direction), and the entities they reach."""
    found = g.vs.select(name_eq=name)
    if hops < 1 or len(found) == 0:
        return {"entities": [name] if hops >= 0 else [], "relations": []}
    near = g.neighborhood(found[0].index, order=hops - 1, mode="all")
    edges = {e for v in near for e in g.incident(v, mode="all")}
    relations = sorted(
        (
            g.vs[g.es[e].source]["name"],
            g.es[e]["predicate"],
            g.vs[g.es[e].target]["name"],
            g.es[e]["negated"],
        )
        for e in edges
    )
    entities = sorted({name} | {n for s, _, o, _ in relations for n in (s, o)})
    return {"entities": entities, "relations": [list(r) for r in relations]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("realm")
    p.add_argument("entity", help="canonical name of the entity to look around")
    p.add_argument("--hops", type=int, default=2)
    p.add_argument("--space", default="default")
    p.add_argument("--url", help="query service (default: $TIDEGRAPH_URL)")
    p.add_argument("--api-key", help="bearer key (default: $TIDEGRAPH_API_KEY)")
    args = p.parse_args()
    mirror = Mirror(args.space)
    with Client(args.url, args.api_key) as tg:
        for change in tg.subscribe(args.realm, follow=False):
            mirror.apply(change)
    answer = neighbourhood(mirror.graph(), args.entity, args.hops)
    print(json.dumps({**answer, "after_id": mirror.last_id}))


if __name__ == "__main__":
    main()
