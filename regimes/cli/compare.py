"""The ``regimes compare`` subcommand: two runs, which regimes changed, and the shift.

``regimes compare BASE NEW`` prints the summary of :func:`regimes.compare_runs` (or its
result as JSON, or the ``changes`` table as CSV, for scripts) and with ``-o`` writes
every table of the result to a folder; ``--fail-on appeared,changed`` makes a regime of
those statuses exit with status 1 (for CI). Problems the user can fix raise
:class:`RegimesInputError`, which :mod:`regimes.cli` prints as one line with exit
status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import polars as pl

from regimes._compare.statuses import STATUSES
from regimes.cli._options import (
    EXIT_FINDING,
    EXIT_STATUS_EPILOG,
    add_axis_options,
    add_detection_options,
    add_fail_on,
    detection_options,
)
from regimes.cli.analyze import flat
from regimes.errors import RegimesInputError

__all__ = ["register", "run_compare"]


def register(subparsers: Any) -> None:
    """Add ``compare`` to the ``regimes`` command's subparsers."""
    parser = subparsers.add_parser(
        "compare",
        help="which regimes appeared, vanished or changed between two runs",
        description="Compare two runs of a sweep (a torch or OS upgrade, another machine, "
        "another day): each regime of either run with its status, the new run's latency "
        "over the base's as one shift and per budget, and the environment difference.",
        epilog=EXIT_STATUS_EPILOG,
    )
    parser.add_argument(
        "base", type=Path, metavar="BASE", help="the base run: a run directory or trial file"
    )
    parser.add_argument("new", type=Path, metavar="NEW", help="the new run, likewise")
    parser.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="stdout: the readable summary (table), the whole result as JSON, or the "
        "changes table as CSV (default: table)",
    )
    parser.add_argument(
        "-o", "--outdir", type=Path, default=None, help="write every result table here (CSV)"
    )
    add_axis_options(parser, "the time compared")
    add_detection_options(
        parser,
        run=False,
        axes=False,
        # compare_runs tests slowdowns only: its statuses read a ratio above min_ratio
        leave_out=("direction",),
        by_help="match curves on these columns instead of the case columns both runs have",
    )
    add_fail_on(parser, STATUSES, "appeared,changed")
    parser.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    """Run ``regimes compare``; return the exit status."""
    from regimes.compare import compare_runs

    options = detection_options(args)
    result = compare_runs(args.base, args.new, **options.for_(compare_runs))
    if args.format == "json":
        sys.stdout.write(result.to_json() + "\n")
    elif args.format == "csv":
        sys.stdout.write(flat(result.changes).write_csv())
    else:
        print(result.summary())
    if args.outdir is not None:
        # keep stdout machine-readable in json/csv mode
        stream = sys.stdout if args.format == "table" else sys.stderr
        for path in _write(result, args.outdir):
            print(f"wrote {path}", file=stream)
    if args.fail_on and result.changes.filter(pl.col("status").is_in(list(args.fail_on))).height:
        return EXIT_FINDING
    return 0


def _write(result: Any, outdir: Path) -> list[Path]:
    written = []
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        for name, frame in {**result.tables, "untested": result.untested}.items():
            path = outdir / f"{name}.csv"
            flat(frame).write_csv(path)
            written.append(path)
        summary = outdir / "summary.txt"
        summary.write_text(result.summary() + "\n")
        written.append(summary)
    except OSError as exc:
        raise RegimesInputError(f"cannot write tables to {str(outdir)!r}: {exc.strerror}") from None
    return written
