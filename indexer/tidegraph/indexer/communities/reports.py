"""Community reports (paper §6): what a report holds, and the two ways of writing one.

Reports are made level by level and, within a level, largest first (the order of
:meth:`Hierarchy.clusters`), so a truncated build still covers the most significant
structure and every parent is written after its children, from their reports (§6.1).

- **Offline (extractive).** With no model configured: the title names the two most
  connected members; the summary counts members by type and quotes the central ones;
  findings are the strongest internal relations, a denial said to be denied and never to
  hold; the rating grows with size and internal weight relative to the level's largest
  cluster, so it varies (a rating that never varies is useless for ranking, §8.15).
- **Model-backed.** The chat model gets the members and the internal relations, denials
  marked as such with the instruction never to report them as holding, and answers with a
  JSON report; an answer that cannot be used is :class:`ReportFailed`.
- **Partial failure.** One unusable report is logged and skipped rather than abandoning the
  build; an endpoint that stays unavailable (a retriable error) aborts it instead, since
  every later report would fail the same way.
- **Titles.** Reports are written independently, so two can share a title; later ones are
  qualified with a member not already named in the title (:func:`disambiguate_titles`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidegraph.indexer.communities.detect import (
    Cluster,
    Entity,
    Hierarchy,
    Relation,
    ReportFailed,
    effective_weight,
)
from tidegraph.indexer.models import LLMError

if TYPE_CHECKING:  # the model client (openai) is imported only by who calls it
    from tidegraph.indexer.models.client import LLMClient

__all__ = [
    "ClusterView",
    "Finding",
    "RatingScale",
    "Report",
    "Reporter",
    "cluster_views",
    "disambiguate_titles",
    "make_reports",
    "model_reporter",
    "offline_report",
    "offline_reporter",
    "parse_model_report",
    "rating_scales",
    "relation_sentence",
    "report_prompt",
]

log = logging.getLogger(__name__)

Reporter = Callable[["ClusterView", "RatingScale", Sequence["Report"]], Awaitable["Report"]]
"""Makes one cluster's report from its view, its level's rating scale and (for a parent)
its children's reports; raises :class:`ReportFailed` (or an ``LLMError``) to be skipped."""


@dataclass(frozen=True)
class Finding:
    """One statement of a report."""

    summary: str
    """The statement, one sentence."""
    explanation: str = ""
    """Why it is said: description, corroboration, or the child report it comes from."""
    negated: bool = False
    """The statement reports a denial (it says something does *not* hold)."""
    relation_id: int | None = None
    """The relation it renders, when it renders one."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"summary": self.summary, "explanation": self.explanation}
        if self.negated:
            out["negated"] = True
        if self.relation_id is not None:
            out["relation_id"] = str(self.relation_id)
        return out


@dataclass(frozen=True)
class Report:
    """What is stored for a community: title, summary, findings, importance rating."""

    title: str
    summary: str
    findings: tuple[Finding, ...]
    rating: float
    """Importance in [0, 10]."""

    def text(self) -> str:
        """The report flattened to the text it is embedded from (§6)."""
        lines = [self.title, self.summary]
        lines.extend(f"- {f.summary}" for f in self.findings)
        return "\n".join(line for line in lines if line)


@dataclass(frozen=True)
class ClusterView:
    """A cluster with what a report is written from, most significant first."""

    cluster: Cluster
    entities: tuple[Entity, ...]
    """Members ranked by weighted degree inside the cluster (ties: name, id)."""
    relations: tuple[Relation, ...]
    """Relations with both ends inside, strongest first (ties: assertions, then id)."""
    internal_weight: float
    """Sum of the effective weights of ``relations``."""


@dataclass(frozen=True)
class RatingScale:
    """The largest cluster of a level, against which ratings are relative."""

    max_size: int
    max_weight: float


def cluster_views(
    hierarchy: Hierarchy,
    entities: Sequence[Entity],
    relations: Sequence[Relation],
    denial_factor: float = 0.25,
) -> list[ClusterView]:
    """Views of every cluster, in report order (one pass over the relations per level)."""
    by_id = {e.id: e for e in entities}
    views: list[ClusterView] = []
    for level in hierarchy.levels:
        owner = {eid: c.index for c in level for eid in c.members}
        inside: list[list[Relation]] = [[] for _ in level]
        for r in relations:
            a = owner.get(r.subject)
            if a is not None and a == owner.get(r.object) and r.subject != r.object:
                inside[a].append(r)
        for c in level:
            rels = inside[c.index]
            degree: defaultdict[int, float] = defaultdict(float)
            for r in rels:
                w = effective_weight(r, denial_factor)
                degree[r.subject] += w
                degree[r.object] += w
            ranked = sorted(
                (by_id[m] for m in c.members if m in by_id),
                key=lambda e: (-degree[e.id], e.name.lower(), e.id),
            )
            strongest = sorted(
                rels, key=lambda r: (-effective_weight(r, denial_factor), r.negated, r.id)
            )
            total = sum(effective_weight(r, denial_factor) for r in rels)
            views.append(ClusterView(c, tuple(ranked), tuple(strongest), total))
    return views


def rating_scales(views: Iterable[ClusterView]) -> dict[int, RatingScale]:
    """Per level, the largest size and internal weight (the top of the rating scale)."""
    scales: dict[int, RatingScale] = {}
    for v in views:
        lvl = v.cluster.level
        old = scales.get(lvl, RatingScale(0, 0.0))
        scales[lvl] = RatingScale(
            max(old.max_size, len(v.cluster.members)), max(old.max_weight, v.internal_weight)
        )
    return scales


def _rating(view: ClusterView, scale: RatingScale) -> float:
    size = math.log1p(len(view.cluster.members)) / math.log1p(max(scale.max_size, 1))
    weight = (
        math.log1p(view.internal_weight) / math.log1p(scale.max_weight)
        if scale.max_weight > 0
        else 0.0
    )
    return round(10.0 * (0.5 * size + 0.5 * weight), 1)


def relation_sentence(subject: str, predicate: str, obj: str, negated: bool) -> str:
    """A relation as a sentence; a denial says that it is denied, never that it holds."""
    verb = predicate.replace("_", " ")
    if negated:
        return f"It is denied that {subject} {verb} {obj}."
    return f"{subject} {verb} {obj}."


def _title(names: Sequence[str]) -> str:
    if not names:
        return "Unnamed community"
    if len(names) == 1:
        return names[0]
    return f"{names[0]} and {names[1]}"


def offline_report(
    view: ClusterView,
    scale: RatingScale,
    children: Sequence[Report] = (),
    *,
    max_findings: int = 8,
) -> Report:
    """An extractive report: no model, no randomness (paper §6, offline default).

    A level-0 report names its most connected members and lists its strongest relations;
    a parent's is synthesised from its children's reports (§6.1), strongest child first.
    """
    names = {e.id: e.name for e in view.entities}
    size = len(view.cluster.members)
    top = view.entities[:3]
    title = _title([e.name for e in top[:2]])
    if view.cluster.level == 0 or not children:
        types = Counter(e.type for e in view.entities).most_common(3)
        denied = sum(1 for r in view.relations if r.negated)
        summary = (
            f"{size} entities ({', '.join(f'{n} {t}' for t, n in types)}) linked by "
            f"{len(view.relations)} current relations"
            + (f" ({denied} denied)" if denied else "")
            + ". Most connected: "
            + "; ".join(
                f"{e.name} ({e.type})"
                + (f": {_first_sentence(e.description)}" if e.description else "")
                for e in top
            )
            + "."
        )
        findings = tuple(
            Finding(
                relation_sentence(names[r.subject], r.predicate, names[r.object], r.negated),
                _explain(r),
                r.negated,
                r.id,
            )
            for r in view.relations[:max_findings]
            if r.subject in names and r.object in names
        )
    else:
        summary = (
            f"{size} entities in {len(view.cluster.children)} communities: "
            + "; ".join(c.title for c in children)
            + "."
        )
        findings = tuple(Finding(c.title, c.summary) for c in children[:max_findings])
    return Report(title, summary, findings, _rating(view, scale))


def _first_sentence(text: str, limit: int = 160) -> str:
    head = text.strip().split(". ")[0].rstrip(".")
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


def _explain(r: Relation) -> str:
    said = f"{r.description.strip().rstrip('.')}. " if r.description.strip() else ""
    chunks = f"{int(r.weight)} source chunk{'s' if r.weight != 1 else ''}"
    if r.negated:
        return f"{said}Denied by {chunks}; this relation does not hold."
    return f"{said}Corroborated by {chunks}."


def disambiguate_titles(titled: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """Unique titles, in processing order (paper §6, title disambiguation).

    ``titled`` holds each report's title with its member names, most significant first.
    The first of equal titles (compared case-insensitively) keeps it; a later one is
    qualified with its most significant member not already named in the title, or a
    number when every member is named.
    """
    seen: set[str] = set()
    out: list[str] = []
    for title, members in titled:
        chosen = title
        if chosen.lower() in seen:
            chosen = ""
            for name in members:
                if name.lower() in title.lower():
                    continue
                candidate = f"{title} ({name})"
                if candidate.lower() not in seen:
                    chosen = candidate
                    break
            n = 2
            while not chosen or chosen.lower() in seen:
                chosen = f"{title} ({n})"
                n += 1
        seen.add(chosen.lower())
        out.append(chosen)
    return out


# --------------------------------------------------------------------------- reporters


def offline_reporter(max_findings: int = 8) -> Reporter:
    """Extractive reports (no model); see :func:`communities.offline_report`."""

    async def report(view: ClusterView, scale: RatingScale, children: Sequence[Report]) -> Report:
        return offline_report(view, scale, children, max_findings=max_findings)

    return report


_SYSTEM = (
    "You write a report on one community of a knowledge graph, for an analyst who will "
    "use it to answer questions about the whole corpus. Use only the entities, relations "
    "and sub-reports given. Relations marked DENIED are stated as false by the sources: "
    "never report a denied relation as holding; if you mention one, say that it is denied. "
    'Answer with one JSON object: {"title": short specific title naming the key '
    'entities, "summary": 2-4 sentences, "findings": [{"summary": one sentence, '
    '"explanation": why, citing the relations}] (at most 8), "rating": importance of '
    "the community from 0 to 10 as a number}."
)
_MAX_PROMPT_ENTITIES = 40
_MAX_PROMPT_RELATIONS = 80


def report_prompt(view: ClusterView, children: Sequence[Report]) -> str:
    """The user message for one community: members, internal relations (denials marked),
    and for a parent its children's reports (paper §6.1: parents from children)."""
    names = {e.id: e.name for e in view.entities}
    lines = [f"Community of {len(view.cluster.members)} entities.", "", "Entities:"]
    for e in view.entities[:_MAX_PROMPT_ENTITIES]:
        lines.append(f"- {e.name} ({e.type})" + (f": {e.description}" if e.description else ""))
    if len(view.entities) > _MAX_PROMPT_ENTITIES:
        lines.append(f"- … and {len(view.entities) - _MAX_PROMPT_ENTITIES} more")
    if children:
        lines += ["", "Sub-community reports:"]
        for c in children:
            lines.append(f"## {c.title}\n{c.summary}")
            lines.extend(f"- {f.summary}" for f in c.findings[:4])
    else:
        lines += ["", "Relations (weight = corroborating source chunks):"]
        for r in view.relations[:_MAX_PROMPT_RELATIONS]:
            verb = r.predicate.replace("_", " ")
            text = f"{names.get(r.subject, r.subject)} {verb} {names.get(r.object, r.object)}"
            mark = "DENIED (the sources say this does NOT hold): " if r.negated else ""
            desc = f" — {r.description}" if r.description else ""
            lines.append(f"- {mark}{text} (weight {int(r.weight)}){desc}")
        if len(view.relations) > _MAX_PROMPT_RELATIONS:
            lines.append(f"- … and {len(view.relations) - _MAX_PROMPT_RELATIONS} weaker ones")
    return "\n".join(lines)


def parse_model_report(view: ClusterView, content: str) -> Report:
    """The model's JSON answer as a :class:`Report`; anything unusable is ``ReportFailed``."""
    c = view.cluster
    try:
        obj = json.loads(content)
    except json.JSONDecodeError as exc:
        raise ReportFailed(c.level, c.index, f"answer is not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ReportFailed(c.level, c.index, "answer is not a JSON object")
    title, summary, rating = obj.get("title"), obj.get("summary"), obj.get("rating")
    if not isinstance(title, str) or not title.strip():
        raise ReportFailed(c.level, c.index, "no title")
    if not isinstance(summary, str):
        raise ReportFailed(c.level, c.index, "no summary")
    if isinstance(rating, str):
        try:
            rating = float(rating)
        except ValueError:
            rating = None
    if not isinstance(rating, int | float) or isinstance(rating, bool) or rating != rating:
        raise ReportFailed(c.level, c.index, f"rating {obj.get('rating')!r} is not a number")
    findings: list[Finding] = []
    raw = obj.get("findings") or []
    if not isinstance(raw, list):
        raise ReportFailed(c.level, c.index, "findings is not a list")
    for f in raw:
        if isinstance(f, str) and f.strip():
            findings.append(Finding(f.strip()))
        elif isinstance(f, dict) and isinstance(f.get("summary"), str):
            explanation = f.get("explanation")
            findings.append(
                Finding(f["summary"].strip(), explanation if isinstance(explanation, str) else "")
            )
    return Report(
        " ".join(title.split()),
        summary.strip(),
        tuple(findings),
        round(min(10.0, max(0.0, float(rating))), 1),
    )


def model_reporter(llm: LLMClient, realm: str, *, model: str | None = None) -> Reporter:
    """Reports written by the chat model (JSON answer, denials never reported as holding)."""

    async def report(view: ClusterView, scale: RatingScale, children: Sequence[Report]) -> Report:
        result = await llm.chat(
            [
                {"role": "system", "content": _SYSTEM},
                {"role": "user", "content": report_prompt(view, children)},
            ],
            realm=realm,
            model=model,
            response_format={"type": "json_object"},
        )
        return parse_model_report(view, result.content)

    return report


async def make_reports(
    views: Sequence[ClusterView],
    reporter: Reporter,
    *,
    concurrency: int = 4,
    progress: Callable[[int, int], None] | None = None,
) -> dict[tuple[int, int], Report]:
    """Reports for ``views`` (report order), level by level so parents see their children.

    A report that fails permanently is logged and skipped; a transient failure (an
    endpoint that stays down) propagates and aborts the build, cancelling the reports
    still in flight. ``progress(finished, total)`` is called as each report finishes.
    """
    scales = rating_scales(views)
    done: dict[tuple[int, int], Report] = {}
    gate = asyncio.Semaphore(max(1, concurrency))
    finished = 0

    async def one(view: ClusterView) -> tuple[tuple[int, int], Report | None]:
        c = view.cluster
        children = [done[(c.level - 1, k)] for k in c.children if (c.level - 1, k) in done]
        nonlocal finished
        async with gate:
            try:
                made: Report | None = await reporter(view, scales[c.level], children)
            except (ReportFailed, LLMError) as exc:
                if exc.retriable:
                    raise
                log.warning("community %d.%d: report skipped: %s", c.level, c.index, exc)
                made = None
        finished += 1
        if progress is not None:
            progress(finished, len(views))
        return c.key, made

    for level in sorted({v.cluster.level for v in views}):
        tasks = [asyncio.ensure_future(one(v)) for v in views if v.cluster.level == level]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        for key, rep in results:
            if rep is not None:
                done[key] = rep
    return done
