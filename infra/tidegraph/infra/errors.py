"""Errors of the local services: each message names what failed and what to do about it.

    TidegraphError                        (tidegraph.schemas.errors)
    └── InfraError
        ├── PrerequisiteMissingError      java or mvn absent, or a JDK too old
        ├── PortInUseError                a port `up` needs is held by another process
        ├── FetchError                    Maven could not resolve the broker's jars
        ├── ServiceStartError             a service exited or never answered; carries a log tail
        ├── ServiceUnreachableError       retriable: an external service does not answer
        ├── VectorExtensionError          `CREATE EXTENSION vector` fails on the server
        ├── StateDirError                 the state folder holds something `up` cannot reuse
        └── PackageDataError              a file the package ships is missing: a broken install

The command line prints ``str(exc)``; the first line is meant to stand alone.
"""

from __future__ import annotations

from tidegraph.schemas import TidegraphError


class InfraError(TidegraphError):
    """Root of the errors raised while starting, checking or stopping services."""


class PrerequisiteMissingError(InfraError):
    """A program a person installs themselves is missing or too old."""

    def __init__(self, program: str, install: str, *, found: str | None = None) -> None:
        what = f"{program} not found" if found is None else f"{program} is too old ({found})"
        super().__init__(f"{what}: install {install}")
        self.program = program
        self.install = install
        self.found = found


class PortInUseError(InfraError):
    """The port is already bound; ``holder`` describes the process when it can be found."""

    def __init__(
        self, service: str, port: int, holder: str | None = None, *, option: str = ""
    ) -> None:
        by = f" by {holder}" if holder else " by another process"
        choose = f"choose another with {option}" if option else "choose another port"
        where = "" if option else " (see `tidegraph up --help`)"
        super().__init__(
            f"port {port} for {service} is already in use{by} — stop it or {choose}{where}"
        )
        self.service = service
        self.port = port
        self.holder = holder


class FetchError(InfraError):
    """Resolving jars (the broker's, Kafka Connect's) from Maven Central failed."""

    def __init__(
        self, detail: str, *, output_tail: str = "", what: str = "the Kafka broker"
    ) -> None:
        message = f"could not fetch {what} jars with Maven: {detail}"
        if output_tail:
            message += f"\n{output_tail}"
        super().__init__(message)
        self.output_tail = output_tail


class ServiceStartError(InfraError):
    """A service exited during start-up or did not answer in time; ``log_tail`` says why."""

    def __init__(
        self, service: str, reason: str, *, log_path: str = "", log_tail: str = ""
    ) -> None:
        message = f"{service} {reason}"
        if log_path:
            message += f" (log: {log_path})"
        if log_tail:
            message += f"\n--- last lines of the {service} log ---\n{log_tail}"
        super().__init__(message)
        self.service = service
        self.reason = reason
        self.log_path = log_path
        self.log_tail = log_tail


class ServiceUnreachableError(InfraError):
    """A service does not answer at the address in force; it may come back.

    ``hint`` is what to do about it; the message reads ``<what> — <what to do>``.
    """

    retriable = True

    def __init__(self, service: str, address: str, cause: str, *, hint: str = "") -> None:
        message = f"{service} at {address} does not answer ({cause})"
        if hint:
            message += f" — {hint}"
        super().__init__(message)
        self.service = service
        self.address = address
        self.cause = cause
        self.hint = hint


class VectorExtensionError(InfraError):
    """The server cannot create pgvector's ``vector`` extension; every realm needs it."""

    def __init__(self, address: str, cause: str) -> None:
        super().__init__(
            f"CREATE EXTENSION vector failed on {address}: {cause}; "
            "install pgvector on that server (or use the embedded default)"
        )
        self.address = address


class StateDirError(InfraError):
    """The state folder describes something `up` must not reuse or overwrite."""


class PackageDataError(InfraError):
    """A file shipped inside the package is not where the package says: the installation
    is incomplete (or the package was imported from an archive, which tidegraph does not
    support), so reinstalling is the fix."""

    def __init__(self, what: str, where: str) -> None:
        super().__init__(
            f"{what} is missing from the installed package (looked for {where}); "
            "reinstall tidegraph"
        )
        self.what = what
        self.where = where
