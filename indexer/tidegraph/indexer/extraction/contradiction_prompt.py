"""The question the model is asked about the residue (paper §7.4), versioned.

Two asserted relations share subject and predicate and differ in the object, and no
declared rule says whether both can hold: ``Ada lives in Paris`` and ``Ada lives in
Berlin`` cannot (at one time), ``Ada speaks French`` and ``Ada speaks German`` can. The
model sees the two relations as rendered (validity periods included: ``lives in Paris
[until 1990]`` and ``lives in Berlin [from 1991]`` do not contradict) and answers
``{"contradicts": true|false}``. Nothing else is sent: the answer depends on the two
texts alone, so it is cached by them and the prompt version (:func:`answer_key`).

``PROMPT_VERSION`` is part of the key: change it whenever the wording or the layout
changes. Message layout (the test server depends on it): one system message starting
with :data:`SYSTEM_MARK`; one user message with the relations between ``<first>`` and
``<second>`` tags. No ``openai`` import here, so the writer can compute keys cheaply.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Final

import orjson

from tidegraph.indexer.graph import Question

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

__all__ = [
    "PROMPT_VERSION",
    "SYSTEM_MARK",
    "answer_key",
    "contradiction_messages",
    "parse_contradiction",
]

PROMPT_VERSION: Final = "contradiction-v1"

SYSTEM_MARK: Final = "You decide whether two statements from a knowledge graph contradict"

_SYSTEM: Final = (
    SYSTEM_MARK + " each other. Both have the same subject and the same relation and differ in the"
    " object. They contradict each other when both cannot be true at the same time: a"
    " person lives in one city at a time, a company has one headquarters, a book has one"
    " first publication year. They do not when both can hold together (a person speaks"
    " several languages, works with several people, visits several cities) or when the"
    " stated periods keep them apart ([until 1990] and [from 1991]). When unsure, answer"
    ' false. Answer with JSON only: {"contradicts": true} or {"contradicts": false}.'
)


def answer_key(asked: Question) -> str:
    """Where an answer is cached: sha256 (hex) over the prompt version and both texts."""
    payload = orjson.dumps([PROMPT_VERSION, asked[0], asked[1]])
    return hashlib.sha256(payload).hexdigest()


def contradiction_messages(asked: Question) -> list[ChatCompletionMessageParam]:
    """The chat messages asking about one question."""
    return [
        {"role": "system", "content": _SYSTEM},
        {
            "role": "user",
            "content": f"<first>{asked[0]}</first>\n<second>{asked[1]}</second>",
        },
    ]


def parse_contradiction(value: object) -> bool:
    """The answer in a decoded JSON object, or :class:`ValueError` saying why not."""
    if not isinstance(value, dict):
        raise ValueError("the answer is not a JSON object")
    answer = value.get("contradicts")
    if not isinstance(answer, bool):
        raise ValueError(f'"contradicts" is {answer!r}, not true or false')
    return answer
