"""The PostgreSQL servers realms live on, by name.

One server is always there: ``main``, the one ``TIDEGRAPH_PG_DSN`` names. It holds the
realm catalogue (which server holds each realm), the consumer groups' claims and the keys
no realm holds; a deployment with one server is exactly that. More servers are named in
``TIDEGRAPH_PG_SERVERS`` — ``name=DSN`` entries separated by ``;`` or new lines — or in
the file ``TIDEGRAPH_PG_SERVERS_FILE`` (the same entries, one per line, ``#`` comments).
A DSN is a libpq URI or ``key=value`` string; only its first ``=`` separates it from the
name. Every process of a deployment must be given the same servers: a realm placed on a
server a process does not know is an error it names, never a silent miss.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tidegraph.schemas.errors import ConfigError, InvalidNameError

MAIN = "main"
"""The server ``TIDEGRAPH_PG_DSN`` names: it holds the catalogue."""

SERVER_PATTERN = r"[a-z][a-z0-9_]{0,30}"
_SERVER = re.compile(SERVER_PATTERN)


def validate_server(name: str) -> str:
    """Return ``name`` when it is a valid server name, else raise."""
    if not _SERVER.fullmatch(name):
        raise InvalidNameError("server", name, SERVER_PATTERN)
    return name


class UnknownServer(ConfigError):
    """A realm lives on a server this process was not given."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(
            f"server {name!r} is not configured here (known: {', '.join(known)}); give every "
            "process the same TIDEGRAPH_PG_SERVERS"
        )
        self.name = name


@dataclass(frozen=True)
class Servers:
    """Server name → DSN, ``main`` first."""

    entries: tuple[tuple[str, str], ...]

    @classmethod
    def single(cls, dsn: str) -> Servers:
        return cls(((MAIN, dsn),))

    @classmethod
    def of(cls, main_dsn: str, others: Mapping[str, str]) -> Servers:
        """``main`` at ``main_dsn`` and ``others`` (checked: names valid, no second main,
        no DSN given twice)."""
        entries = [(MAIN, main_dsn)]
        for name, dsn in others.items():
            validate_server(name)
            if name == MAIN:
                if dsn != main_dsn:
                    raise ConfigError(
                        "TIDEGRAPH_PG_SERVERS names 'main' with another DSN than "
                        "TIDEGRAPH_PG_DSN: main is always the TIDEGRAPH_PG_DSN server"
                    )
                continue
            entries.append((name, dsn))
        dsns = [d for _, d in entries]
        if len(set(dsns)) != len(dsns):
            raise ConfigError("TIDEGRAPH_PG_SERVERS names one DSN twice: one server, one name")
        return cls(tuple(entries))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.entries)

    @property
    def main_dsn(self) -> str:
        return self.entries[0][1]

    def dsn(self, name: str) -> str:
        for n, d in self.entries:
            if n == name:
                return d
        raise UnknownServer(name, self.names)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


def parse_servers(text: str, origin: str = "TIDEGRAPH_PG_SERVERS") -> dict[str, str]:
    """``name=DSN`` entries separated by ``;`` or new lines (blank entries and ``#``
    comment lines skipped), by name, in the order given."""
    out: dict[str, str] = {}
    for raw in re.split(r"[;\n]", text):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        name, sep, dsn = entry.partition("=")
        name, dsn = name.strip(), dsn.strip()
        if not sep or not dsn:
            raise ConfigError(f"{origin}: {entry!r} is not name=DSN")
        try:
            validate_server(name)
        except InvalidNameError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        if name in out:
            raise ConfigError(f"{origin}: server {name!r} is named twice")
        out[name] = dsn
    return out


def load_servers(main_dsn: str, env: Mapping[str, str]) -> Servers:
    """The servers a process is given: ``main`` at ``main_dsn``, others from
    ``TIDEGRAPH_PG_SERVERS`` and ``TIDEGRAPH_PG_SERVERS_FILE`` in ``env``."""
    others: dict[str, str] = {}
    path = env.get("TIDEGRAPH_PG_SERVERS_FILE")
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"TIDEGRAPH_PG_SERVERS_FILE={path}: {exc.strerror}") from None
        others.update(parse_servers(text, f"TIDEGRAPH_PG_SERVERS_FILE={path}"))
    inline = env.get("TIDEGRAPH_PG_SERVERS")
    if inline:
        for name, dsn in parse_servers(inline).items():
            if others.get(name, dsn) != dsn:
                raise ConfigError(
                    f"server {name!r} has one DSN in TIDEGRAPH_PG_SERVERS and another in"
                    " TIDEGRAPH_PG_SERVERS_FILE"
                )
            others[name] = dsn
    return Servers.of(main_dsn, others)
