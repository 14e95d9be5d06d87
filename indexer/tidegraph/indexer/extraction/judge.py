"""The model as the judge of the residue (``contradiction_prompt``), one call per question.

Questions of one write are asked concurrently (the client bounds what is in flight). An
answer that does not parse is asked again up to ``attempts`` times within the call's
deadline, then raised as :class:`~tidegraph.indexer.models.errors.LLMBadOutput` — the
realm stops at the record (fail closed) rather than guessing; an outage raises the
client's retriable ``LLMUnavailable`` and the record is paused and retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tidegraph.indexer.extraction.contradiction_prompt import (
    contradiction_messages,
    parse_contradiction,
)
from tidegraph.indexer.extraction.llm import InvalidOutput, outermost_object
from tidegraph.indexer.graph import Answer, Question
from tidegraph.indexer.models import LLMBadOutput
from tidegraph.indexer.models.client import LLMClient

__all__ = ["LLMJudge"]


class LLMJudge:
    """A :class:`~tidegraph.indexer.graph.supersession.Judge` asking a chat model."""

    def __init__(
        self, client: LLMClient, *, realm: str, model: str | None = None, attempts: int = 3
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be >= 1")
        self._client = client
        self.realm = realm
        self.model = model or client.settings.model
        self.attempts = attempts

    async def judge(self, questions: Sequence[Question]) -> dict[Question, Answer]:
        answers = await asyncio.gather(*(self._ask(q) for q in questions))
        return dict(zip(questions, answers, strict=True))

    async def _ask(self, asked: Question) -> Answer:
        messages = contradiction_messages(asked)
        reason = "no attempt"
        for _ in range(self.attempts):
            reply = await self._client.chat(messages, realm=self.realm, model=self.model)
            try:
                return Answer(parse_contradiction(outermost_object(reply.content)), self.model)
            except (InvalidOutput, ValueError) as exc:
                reason = str(exc)
        raise LLMBadOutput(
            self._client.endpoint,
            "chat",
            self.model,
            reason=f"no usable contradiction answer after {self.attempts} attempt(s): {reason}",
        )
