"""The ``regimes`` command: one subcommand per module, errors as one line.

Each subcommand's module exports ``register(subparsers)``: ``analyze``, ``report`` and
``compare`` live here (:mod:`regimes.cli.analyze`, :mod:`regimes.cli.report`,
:mod:`regimes.cli.compare`); ``collect`` with the code it drives (:mod:`collectors.cli`),
and ``refine``, built here (:mod:`regimes.cli.refine`), is registered by the collectors
with their prober (:mod:`collectors.refine_command`); both import torch only when they
measure. Modules are imported when the parser is built,
so ``import regimes`` stays light.

Whatever the user can fix ends as one line on stderr and exit status 2: a
:class:`~regimes.errors.RegimesInputError`, a file the system refuses (``OSError``), a
run that cannot be parsed, and a bad command-line argument.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from importlib import import_module
from typing import Any, NoReturn

from regimes.errors import RegimesInputError

__all__ = ["COMMANDS", "EXIT_USAGE", "main"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""Ctrl-C: the shell's status for SIGINT, as an interrupted sweep exits."""

EXIT_STATUSES = (
    "exit status: 0 success; 1 analyze or compare found what --fail-on names; 2 input "
    "that cannot be used (a missing or malformed run, a bad option), printed as one line "
    "on stderr; 3 collect stopped by --max-seconds (rerun it to resume); 4 collect ran to "
    "the end with failed cases recorded; 130 refine interrupted (rerun it to resume)"
)
"""Every exit status of the ``regimes`` command, as ``regimes --help`` lists them."""

COMMANDS: dict[str, str] = {
    "collect": "collectors.cli",
    "analyze": "regimes.cli.analyze",
    "report": "regimes.cli.report",
    "compare": "regimes.cli.compare",
    "refine": "collectors.refine_command",
}
"""Each subcommand and the module whose ``register`` adds it (in ``--help`` order)."""


class _UsageError(Exception):
    """A command-line argument the parser refused."""

    def __init__(self, prog: str, message: str):
        super().__init__(f"{prog}: error: {message} (see {prog} --help)")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, raised rather than printed."""

    def error(self, message: str) -> NoReturn:
        """Raise the parser's complaint as a one-line usage error."""
        raise _UsageError(self.prog, message)


def _build_parser() -> argparse.ArgumentParser:
    from regimes import __version__

    parser = _Parser(
        prog="regimes",
        description="Measure decode latency across decoding budgets and find where it "
        "leaves its smooth trend.",
        epilog=EXIT_STATUSES,
    )
    parser.add_argument("--version", action="version", version=f"regimes {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        try:
            register = import_module(module).register
        except ImportError:  # a command whose package is not installed here
            continue
        register(sub)
    return parser


_RUN_ERRORS: tuple[type[BaseException], ...] = (
    RegimesInputError,
    OSError,
    json.JSONDecodeError,
    UnicodeDecodeError,
)
"""Exceptions that mean the input cannot be used, not that the code is wrong (reading a
run wraps the parquet reader's own errors in :class:`RegimesInputError`)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``regimes`` command with ``argv`` (default ``sys.argv[1:]``).

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name.

    Returns
    -------
    int
        The exit status: 0 on success, 2 for input the user can fix (printed as one
        line on stderr), or the subcommand's own status (``collect`` documents its own).

    Examples
    --------
    >>> main(["analyze", "no/such/run"])
    2
    """
    try:
        args = _build_parser().parse_args(argv)
    except _UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # while the subcommands' modules import
        print("regimes: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    with warnings.catch_warnings():
        warnings.showwarning = _warning_line
        try:
            return int(args.handler(args) or 0)
        except _RUN_ERRORS as exc:
            print(f"regimes {args.command}: error: {_one_line(exc)}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            print(f"regimes {args.command}: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED


def _warning_line(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    """Print a warning as one line on stderr (no source line: the user runs no code)."""
    print(f"warning: {' '.join(str(message).split())}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {str(exc.filename)!r}" if exc.filename else ""
        return f"{exc.strerror}:{where}"
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
