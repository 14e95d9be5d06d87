"""Errors of a replay (rebuilding a realm from the documents topic).

    TidegraphError
    ├── InvalidNameError          a shadow or audit label fails its pattern (schemas.errors)
    └── ReplayError               the replay cannot go on; the shadow is left as it stands
        ├── ShadowExists          the schema a replay would build into exists already
        ├── ReplayBusy            another replay of the realm is running
        ├── ReplayApplyError      a record could not be applied (not retriable)
        └── SwapRefused           the shadow cannot replace the live realm (it is ahead of
            │                     the live position, or the live realm was swapped meanwhile)
            └── SwapLockTimeout   a lock the swap needs was not granted in time (the
                                  replay tries again a few times before giving up)

A transient failure (database restart, model endpoint down) is retried with backoff from
the replay's stored position, like the indexer does; only a failure that outlives its
retries surfaces, as the ``TransientError`` it was.
"""

from __future__ import annotations

from tidegraph.schemas import TidegraphError


class ReplayError(TidegraphError):
    """A replay stopped; what it built so far stays in its schema for inspection."""


class ShadowExists(ReplayError):
    """The target schema is taken; a replay never writes into a schema it did not create."""

    def __init__(self, schema: str) -> None:
        super().__init__(
            f"schema {schema!r} exists already; choose another name or drop it "
            f"(DROP SCHEMA {schema} CASCADE) if it is a leftover replay"
        )
        self.schema = schema


class ReplayBusy(ReplayError):
    """Two replays of one realm cannot both swap in."""

    def __init__(self, realm: str) -> None:
        super().__init__(
            f"another replay of realm {realm!r} is running (it holds the realm's replay "
            "lock); wait for it, or use --no-swap for an inspection copy"
        )
        self.realm = realm


class ReplayApplyError(ReplayError):
    """A record of the realm could not be written into the shadow."""

    def __init__(self, realm: str, partition: int, offset: int, doc_key: str, cause: str) -> None:
        super().__init__(
            f"realm {realm!r}: record at partition {partition} offset {offset} "
            f"({doc_key!r}) could not be applied: {cause}"
        )
        self.realm = realm
        self.partition = partition
        self.offset = offset
        self.doc_key = doc_key


class SwapRefused(ReplayError):
    """The swap was not done; the live realm is untouched and the shadow is kept."""


class SwapLockTimeout(SwapRefused):
    """Readers or a writer held a table the swap must lock longer than ``lock_timeout``."""
