"""The importance score retention ranks entities by (paper §6.1), as pure functions.

Four terms, each bounded or slowly growing, weighted and summed:

* retrieval recency: ``2^(-days since last retrieved / half-life)``, 0 if never retrieved;
* retrieval frequency: ``log(1 + retrievals)``;
* degree: ``log(1 + current relations)``;
* belief-time age, as novelty: ``2^(-days since first believed / half-life)``, so what the
  graph learnt recently is not judged by the retrievals it has not had time to earn.

Every term is non-negative and moves one way with its input, so an entity retrieved more,
more recently, better connected or newer never scores lower. :func:`to_archive` keeps the
best-scoring share and names the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

_DAY = 86_400.0


@dataclass(frozen=True)
class Usage:
    """What the score reads of one entity."""

    entity_id: int
    retrievals: int
    """Recorded queries that touched it."""
    last_retrieved: datetime | None
    """The latest of them; ``None`` when never."""
    degree: int
    """Current relations it is an end of."""
    believed_since: datetime
    """When the graph first believed it (``entities.created_at``)."""


@dataclass(frozen=True)
class Weights:
    """Term weights and the half-life of the two time terms."""

    recency: float = 1.0
    frequency: float = 1.0
    degree: float = 1.0
    novelty: float = 1.0
    half_life_days: float = 30.0

    def __post_init__(self) -> None:
        for name in ("recency", "frequency", "degree", "novelty"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"weight {name} must be finite and non-negative, not {value}")
        if not (math.isfinite(self.half_life_days) and self.half_life_days > 0):
            raise ValueError(f"half_life_days must be positive, not {self.half_life_days}")


DEFAULT_WEIGHTS = Weights()


def _decay(since: datetime, now: datetime, half_life_days: float) -> float:
    days = max(0.0, (now - since).total_seconds() / _DAY)
    return math.pow(2.0, -days / half_life_days)


def importance(usage: Usage, now: datetime, weights: Weights = DEFAULT_WEIGHTS) -> float:
    """The entity's importance at ``now`` (non-negative, finite)."""
    recency = (
        0.0
        if usage.last_retrieved is None
        else _decay(usage.last_retrieved, now, weights.half_life_days)
    )
    return (
        weights.recency * recency
        + weights.frequency * math.log1p(max(0, usage.retrievals))
        + weights.degree * math.log1p(max(0, usage.degree))
        + weights.novelty * _decay(usage.believed_since, now, weights.half_life_days)
    )


def to_archive(
    usages: Iterable[Usage], keep: float, now: datetime, weights: Weights = DEFAULT_WEIGHTS
) -> list[int]:
    """Ids of the entities outside the best-scoring ``keep`` share (rounded up), lowest
    score first; ties go to the older id being archived first, so the choice is stable."""
    if not (0.0 <= keep <= 1.0):
        raise ValueError(f"keep must be a fraction in [0, 1], not {keep}")
    scored = sorted((importance(u, now, weights), u.entity_id) for u in usages)
    kept = math.ceil(keep * len(scored) - 1e-9)
    return [entity_id for _, entity_id in scored[: len(scored) - kept]]
