"""The answer's order: the evidence chains a question's path reaches placed before the
other candidates (ranking in :mod:`~tidegraph.query_service.paths`, groups in
:func:`~tidegraph.query_service.hits.lead`)."""

from __future__ import annotations

from typing import Any

from tidegraph.query_service import hits
from tidegraph.query_service.focus import term_distances
from tidegraph.query_service.fusion import Fused
from tidegraph.query_service.paths import Chain, leading, links_in_order, rank
from tidegraph.query_service.paths import paths as chain_paths
from tidegraph.schemas import name_key


def lead(
    fused: list[Fused[int]],
    names: list[str],
    fit: dict[int, bool],
    rows: list[Any] | None,
    distance: tuple[int, ...],
    stats: dict[str, Any],
) -> tuple[list[list[Fused[int]]], dict[int, tuple[int, ...]]]:
    """The candidate groups in answer order (``hits.lead``), with the evidence chains read
    (``rows``; ``None``: not read) ranked (:mod:`~tidegraph.query_service.paths`), and the
    path each chain places a relation by (a link on the named entity: itself alone)."""
    position = {f.key: i for i, f in enumerate(fused)}
    read = [Chain(tuple(r[0]), tuple(r[1]), int(r[2]), bool(r[3])) for r in rows or []]
    first, after = leading(rank(read, position, distance))
    placed = chain_paths(first)
    for rid, path in chain_paths(after).items():
        if rid not in placed and rid not in fit:
            placed[rid] = path
    if rows is not None:
        stats["chains"] = {"read": len(read), "leading": len(first), "following": len(after)}
    groups = hits.lead(fused, names, fit, links_in_order(first), links_in_order(after))
    return groups, placed


def named_distances(query: str, terms: tuple[str, ...], named: list[Any]) -> tuple[int, ...]:
    """Words between each predicate term and the nearest entity the question names (as
    written: its name or an alias; ``by_name`` rows)."""
    keys = {name_key(str(k)) for r in named for k in (r[2], *r[5])}
    return term_distances(query, terms, sorted(keys))
