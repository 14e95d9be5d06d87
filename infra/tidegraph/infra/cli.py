"""The `tidegraph` command line: global options, subcommands found in ``commands/``.

Configuration precedence is flags > environment (``TIDEGRAPH_*``) > ``<state>/env`` (the
addresses `tidegraph up` wrote) > defaults, so after `up` every other command finds the
services without the shell sourcing anything.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

import psycopg
from aiokafka.errors import KafkaConnectionError
from psycopg_pool import PoolTimeout

from tidegraph.infra import commands
from tidegraph.infra.errors import InfraError, PrerequisiteMissingError
from tidegraph.infra.logs import configure_logging
from tidegraph.infra.reach import kafka_unreachable, pg_unreachable
from tidegraph.infra.services import state_path
from tidegraph.schemas import VERSION, ConfigError, TidegraphError, load_settings, read_env_file

STATE_DIR_HELP = (
    "state folder of the local services (default: $TIDEGRAPH_STATE_DIR, else the nearest "
    ".tidegraph/ upwards, else ~/.local/state/tidegraph)"
)
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class ShowDefaults(argparse.HelpFormatter):
    """Help that ends each option with its default, when it has a telling one (not
    ``None``, ``False`` or a flag's absence)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or not action.option_strings
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or default == []
        ):
            return text
        return f"{text} (default: %(default)s)"


def add_state_dir_option(parser: argparse.ArgumentParser) -> None:
    """``--state-dir`` on a subcommand too, so it may follow the command name."""
    parser.add_argument(
        "--state-dir",
        default=argparse.SUPPRESS,
        help=STATE_DIR_HELP,
    )


def build_parser() -> argparse.ArgumentParser:
    """The full parser: global options plus every command module's subcommands."""
    parser = argparse.ArgumentParser(
        prog="tidegraph",
        description="Keep a bi-temporal knowledge graph in PostgreSQL in step with Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)"
    )
    parser.add_argument(
        "--state-dir",
        default=None,
        help=STATE_DIR_HELP,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{commands.__name__}.{info.name}")
        except Exception as exc:  # noqa: BLE001 - one broken command must not disable the rest
            _register_broken(sub, info.name, exc)
            continue
        register = getattr(module, "register", None)
        if callable(register):
            register(sub)
    return parser


def _register_broken(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, exc: Exception
) -> None:
    """A stand-in that reports why the command module ``name`` could not be loaded."""
    reason = f"{type(exc).__name__}: {exc}"
    logging.getLogger(__name__).debug("command module %s failed to load", name, exc_info=exc)

    def unavailable(_: argparse.Namespace) -> int:
        raise CommandUnavailableError(name, reason)

    broken = sub.add_parser(name, help=f"(unavailable: {reason})", add_help=False)
    broken.add_argument("rest", nargs=argparse.REMAINDER)
    broken.set_defaults(func=unavailable)


class CommandUnavailableError(TidegraphError):
    """A command module failed to import; the other commands still work."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"command {name!r} is unavailable: its module failed to load ({reason})")
        self.name = name


def _load_env_file(state_dir: str | None) -> None:
    """Put `up`'s addresses into the environment where nothing else set them."""
    for key, value in read_env_file(state_path(state_dir)).items():
        if key.startswith("TIDEGRAPH_"):
            os.environ.setdefault(key, value)


def _unreachable(args: argparse.Namespace, exc: Exception) -> InfraError:
    """The service a stray connection error came from, named with what to do."""
    settings = load_settings(
        kafka_bootstrap=getattr(args, "bootstrap", None), pg_dsn=getattr(args, "pg_dsn", None)
    )
    if isinstance(exc, KafkaConnectionError):
        return kafka_unreachable(settings.kafka_bootstrap, exc)
    return pg_unreachable(settings.pg_dsn.get_secret_value(), exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tidegraph`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    configure_logging(level)
    try:
        _load_env_file(args.state_dir)
        handler = args.func
        result = handler(args)
        if inspect.iscoroutine(result):
            result = asyncio.run(result)
        return int(result or 0)
    except (psycopg.OperationalError, PoolTimeout, KafkaConnectionError) as exc:
        # A connection a command made on its own path: the same one line as reach.py's.
        print(f"tidegraph: {_unreachable(args, exc)}", file=sys.stderr)
        return EXIT_FAILURE
    except (ConfigError, PrerequisiteMissingError) as exc:
        print(f"tidegraph: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TidegraphError as exc:
        print(f"tidegraph: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("tidegraph: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
