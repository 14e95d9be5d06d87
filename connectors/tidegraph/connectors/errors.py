"""Errors the connectors raise on purpose.

    ConnectorError                     (TidegraphError)
    ├── DocumentTooLargeError          also ContractError: refused, never truncated
    ├── UndecodableSourceError         also ContractError: a file that is not UTF-8 text
    ├── DeliveryError                  also TransientError: Kafka did not acknowledge
    └── SourceSetupError               also ConfigError: publication, slot or table unusable

A connector reports a document as published only after Kafka acknowledged it; every path
that cannot say so raises :class:`DeliveryError`, whose ``retriable`` follows the Kafka error.
"""

from __future__ import annotations

from tidegraph.schemas import ConfigError, ContractError, TidegraphError, TransientError


class ConnectorError(TidegraphError):
    """Root of the connectors' errors."""


class DocumentTooLargeError(ConnectorError, ContractError):
    """A document's encoded record is over the configured limit."""

    def __init__(self, realm: str, doc_key: str, size: int, limit: int) -> None:
        super().__init__(
            f"document {doc_key!r} of realm {realm!r} is {size} bytes encoded, over the "
            f"{limit}-byte limit; refused (documents are never truncated)"
        )
        self.realm = realm
        self.doc_key = doc_key
        self.size = size
        self.limit = limit


class UndecodableSourceError(ConnectorError, ContractError):
    """A source file is not UTF-8 text (binary, or another encoding)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: not UTF-8 text ({reason}); skipped")
        self.path = path
        self.reason = reason


class DeliveryError(ConnectorError, TransientError):
    """Kafka did not acknowledge a record (unreachable, timed out, or refused it)."""

    def __init__(self, message: str, *, doc_key: str | None = None, retriable: bool = True) -> None:
        where = f"document {doc_key!r}: " if doc_key is not None else ""
        super().__init__(where + message)
        self.doc_key = doc_key
        self.retriable = retriable


class SourceSetupError(ConnectorError, ConfigError):
    """The upstream source cannot be captured as configured (table, key, publication, slot)."""
