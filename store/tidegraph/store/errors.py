"""Errors of the indexer.

    TidegraphError
    ├── RealmSchemaError     a realm's tables disagree with its pinned embedding (invariant 10)
    ├── EmbedderMismatch     writing or querying with another embedder than the realm's
    ├── Fenced               another consumer owns the partition now: stop, do not retry
    ├── AlreadySettled       another reader applied these records to their realm first
    ├── RealmBusy            a replay of the realm runs: it cannot be deleted now
    └── TransientError
        ├── DatabaseUnavailable   PostgreSQL unreachable, restarting or overloaded
        │   └── ServerUnavailable     one named server of several does not answer
        └── RealmSwapped          a replay replaced the realm's schema under this write

``classify_db_error`` maps psycopg's SQLSTATE classes onto ``retriable``;
``is_unstorable`` recognises the errors no retry can cure because they come from the
record's own data (a NUL character in a text, a key too long for its index).
"""

from __future__ import annotations

import psycopg

from tidegraph.schemas import TidegraphError, TransientError


class RealmSchemaError(TidegraphError):
    """The realm schema cannot be used as it stands."""


class EmbedderMismatch(TidegraphError):
    """Embedding geometry differs from the realm's pinned embedder."""

    def __init__(self, realm: str, pinned: str, given: str) -> None:
        super().__init__(
            f"realm {realm!r} is pinned to embedder {pinned!r}; refusing {given!r} "
            "(vectors from different embedders are not comparable)"
        )


class Fenced(TidegraphError):
    """The stored position moved under us: this consumer lost the partition."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        super().__init__(
            f"{topic}/{partition}: position is no longer {offset} at epoch we hold; "
            "another consumer owns this partition"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset


class AlreadySettled(TidegraphError):
    """Another reader (a second consumer group, an earlier process) settled the records
    first: the realm's position is past them. Nothing was written; read the realm's
    position again and go on from there (DESIGN invariant 2)."""

    retriable = True

    def __init__(self, key: str, topic: str, partition: int, offset: int) -> None:
        super().__init__(
            f"{topic}/{partition} offset {offset}: realm {key!r} already stands past it;"
            " another reader applied it first"
        )
        self.key = key
        self.topic = topic
        self.partition = partition
        self.offset = offset


class RealmBusy(TidegraphError):
    """A replay of the realm holds it; deleting it would pull the schema from under it."""

    def __init__(self, realm: str) -> None:
        super().__init__(
            f"a replay of realm {realm!r} is running — wait for it to finish, or stop it,"
            " then delete the realm"
        )
        self.realm = realm


class DatabaseUnavailable(TransientError):
    """PostgreSQL cannot serve the write now; the partition pauses and retries."""


class ServerUnavailable(DatabaseUnavailable):
    """A named server does not answer (a connection to it failed or was lost): the work
    on its realms waits, work on other servers' realms goes on."""

    def __init__(self, server: str, cause: BaseException) -> None:
        super().__init__(f"server {server!r} does not answer: {refusal(cause)}")
        self.server = server


class RealmSwapped(TransientError):
    """The copy written was replaced — a replay swapped a rebuild in, or a move switched
    the realm to another server — and fenced; the write is tried again where the realm
    lives now."""

    def __init__(self, realm: str) -> None:
        super().__init__(
            f"realm {realm!r} was replaced under this write (a rebuild swapped in, or a move"
            " to another server); retrying it where the realm lives now"
        )


_TRANSIENT_SQLSTATE_CLASSES = ("08", "40", "53", "57", "58")
_DATA_SQLSTATE_CLASSES = ("22", "54")
"""Data exception (invalid text, untranslatable character, value out of range) and program
limit exceeded (an index row larger than a page allows)."""


def refusal(exc: BaseException) -> str:
    """The first line of PostgreSQL's refusal (its detail may quote the refused value)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def is_unstorable(exc: BaseException) -> bool:
    """True when PostgreSQL refused a value of the record itself: writing the same record
    again fails the same way, so it is recorded as failed instead of retried."""
    if isinstance(exc, psycopg.DataError):
        return True  # also raised client-side, before sending, for a NUL in a text
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "")[:2] in _DATA_SQLSTATE_CLASSES


_READ_ONLY = "25006"
"""A write reached a server in recovery: a standby, or an old primary coming back as one,
behind an address (a virtual IP, a proxy, a single-host DSN) that is yet to move to the
promoted server. Retrying reaches the primary once the address moves (a multi-host DSN with
``target_session_attrs=read-write`` never connects there)."""


def classify_db_error(exc: BaseException) -> BaseException:
    """Turn a psycopg error into ``DatabaseUnavailable`` when retrying can help."""
    if isinstance(exc, psycopg.Error) and exc.sqlstate == _READ_ONLY:
        return DatabaseUnavailable(f"the server reached takes no writes (a standby): {exc}")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate is None or sqlstate[:2] in _TRANSIENT_SQLSTATE_CLASSES:
            return DatabaseUnavailable(f"database unavailable: {exc}")
    if isinstance(exc, psycopg.Error):
        sqlstate = exc.sqlstate or ""
        if sqlstate[:2] in _TRANSIENT_SQLSTATE_CLASSES:
            return DatabaseUnavailable(f"database busy ({sqlstate}): {exc}")
    return exc


def is_transient(exc: BaseException) -> bool:
    """Whether a database error means "unavailable now" rather than a bug."""
    return isinstance(classify_db_error(exc), DatabaseUnavailable)
