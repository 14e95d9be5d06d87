"""Subcommands of the `tidegraph` command line, one module each, found by ``cli`` at start.

A module here (not starting with ``_``) exposes::

    def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None

which adds its parser(s) with ``sub.add_parser(...)`` and sets ``func`` on each through
``set_defaults(func=handler)``. ``handler(args: argparse.Namespace)`` returns the exit code;
an ``async def`` handler is run with ``asyncio.run``. Raise a ``TidegraphError`` for an
expected failure: the command line prints its message on one line and exits non-zero.
Adding a command never requires touching ``cli.py``.
"""
