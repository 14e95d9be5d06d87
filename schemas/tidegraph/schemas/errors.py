"""The root of every error tidegraph raises on purpose.

    TidegraphError                 retriable = False
    ├── ConfigError                a setting is missing or malformed
    ├── ContractError              a record or request breaks the public contract (schemas/)
    │   └── InvalidNameError       a realm or space name fails its pattern
    └── TransientError             retriable = True: pause, back off, try again
        └── TopicMissing           a Kafka topic a reader needs is not there (yet)

Each package hangs its own subtree off these. Callers branch on ``exc.retriable``, the way
aiokafka's ``KafkaError`` carries the retry decision on the class, not in except chains.
"""

from __future__ import annotations

from typing import NamedTuple


class TidegraphError(Exception):
    """Base class; ``retriable`` says whether trying the same thing again may succeed."""

    retriable: bool = False


class ConfigError(TidegraphError):
    """A setting is missing or has a value tidegraph cannot use."""


class ContractError(TidegraphError):
    """Input breaks the public contract; it will never become valid by retrying."""


class InvalidNameError(ContractError):
    """A realm or space name does not match its pattern."""

    def __init__(self, kind: str, name: str, pattern: str) -> None:
        super().__init__(f"invalid {kind} name {name!r}: must match {pattern}")
        self.kind = kind
        self.name = name
        self.pattern = pattern


class TransientError(TidegraphError):
    """Something outside tidegraph is unavailable for now (database, broker, model endpoint)."""

    retriable = True

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TopicMissing(TransientError):
    """A reader waited for a Kafka topic that did not appear; whoever creates it may not
    have run yet, so trying again later may succeed."""

    def __init__(self, topic: str, waited: float) -> None:
        super().__init__(
            f"topic {topic} does not exist after {waited:g} s (`tidegraph topics` creates"
            " the three topics; `tidegraph up` and `tidegraph serve` run it)"
        )
        self.topic = topic


class Problem(NamedTuple):
    """One broken rule of a record."""

    field: str
    """Dotted path of the offending field (``$`` for the record as a whole)."""
    rule: str
    """What the field must satisfy, in words."""


class RecordValidationError(ContractError):
    """A record does not satisfy its schema; ``problems`` lists every broken rule."""

    def __init__(self, schema: str, problems: list[Problem]) -> None:
        detail = "; ".join(f"{p.field}: {p.rule}" for p in problems)
        super().__init__(f"invalid {schema} record: {detail}")
        self.schema = schema
        self.problems = tuple(problems)
