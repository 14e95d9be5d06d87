"""Context assembly accounting (paper §8.3): what each prompt block was given and kept.

The prompt has four blocks — community reports, passages, entities, relations. For each,
a ``query`` answer reports how many items and characters retrieval handed over and how many
reached the prompt, so an answer that missed a fact can be traced to retrieval (never
retrieved) or to assembly (retrieved, cut for space). A caller may give a block a token
budget; none applies by default. Tokens are estimated as characters / 4 (the usual ratio
for English text under byte-pair tokenisers): the budget is a planning figure, not a
tokenizer's count.

A budgeted block keeps its items in rank order while they fit whole. The first that does
not fit is clipped to what remains when it is a passage or report and at least
``MIN_CLIP_CHARS`` remain (it still says what it is about); every later item is left out.
Entity and relation lines are exact, short evidence: kept whole or left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Block = Literal["communities", "passages", "entities", "relations"]
BLOCKS: tuple[Block, ...] = ("communities", "passages", "entities", "relations")
CLIPPABLE: frozenset[Block] = frozenset({"communities", "passages"})
CHARS_PER_TOKEN = 4
MIN_CLIP_CHARS = 80
"""A clipped passage keeps at least this much, so it still says what it is about."""
ELLIPSIS = "…"


@dataclass(frozen=True)
class BlockStats:
    """One prompt block: retrieved against reaching the prompt."""

    retrieved_items: int
    """Items retrieval returned for the block."""
    retrieved_chars: int
    """Their characters, as rendered for the prompt."""
    prompt_items: int
    """Items that reached the prompt (whole or clipped)."""
    prompt_chars: int
    """Their characters in the prompt."""
    token_budget: int | None
    """The block's token budget; ``None``: none applied."""


def approx_tokens(chars: int) -> int:
    """Estimated tokens of ``chars`` characters (see the module docstring)."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def clip(text: str, chars: int) -> str:
    """``text`` cut to ``chars`` characters including the ellipsis that marks the cut."""
    return text if len(text) <= chars else text[: max(chars - len(ELLIPSIS), 0)].rstrip() + ELLIPSIS


def fit_block(texts: Sequence[str], token_budget: int | None, clippable: bool) -> list[str]:
    """The items of one block that reach the prompt under ``token_budget`` (a prefix of
    ``texts``, its last item possibly clipped)."""
    if token_budget is None:
        return list(texts)
    room = token_budget * CHARS_PER_TOKEN
    out: list[str] = []
    for text in texts:
        if len(text) <= room:
            out.append(text)
            room -= len(text)
            continue
        if clippable and room >= MIN_CLIP_CHARS:
            out.append(clip(text, room))
        break
    return out


def block_stats(
    retrieved: Sequence[str], kept: Sequence[str], token_budget: int | None
) -> BlockStats:
    return BlockStats(
        len(retrieved),
        sum(map(len, retrieved)),
        len(kept),
        sum(map(len, kept)),
        token_budget,
    )
