"""An entity's type and description as derived from what live chunks say about it.

Names and aliases only ever accumulate (a surface form once seen proves identity, see
:mod:`~tidegraph.indexer.graph.resolution`), but type and description are statements a
document makes: when the version that made them is replaced or deleted, they go with it.
So they are never merged into the stored row for good; each write derives them again from
the *live* contributions — one per (chunk, entity) the chunk states facts about — with the
same order-free rules resolution merges by:

- description: the longest; equal lengths, the smallest in code-point order; empty when no
  live chunk describes the entity (a description taught only by a withdrawn version goes);
- type: the alphabetically first specific type; ``Concept`` when none is specific.

Each rule takes an extreme of a total order, so the result depends on the set of live
contributions only, not on the order in which documents arrived or were withdrawn.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tidegraph.indexer.graph.resolution import pick_description, pick_type

__all__ = ["Attributes", "Contribution", "derive_attributes"]


class Contribution(NamedTuple):
    """What one live chunk says about an entity."""

    type: str | None
    """The type it gives; ``None`` when it gives none (``Concept``)."""
    description: str
    """The description it gives; empty when none."""


class Attributes(NamedTuple):
    """An entity's derived attributes."""

    type: str
    """The settled type; ``Concept`` when no live chunk gives a specific one."""
    description: str
    """The settled description; empty when no live chunk describes the entity."""


def derive_attributes(contributions: Iterable[Contribution]) -> Attributes:
    """The type and description the live ``contributions`` settle on (module docstring)."""
    items = list(contributions)
    return Attributes(
        pick_type(c.type for c in items if c.type is not None),
        pick_description(c.description for c in items),
    )
