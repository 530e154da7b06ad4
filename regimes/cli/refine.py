"""The ``regimes refine`` subcommand: each boundary of a run to the exact token.

It reads the run, detects its boundaries on the spec's grid and probes budgets inside
each bracket in fresh sessions of the run's own spec, appending the new trials to the
run (:func:`regimes.refine_boundaries`). Rerunning continues from what is on disk.
``--format json`` prints one object per boundary.

The library takes its prober as an argument and never imports :mod:`collectors`;
:func:`register` takes a factory of probers, and the collectors register the command
with theirs (:mod:`collectors.refine_command`), so ``regimes`` holds no measurement code
and ``tests/test_code_shape.py`` holds it to that.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from regimes.cli._options import (
    add_detection_options,
    detection_options,
    probability,
    whole_number,
)

__all__ = ["register", "run_refine"]

_JSON_FIRST = ("kind", "low", "high", "resolved", "generations", "tokens", "new_generations")

EXIT_INTERRUPTED = 130
"""128 + SIGINT, the shell convention (as ``regimes collect``)."""


def register(subparsers: Any, prober: Callable[[Path], Any] | None = None) -> None:
    """Add ``refine`` to the ``regimes`` command's subparsers.

    ``prober(run)`` builds the prober that measures a run's probes; without one, a run
    that still needs probing is refused and only what is on disk is read back.
    """
    parser = subparsers.add_parser(
        "refine",
        help="bracket each regime boundary to the exact token by probing",
        description="Detect the run's boundaries on its grid, then probe budgets inside "
        "each bracket (fresh sessions of the run's spec, appended to the run) until it "
        "is RESOLUTION tokens wide or the allowance runs out. Rerunning continues.",
    )
    parser.add_argument("run", type=Path, metavar="RUN", help="a run directory")
    parser.add_argument(
        "--resolution", type=whole_number, default=1, help="bracket width to reach (default 1)"
    )
    parser.add_argument(
        "--max-generations",
        type=whole_number,
        default=None,
        help="most generations (warm-ups included) to run",
    )
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="start no new round after this time"
    )
    parser.add_argument(
        "--error-rate",
        type=probability,
        default=0.01,
        help="each probe's error rates of the sequential test (default 0.01)",
    )
    parser.add_argument(
        "--max-trials", type=whole_number, default=24, help="cap on a probe's trials (default 24)"
    )
    parser.add_argument(
        "--min-sessions",
        type=whole_number,
        default=2,
        help="fewest fresh sessions a probe's decision rests on (default 2)",
    )
    parser.add_argument(
        "--format",
        choices=("table", "json"),
        default="table",
        help="stdout: the readable summary (table) or one JSON object per boundary",
    )
    # the grid detection's options; refine_boundaries groups by the case columns itself
    add_detection_options(parser, run=False, axes=False, leave_out=("by", "direction"))
    parser.set_defaults(handler=run_refine, prober=prober)


def run_refine(args: argparse.Namespace) -> int:
    """Handle ``regimes refine``."""
    from regimes.refine import refine_boundaries

    try:
        result = refine_boundaries(
            args.run,
            probe=args.prober(args.run) if args.prober and args.run.is_dir() else None,
            resolution=args.resolution,
            max_generations=args.max_generations,
            max_seconds=args.max_seconds,
            error_rate=args.error_rate,
            max_trials=args.max_trials,
            min_sessions=args.min_sessions,
            **detection_options(args).for_(refine_boundaries),
        )
    except KeyboardInterrupt:
        print(
            "regimes refine: interrupted; every finished trial is in the run: rerun the "
            "same command to continue",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    if args.format == "json":
        records = []
        for row in result.boundaries.iter_rows(named=True):
            first = {key: row[key] for key in _JSON_FIRST}
            records.append(first | {k: v for k, v in row.items() if k not in first})
        sys.stdout.write(json.dumps(records, default=str) + "\n")
    else:
        print(result.summary())
    return 0
