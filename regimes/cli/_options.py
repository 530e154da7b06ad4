"""Options shared by the analysis commands, and their one-line argument errors.

Each type function turns a command-line string into the value the library takes, with
the library's own check (:mod:`regimes.data.schema`), so that a bad value is refused by
the parser in the same words the Python API would use. The detection options given
become one :class:`regimes.options.DetectionOptions` (:func:`detection_options`); an
option left out keeps the library's default, which the flags never restate.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

from regimes.data.schema import RegimesInputError, check_seed
from regimes.options import DetectionOptions

DETECT_OPTIONS = ("by", "alpha", "min_ratio", "direction", "n_boot", "seed")
"""Detection options the flags set (``--x`` and ``--y`` always hold a value)."""


def add_skip_damaged(parser: argparse.ArgumentParser) -> None:
    """Add ``--skip-damaged``: read the run without its damaged parts, naming each."""
    parser.add_argument(
        "--skip-damaged",
        action="store_true",
        help="leave out parts that cannot be read as written (truncated, changed bytes), "
        "with a warning naming each, instead of refusing the run (on_damaged='skip')",
    )


def on_damaged(args: argparse.Namespace) -> Literal["raise", "skip"]:
    """Return the ``on_damaged`` argument of :func:`regimes.read_run` the flags ask for."""
    return "skip" if getattr(args, "skip_damaged", False) else "raise"


def add_run_argument(parser: argparse.ArgumentParser) -> None:
    """Add RUN: the run a command analyses."""
    parser.add_argument(
        "run", type=Path, metavar="RUN", help="a run directory, or a .parquet / .csv trial table"
    )


def add_detection_options(
    parser: argparse.ArgumentParser,
    *,
    run: bool = True,
    axes: bool = True,
    leave_out: Collection[str] = (),
    by_help: str = "group by these columns instead of the case columns present",
) -> None:
    """Add RUN and the detection options every analysing command shares.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    run : bool, default True
        Add the RUN positional argument (``compare`` names its two runs itself).
    axes : bool, default True
        Add ``--x`` and ``--y``.
    leave_out : collection of str
        Options of :data:`DETECT_OPTIONS` the command's analysis does not take (each
        is named by the analysis's signature; a test holds them so).
    by_help : str
        What ``--by`` does for this command.
    """
    if run:
        add_run_argument(parser)
    if axes:
        add_axis_options(parser, "the time analysed")
    flags: dict[str, dict[str, Any]] = {
        "by": dict(type=column_list, metavar="COL[,COL...]", help=by_help),
        "alpha": dict(type=probability, help="false discovery rate of anomalies"),
        "min_ratio": dict(
            type=at_least_one, help="smallest level ratio over the trend that counts as an anomaly"
        ),
        "direction": dict(
            choices=("up", "down", "both"),
            help="report slowdowns (up, the default), speedups (down) or both",
        ),
        "n_boot": dict(
            type=whole_number,
            help="bootstrap draws of the detection, which bound where each anomaly starts "
            "and ends (default 200)",
        ),
        "seed": dict(type=seed, help="random seed, >= 0 (default 0)"),
    }
    for name, settings in flags.items():
        if name not in leave_out:
            parser.add_argument(f"--{name.replace('_', '-')}", default=None, **settings)


def add_axis_options(parser: argparse.ArgumentParser, y_help: str) -> None:
    """Add ``--x`` and ``--y``: any numeric column of the table, as the Python API takes.

    Their names are checked against the table by :func:`regimes.validate_trials`, which
    names the closest column when one is missing: the parser cannot know the columns.
    """
    parser.add_argument(
        "--x",
        default="budget",
        metavar="COLUMN",
        help="the axis along which latency is followed: budget, total_tokens (prompt + "
        "budget) or any numeric column (default: budget)",
    )
    parser.add_argument(
        "--y",
        default="latency_s",
        metavar="COLUMN",
        help=f"{y_help}: latency_s, decode_s, prefill_s or any positive numeric column "
        "(default: latency_s)",
    )


def detection_options(args: argparse.Namespace) -> DetectionOptions:
    """Return the detection options of the command line, built once.

    The axes, and each flag of :data:`DETECT_OPTIONS` given; the rest keep the
    library's defaults.
    """
    given = {name: getattr(args, name, None) for name in DETECT_OPTIONS}
    axes = {name: getattr(args, name) for name in ("x", "y") if hasattr(args, name)}
    return DetectionOptions(**axes, **{k: v for k, v in given.items() if v is not None})


def column_list(text: str) -> list[str]:
    """Parse ``COL[,COL...]``."""
    columns = [c.strip() for c in text.split(",") if c.strip()]
    if not columns:
        raise argparse.ArgumentTypeError("expected one or more column names, comma separated")
    return columns


def probability(text: str) -> float:
    """Parse a number strictly between 0 and 1."""
    value = _number(text, float)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def at_least_one(text: str) -> float:
    """Parse a ratio of at least 1."""
    value = _number(text, float)
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (a ratio over the trend), got {text}")
    return value


def whole_number(text: str) -> int:
    """Parse a whole number (its bounds are checked by the analysis)."""
    return int(_number(text, int))


def seed(text: str) -> int:
    """Parse a random seed: a whole number >= 0."""
    value = int(_number(text, int))
    try:
        check_seed(value)
    except RegimesInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _number(text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        word = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {word}, got {text!r}") from None


EXIT_FINDING = 1
"""Exit status of ``analyze`` / ``compare`` when ``--fail-on`` names a finding they made."""


EXIT_STATUS_EPILOG = (
    f"exit status: 0 done, and nothing that --fail-on names was found; {EXIT_FINDING} "
    "--fail-on names a finding and one was found; 2 input that cannot be used (a missing "
    "or malformed run, a bad option, a column the table lacks), printed as one line on "
    "stderr"
)
"""The ``--help`` paragraph that lists the exit statuses of ``analyze`` and ``compare``."""


def add_fail_on(parser: argparse.ArgumentParser, choices: tuple[str, ...], example: str) -> None:
    """Add ``--fail-on``: exit with :data:`EXIT_FINDING` when one of ``choices`` is found."""

    def parse(text: str) -> frozenset[str]:
        names = column_list(text)
        unknown = [n for n in names if n not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown finding(s) {unknown}; choose from {', '.join(choices)}"
            )
        return frozenset(names)

    parser.add_argument(
        "--fail-on",
        type=parse,
        default=frozenset(),
        metavar="FINDING[,FINDING...]",
        help=f"exit with status {EXIT_FINDING} when any of these is found, for CI jobs "
        f"(choices: {', '.join(choices)}; e.g. --fail-on {example})",
    )
