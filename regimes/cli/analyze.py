"""``regimes analyze``: detect where latency leaves its trend, and print or save it.

Prints the headlines and the summary (or, for scripts, the result's ``to_json()`` object
or the anomalies as CSV); with ``-o`` also writes the anomalies, change points and curve
tables; where the run holds profiles (its ``ops`` table), which operators carry each
anomaly (:func:`regimes.attribute_operators`). ``--fail-on anomaly`` makes a finding
exit with status 1 (for CI). Problems the user can fix raise
:class:`~regimes.errors.RegimesInputError`, which
:func:`regimes.cli.main` prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl

from regimes.cli._options import (
    EXIT_FINDING,
    EXIT_STATUS_EPILOG,
    add_detection_options,
    add_fail_on,
    add_skip_damaged,
    detection_options,
    on_damaged,
)
from regimes.data.schema import RegimesInputError
from regimes.options import DetectionOptions

__all__ = ["register", "run_analyze"]


def register(subparsers: Any) -> None:
    """Add ``analyze`` to the ``regimes`` command's subparsers."""
    analyze = subparsers.add_parser(
        "analyze",
        help="find where latency leaves its smooth trend",
        description="Detect anomalous budget intervals and change points in a run and "
        "print the summary; with -o, also write the result tables.",
        epilog=EXIT_STATUS_EPILOG,
    )
    add_detection_options(analyze)
    analyze.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="stdout: the readable summary (table), the whole result as JSON (its "
        "to_json(): anomalies, change_points, curve, groups, status, params) or the "
        "anomalies as CSV (default: table)",
    )
    add_fail_on(analyze, ("anomaly",), "anomaly")
    add_skip_damaged(analyze)
    analyze.add_argument(
        "-o",
        "--outdir",
        type=Path,
        default=None,
        help="write anomalies, change_points and curve tables here",
    )
    analyze.add_argument(
        "--save-as",
        choices=("csv", "parquet"),
        default="csv",
        help="file format of the tables written to OUTDIR (default: csv)",
    )
    analyze.set_defaults(handler=run_analyze)


def run_analyze(args: argparse.Namespace) -> int:
    """Run ``regimes analyze``; return the exit status."""
    from regimes._findings import headlines, result_summary
    from regimes.data.io import read_run
    from regimes.detect import detect_regimes

    options = detection_options(args)
    run = read_run(args.run, on_damaged=on_damaged(args))
    result = detect_regimes(run.trials, **options.for_(detect_regimes))
    if args.format == "json":
        sys.stdout.write(result.to_json() + "\n")
    elif args.format == "csv":
        sys.stdout.write(flat(result.anomalies).write_csv())
    else:
        print("\n".join(headlines(result, meta=run.meta)))
        print()
        print(result_summary(result))
        if run.ops.height and result.anomalies.height:
            print()
            print(_operators(run.ops, result, options))
    if args.outdir is not None:
        written = _write_tables(result, args.outdir, args.save_as)
        # Keep stdout machine-readable in json/csv mode.
        stream = sys.stdout if args.format == "table" else sys.stderr
        for path in written:
            print(f"wrote {path}", file=stream)
    if "anomaly" in args.fail_on and result.anomalies.height:
        return EXIT_FINDING
    return 0


def _operators(ops: pl.DataFrame, result: Any, options: DetectionOptions) -> str:
    """Say which operators carry each anomaly, where the run holds profiles.

    With the report's options (alpha, level, seed); profiles that cannot answer (no
    profiled budget around an anomaly, profiles of another run) say why in one line.
    """
    from regimes.explain.operators import attribute_operators

    try:
        found = attribute_operators(
            ops, result, alpha=options.alpha, level=options.level, seed=options.seed
        )
        return str(found.summary())
    except RegimesInputError as exc:
        return f"Operators: not attributed: {exc}"


def flat(frame: pl.DataFrame) -> pl.DataFrame:
    """Return ``frame`` with nested columns as JSON text and NaN as null (CSV and JSON)."""
    nested = [c for c, t in frame.schema.items() if t.is_nested() or t == pl.Object]
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    return frame.with_columns(
        [
            pl.col(c).map_elements(lambda v: json.dumps(v, default=str), return_dtype=pl.String)
            for c in nested
        ]
        + [pl.col(c).fill_nan(None) for c in floats]
    )


def _write_tables(result: Any, outdir: Path, fmt: str) -> list[Path]:
    tables = {
        "anomalies": result.anomalies,
        "change_points": result.change_points,
        "curve": result.curve,
    }
    written = []
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        for name, frame in tables.items():
            path = outdir / f"{name}.{fmt}"
            if fmt == "parquet":
                frame.write_parquet(path)
            else:
                flat(frame).write_csv(path)
            written.append(path)
    except OSError as exc:
        raise RegimesInputError(f"cannot write tables to {str(outdir)!r}: {exc.strerror}") from None
    return written
