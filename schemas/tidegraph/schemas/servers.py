"""The PostgreSQL servers realms live on, by name.

One server is always there: ``main``, the one ``TIDEGRAPH_PG_DSN`` names. It holds the
realm catalogue (which server holds each realm), the consumer groups' claims and the keys
no realm holds; a deployment with one server is exactly that. More servers are named in
``TIDEGRAPH_PG_SERVERS`` — ``name=DSN`` entries separated by ``;`` or new lines — or in
the file ``TIDEGRAPH_PG_SERVERS_FILE`` (the same entries, one per line, ``#`` comments).
A DSN is a libpq URI or ``key=value`` string; only its first ``=`` separates it from the
name. Every process of a deployment must be given the same servers: a realm placed on a
server a process does not know is an error it names, never a silent miss.

A server may have streaming standbys (read-only copies that follow it), named in
``TIDEGRAPH_PG_STANDBYS`` with the same entry syntax, the name being ``server/standby``:
``main/s1=DSN;main/s2=DSN;pg2/s1=DSN``. A standby name follows the server-name rule and is
unique within its server. Which server is the primary is never assumed from these names:
a DSN may list several hosts with ``target_session_attrs=read-write``, and a promotion
changes only what the DSNs point at.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
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
class Standby:
    """A streaming standby of one server."""

    server: str
    """The server it follows."""
    name: str
    """Its name within that server (``s1``)."""
    dsn: str
    """Where it listens (read-only)."""

    @property
    def label(self) -> str:
        """``server/name``, as entries and messages spell it."""
        return f"{self.server}/{self.name}"


@dataclass(frozen=True)
class Servers:
    """Server name → DSN, ``main`` first, and each server's standbys."""

    entries: tuple[tuple[str, str], ...]
    standby_entries: tuple[Standby, ...] = ()
    """Every server's standbys, in the order given."""

    @classmethod
    def single(cls, dsn: str) -> Servers:
        return cls(((MAIN, dsn),))

    @classmethod
    def of(
        cls,
        main_dsn: str,
        others: Mapping[str, str],
        standbys: Mapping[str, str] | None = None,
    ) -> Servers:
        """``main`` at ``main_dsn``, ``others``, and ``standbys`` by ``server/name``
        (checked: names valid, no second main, each standby's server known, no DSN given
        twice)."""
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
        known = tuple(n for n, _ in entries)
        followers = []
        for label, dsn in (standbys or {}).items():
            server, name = split_standby(label)
            if server not in known:
                raise ConfigError(
                    f"TIDEGRAPH_PG_STANDBYS: {label!r} follows server {server!r}, which is not"
                    f" configured here (known: {', '.join(known)})"
                )
            if dsn in dsns:
                raise ConfigError(
                    f"TIDEGRAPH_PG_STANDBYS: {label!r} has the DSN of a server or another standby"
                )
            dsns.append(dsn)
            followers.append(Standby(server, name, dsn))
        return cls(tuple(entries), tuple(followers))

    def standbys(self, server: str) -> tuple[Standby, ...]:
        """The standbys of ``server`` (none unless named)."""
        return tuple(s for s in self.standby_entries if s.server == server)

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


def split_standby(label: str) -> tuple[str, str]:
    """``server/name`` → (server, name), both checked against the server-name rule."""
    server, sep, name = label.partition("/")
    if not sep:
        raise ConfigError(f"TIDEGRAPH_PG_STANDBYS: {label!r} is not server/standby")
    try:
        return validate_server(server), validate_server(name)
    except InvalidNameError as exc:
        raise ConfigError(f"TIDEGRAPH_PG_STANDBYS: {exc}") from None


def parse_servers(text: str, origin: str = "TIDEGRAPH_PG_SERVERS") -> dict[str, str]:
    """``name=DSN`` entries separated by ``;`` or new lines (blank entries and ``#``
    comment lines skipped), by name, in the order given."""
    return _parse_entries(text, origin, validate_server)


def parse_standbys(text: str, origin: str = "TIDEGRAPH_PG_STANDBYS") -> dict[str, str]:
    """:func:`parse_servers`' syntax with ``server/standby`` names."""
    return _parse_entries(text, origin, split_standby)


def _parse_entries(text: str, origin: str, check: Callable[[str], object]) -> dict[str, str]:
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
            check(name)
        except InvalidNameError as exc:
            raise ConfigError(f"{origin}: {exc}") from None
        if name in out:
            raise ConfigError(f"{origin}: {name!r} is named twice")
        out[name] = dsn
    return out


def load_servers(main_dsn: str, env: Mapping[str, str]) -> Servers:
    """The servers a process is given: ``main`` at ``main_dsn``, others from
    ``TIDEGRAPH_PG_SERVERS`` and ``TIDEGRAPH_PG_SERVERS_FILE`` in ``env``, their standbys
    from ``TIDEGRAPH_PG_STANDBYS``."""
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
    standbys = parse_standbys(env.get("TIDEGRAPH_PG_STANDBYS", ""))
    return Servers.of(main_dsn, others, standbys)
