"""The model's answers about the residue, obtained outside the write transaction.

Reconciliation (``relations``) knows which questions it needs only once it has read the
competing relations, inside the transaction; the model must not be called there (a slow
or absent endpoint would hold the transaction, its locks and the realm's stamp). So:

1. the write looks its questions up in the realm's ``contradiction_answers`` table, in the
   transaction (:func:`known_answers`); a question without an answer raises
   :class:`AnswersNeeded` and the transaction rolls back;
2. the unit of work (``units``) asks its :class:`Judge` — the cache of the realm a replay
   rebuilds from, then the model — stores the answers (:func:`store_answers`) and writes
   the record again (:func:`answering`).

A replay of a realm whose questions were answered before therefore asks nothing, and the
answers, not the arrival order, decide the graph. A model outage raises from the judge
as the endpoint's retriable error: the record is paused and retried like any outage, and
nothing is written meanwhile.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from tidegraph.indexer.extraction import PROMPT_VERSION, answer_key
from tidegraph.indexer.graph import Answer, Judge, Question
from tidegraph.indexer.write.context import WriteContext, realm_query
from tidegraph.schemas import ConfigError
from tidegraph.store import RealmInfo

__all__ = [
    "Answer",
    "AnswersNeeded",
    "CachedJudge",
    "Judge",
    "JudgeFor",
    "answering",
    "known_answers",
    "store_answers",
]

T = TypeVar("T")


JudgeFor = Callable[[RealmInfo], Judge | None]
"""The judge of a realm's questions; ``None`` when no model endpoint is configured."""


class AnswersNeeded(Exception):
    """The write needs answers it does not have; ask outside the transaction and retry."""

    def __init__(self, questions: Iterable[Question]) -> None:
        self.questions = tuple(sorted(set(questions)))
        super().__init__(f"{len(self.questions)} contradiction question(s) not answered yet")


async def known_answers(ctx: WriteContext, asked: Iterable[Question]) -> dict[Question, bool]:
    """The cached answer to every question asked, or :class:`AnswersNeeded`."""
    by_key = {answer_key(q): q for q in asked}
    if not by_key:
        return {}
    rows = await ctx.rows(
        "SELECT key, contradicts FROM {contradiction_answers} WHERE key = ANY(%s)",
        (sorted(by_key),),
    )
    found = {by_key[str(k)]: bool(c) for k, c in rows}
    missing = by_key.values() - found.keys()
    if missing:
        raise AnswersNeeded(missing)
    return found


async def store_answers(
    conn: AsyncConnection[Any], schema: str, answers: Mapping[Question, Answer]
) -> None:
    """Keep answers in ``schema``'s cache (the first answer to a question stays)."""
    if not answers:
        return
    items = sorted(answers.items())
    async with conn.transaction():
        await conn.execute(
            realm_query(
                schema,
                "INSERT INTO {contradiction_answers}"
                " (key, first_text, second_text, prompt_version, contradicts, model)"
                " SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[],"
                " %s::bool[], %s::text[]) ON CONFLICT DO NOTHING",
            ),
            (
                [answer_key(q) for q, _ in items],
                [q[0] for q, _ in items],
                [q[1] for q, _ in items],
                [PROMPT_VERSION] * len(items),
                [a.contradicts for _, a in items],
                [a.model for _, a in items],
            ),
        )


async def answering(
    conn: AsyncConnection[Any],
    info: RealmInfo,
    judge: Judge | None,
    attempt: Callable[[], Awaitable[T]],
) -> T:
    """``attempt()`` (a write), asking ``judge`` and writing again while it needs answers.

    Each round stores answers the write asked for, so the rounds end; a write asking again
    for what was just stored is a bug, raised rather than looped on.
    """
    stored: set[Question] = set()
    while True:
        try:
            return await attempt()
        except AnswersNeeded as need:
            if judge is None:
                raise ConfigError(
                    f"realm {info.realm!r} asks the model about contradictions "
                    "(contradiction_model) but no model endpoint is configured "
                    "(set TIDEGRAPH_LLM_BASE_URL and TIDEGRAPH_LLM_MODEL)"
                ) from need
            if stored.issuperset(need.questions):
                raise RuntimeError(
                    f"realm {info.realm!r}: answers stored in {info.schema!r} were not found "
                    "by the write that asked for them"
                ) from need
            answers = await judge.judge(need.questions)
            await store_answers(conn, info.schema, answers)
            stored.update(answers)


class CachedJudge:
    """Answers from the caches of other schemas first (the live realm a replay rebuilds),
    then from ``inner`` (the model) for the rest."""

    def __init__(
        self,
        inner: Judge,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        read_through: Sequence[str] = (),
    ) -> None:
        self._inner = inner
        self._pool = pool
        self._read_through = tuple(read_through)

    async def judge(self, questions: Sequence[Question]) -> dict[Question, Answer]:
        found: dict[Question, Answer] = {}
        if self._read_through:
            by_key = {answer_key(q): q for q in questions}
            query = sql.SQL(" UNION ALL ").join(
                sql.SQL("SELECT key, contradicts, model FROM {} WHERE key = ANY(%(keys)s)").format(
                    sql.Identifier(s, "contradiction_answers")
                )
                for s in self._read_through
            )
            async with self._pool.connection() as conn:
                cur = await conn.execute(query, {"keys": sorted(by_key)})
                for key, contradicts, model in await cur.fetchall():
                    found.setdefault(by_key[str(key)], Answer(bool(contradicts), str(model)))
        rest = [q for q in questions if q not in found]
        if rest:
            found.update(await self._inner.judge(rest))
        return found
