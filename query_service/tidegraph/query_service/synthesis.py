"""The synthesis prompt and the answer (paper §7.5).

The prompt has four blocks — community reports, numbered passages, entities, relations —
with reports first when present, because they carry corpus-level structure no passage holds.
Each relation carries its validity period (``[from 2023-05-10]``,
``[valid 2022-01-01 to 2022-03-31]``), which is what makes ordering and duration questions
answerable at all, and, like each passage, the order of the document stating it
(``[stated 2024-06-30]``): the system prompt resolves conflicting records to the most recent
statement and asks for the dates that decided it (paper §8.5). A denial is rendered as one
(``(A) --[NOT p]--> (B)``), never as an assertion. A relation reached along a path is
rendered as that chain, end to end from the matched entity, with each link and the
documents stating it, so "X works for Y, which is headquartered in Z" can cite both.
Passages are numbered and listed as references so citations resolve to documents.

No budget applies by default: everything retrieved reaches the model. A caller may set a
character budget; then long passages and reports are clipped (marked ``…``) — never dropped —
and the response reports retrieved characters against characters that reached the prompt.
Entity and relation lines are short, exact evidence and are kept whole. A caller may also
give each block a token budget (:mod:`~tidegraph.query_service.context`), which keeps a
block's best-ranked items; the response then counts, per block, what was left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidegraph.query_service.context import (
    BLOCKS,
    CLIPPABLE,
    MIN_CLIP_CHARS,
    Block,
    BlockStats,
    block_stats,
    clip,
    fit_block,
)
from tidegraph.schemas import CommunityOut, EntityOut, QueryDataResponse, RelationOut

SYSTEM_PROMPT = (
    "You answer questions from the evidence given: community reports, numbered passages, "
    "entities and relations of a knowledge graph. Use only that evidence. Cite passages by "
    "their number in square brackets, e.g. [2]. A relation written --[NOT p]--> is denied "
    "by the source: never report it as holding. Dates in brackets beside a relation are the "
    "period it held; use them for questions about order and duration. A relation marked "
    "[superseded] was replaced by a later source. [stated D] beside a passage or relation "
    "is the order of the document stating it (its date, where the source is dated). When "
    "records conflict — they cannot all hold, such as two different values for one thing "
    "at one time — answer with the most recent statement: the one with the latest stated "
    "date, or else not superseded; name the dates that decided it. A chain joins relations "
    "end to end from an entity the question names (A --[p]--> B --[q]--> C): an answer "
    "that rests on it names each entity along it and cites the source of every link. If "
    "the evidence does not answer the question, say so."
)


class ChatModel(Protocol):
    """The injected chat model: ``await chat(system, prompt)`` → answer text."""

    async def __call__(self, system: str, prompt: str) -> str: ...


@dataclass(frozen=True)
class Reference:
    """What a passage number in the answer points to."""

    n: int
    """The number used in the prompt and in citations."""
    doc_key: str
    chunk_id: str
    citation: str


@dataclass(frozen=True)
class Prompt:
    """The assembled prompt and what it cost."""

    text: str
    references: list[Reference]
    retrieved_chars: int
    """Characters of evidence retrieved (reports, passages, entities, relations)."""
    prompt_chars: int
    """Characters of that evidence that reached the prompt."""
    clipped: int
    """How many passages or reports were clipped to meet the budgets."""
    budget: int | None
    blocks: dict[Block, BlockStats]
    """Per block (:mod:`~tidegraph.query_service.context`): retrieved against reaching the
    prompt."""


def render_relation(r: RelationOut) -> str:
    """``(A) --[p]--> (B)`` with the validity period, denial, statement order and
    supersession marked."""
    pred = f"NOT {r.predicate}" if r.negated else r.predicate
    line = f"({r.subject}) --[{pred}]--> ({r.object})"
    if r.valid_from and r.valid_to:
        line += f" [valid {r.valid_from} to {r.valid_to}]"
    elif r.valid_from:
        line += f" [from {r.valid_from}]"
    elif r.valid_to:
        line += f" [until {r.valid_to}]"
    if r.order_key:
        line += f" [stated {r.order_key}]"
    if r.status == "superseded":
        line += " [superseded]"
    return line


def render_chain(r: RelationOut, by_id: Mapping[str, RelationOut]) -> str | None:
    """The relation ``r`` as the chain that reached it, when its path is in ``by_id``: the
    path end to end from the matched entity, arrows as the links run (``(A) --[p]--> (B)
    <--[q]-- (C)``), then each link on a line of its own with its sources (the documents
    stating it), so an answer can cite both. ``None``: no path, or one not in ``by_id``."""
    if not r.path or any(x not in by_id for x in r.path):
        return None
    links = [by_id[x] for x in r.path]
    first, second = links[0], links[1]
    at = first.subject if first.subject not in (second.subject, second.object) else first.object
    line = f"({at})"
    for link in links:
        pred = f"NOT {link.predicate}" if link.negated else link.predicate
        if link.subject == at:
            at = link.object
            line += f" --[{pred}]--> ({at})"
        else:
            at = link.subject
            line += f" <--[{pred}]-- ({at})"
    steps = [
        f"  {i}. {render_relation(link)} (source: {', '.join(link.doc_keys) or 'none'})"
        for i, link in enumerate(links, start=1)
    ]
    return "\n".join([f"chain: {line}", *steps])


def render_entity(e: EntityOut) -> str:
    head = f"{e.name} ({e.type})"
    if e.aliases:
        head += f", also {', '.join(e.aliases)}"
    return f"{head}: {e.description}" if e.description else head


def build_prompt(
    question: str,
    data: QueryDataResponse,
    budget: int | None = None,
    token_budgets: Mapping[Block, int] | None = None,
) -> Prompt:
    """The prompt for ``question`` over ``data``. ``token_budgets`` caps blocks (see
    :mod:`~tidegraph.query_service.context`); then ``budget`` caps evidence characters by
    clipping reports and passages, never dropping one."""
    rendered: dict[Block, list[str]] = {
        "communities": [_report_text(c) for c in data.communities],
        "passages": [c.text for c in data.chunks],
        "entities": [render_entity(e) for e in data.entities],
        "relations": _relation_lines(data.relations),
    }
    budgets = dict(token_budgets or {})
    kept = {b: fit_block(rendered[b], budgets.get(b), b in CLIPPABLE) for b in BLOCKS}
    n_clipped = sum(
        1 for b in CLIPPABLE for old, new in zip(rendered[b], kept[b], strict=False) if new != old
    )
    fixed = sum(len(x) for b in BLOCKS if b not in CLIPPABLE for x in kept[b])
    clippable = kept["communities"] + kept["passages"]
    clipped_texts, n_more = _clip(clippable, None if budget is None else budget - fixed)
    n_clipped += n_more
    kept["communities"] = clipped_texts[: len(kept["communities"])]
    kept["passages"] = clipped_texts[len(kept["communities"]) :]
    communities = data.communities[: len(kept["communities"])]
    chunks = data.chunks[: len(kept["passages"])]
    references = [Reference(i + 1, c.doc_key, c.id, c.citation) for i, c in enumerate(chunks)]
    blocks: list[str] = []
    if kept["communities"]:
        blocks.append(
            "## Community reports\n"
            + "\n\n".join(
                f"### {c.title}\n{text}"
                for c, text in zip(communities, kept["communities"], strict=True)
            )
        )
    if kept["passages"]:
        blocks.append(
            "## Passages\n"
            + "\n\n".join(
                f"[{ref.n}] ({ref.citation}){_stated(c.order_key)}\n{text}"
                for ref, c, text in zip(references, chunks, kept["passages"], strict=True)
            )
        )
    if kept["entities"]:
        blocks.append("## Entities\n" + "\n".join(f"- {x}" for x in kept["entities"]))
    if kept["relations"]:
        blocks.append("## Relations\n" + "\n".join(f"- {x}" for x in kept["relations"]))
    if not blocks:
        blocks.append("## Evidence\n(nothing was retrieved)")
    if references:
        blocks.append("## References\n" + "\n".join(f"[{r.n}] {r.citation}" for r in references))
    text = "\n\n".join(blocks) + f"\n\n## Question\n{question}\n"
    stats = {b: block_stats(rendered[b], kept[b], budgets.get(b)) for b in BLOCKS}
    return Prompt(
        text,
        references,
        sum(x.retrieved_chars for x in stats.values()),
        sum(x.prompt_chars for x in stats.values()),
        n_clipped,
        budget,
        stats,
    )


def _relation_lines(relations: Sequence[RelationOut]) -> list[str]:
    """One item per relation: a relation reached along a path as its chain
    (:func:`render_chain`), any other as one line."""
    by_id = {r.id: r for r in relations}
    return [render_chain(r, by_id) or render_relation(r) for r in relations]


def _stated(order_key: str | None) -> str:
    return f" [stated {order_key}]" if order_key else ""


def _report_text(c: CommunityOut) -> str:
    return "\n".join([c.summary, *(f"- {f}" for f in c.findings)])


def _clip(texts: Sequence[str], budget: int | None) -> tuple[list[str], int]:
    """Fit ``texts`` into ``budget`` characters by clipping the longest ones to a common
    length (water-filling); nothing is dropped, and none goes below ``MIN_CLIP_CHARS``."""
    if budget is None or sum(len(t) for t in texts) <= budget:
        return list(texts), 0
    lengths = sorted(len(t) for t in texts)
    remaining = max(budget, 0)
    cap = 0
    for i, n in enumerate(lengths):
        share = remaining // (len(lengths) - i)
        if n <= share:
            remaining -= n
            continue
        cap = share
        break
    cap = max(cap, MIN_CLIP_CHARS)
    out: list[str] = []
    clipped = 0
    for t in texts:
        if len(t) > cap:
            out.append(clip(t, cap))
            clipped += 1
        else:
            out.append(t)
    return out, clipped
