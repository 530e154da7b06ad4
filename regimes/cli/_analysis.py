"""The ``regimes analyze`` and ``regimes report`` subcommands.

``analyze`` runs the detection on a run and prints its summary (or the anomalies as
JSON or CSV, for scripts), optionally writing the result tables to a folder.
``report`` writes one offline HTML report, and optionally a PNG of every chart.
Problems the user can fix raise :class:`RegimesInputError`, which :mod:`regimes.cli`
prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data.schema import RegimesInputError

__all__ = ["register", "run_analyze", "run_report"]

_X_CHOICES = ("budget", "total_tokens")
_Y_CHOICES = ("latency_s", "decode_s", "prefill_s")


def register(subparsers: Any) -> None:
    """Add ``analyze`` and ``report`` to the ``regimes`` command's subparsers."""
    analyze = subparsers.add_parser(
        "analyze",
        help="find where latency leaves its smooth trend",
        description="Detect anomalous budget intervals and change points in a run and "
        "print the summary; with -o, also write the result tables.",
    )
    _add_detection_options(analyze)
    analyze.add_argument(
        "--format",
        choices=("table", "json", "csv"),
        default="table",
        help="stdout: the readable summary (table) or the anomalies as "
        "JSON records or CSV (default: table)",
    )
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

    report = subparsers.add_parser(
        "report",
        help="write an offline HTML report with charts",
        description="Analyse a run and write one self-contained HTML file (no network "
        "needed to view it) with the environment, the findings and every chart the data "
        "supports.",
    )
    _add_detection_options(report)
    report.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("report.html"),
        help="the HTML file to write (default: report.html)",
    )
    report.add_argument(
        "--png-dir",
        type=Path,
        default=None,
        help="also write every chart as a PNG into this folder",
    )
    report.add_argument("--title", default=None, help="the report's title")
    report.add_argument(
        "--max-panels",
        type=int,
        default=12,
        help="most groups drawn in the latency chart (default: 12)",
    )
    report.set_defaults(handler=run_report)


def _add_detection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run", type=Path, metavar="RUN", help="a run directory, or a .parquet / .csv trial table"
    )
    parser.add_argument(
        "--x",
        choices=_X_CHOICES,
        default="budget",
        help="the axis along which latency is followed (default: budget)",
    )
    parser.add_argument(
        "--y",
        choices=_Y_CHOICES,
        default="latency_s",
        help="the time analysed (default: latency_s)",
    )
    parser.add_argument(
        "--by",
        type=_column_list,
        default=None,
        metavar="COL[,COL...]",
        help="group by these columns instead of the case columns present",
    )
    parser.add_argument(
        "--alpha",
        type=_probability,
        default=None,
        help="false discovery rate of reported anomalies",
    )
    parser.add_argument(
        "--min-ratio",
        type=_at_least_one,
        default=None,
        help="smallest level ratio over the trend that counts as an anomaly",
    )
    parser.add_argument(
        "--direction",
        choices=("up", "down", "both"),
        default=None,
        help="report slowdowns (up, the default), speedups (down) or both",
    )
    parser.add_argument("--n-boot", type=int, default=None, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=None, help="random seed")


def _column_list(text: str) -> list[str]:
    columns = [c.strip() for c in text.split(",") if c.strip()]
    if not columns:
        raise argparse.ArgumentTypeError("expected one or more column names, comma separated")
    return columns


def _probability(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


def _at_least_one(text: str) -> float:
    value = float(text)
    if not value >= 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (a ratio over the trend), got {text}")
    return value


def _detect_options(args: argparse.Namespace) -> dict[str, Any]:
    """The detection options given on the command line; the others keep their defaults."""
    names = ("alpha", "min_ratio", "direction", "n_boot", "seed")
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def run_analyze(args: argparse.Namespace) -> int:
    """Handler of ``regimes analyze``."""
    from regimes.data.io import read_run
    from regimes.detect import detect_regimes
    from regimes.viz.html import headlines, result_summary

    run = read_run(args.run)
    result = detect_regimes(run.trials, x=args.x, y=args.y, by=args.by, **_detect_options(args))
    anomalies = _flat(result.anomalies)
    if args.format == "json":
        sys.stdout.write(anomalies.write_json() + "\n")
    elif args.format == "csv":
        sys.stdout.write(anomalies.write_csv())
    else:
        print("\n".join(headlines(result)))
        print()
        print(result_summary(result))
    if args.outdir is not None:
        written = _write_tables(result, args.outdir, args.save_as)
        # Keep stdout machine-readable in json/csv mode.
        stream = sys.stdout if args.format == "table" else sys.stderr
        for path in written:
            print(f"wrote {path}", file=stream)
    return 0


def run_report(args: argparse.Namespace) -> int:
    """Handler of ``regimes report``."""
    from regimes.data.io import read_run
    from regimes.viz.html import build_report

    if args.output.suffix.lower() not in (".html", ".htm"):
        raise RegimesInputError(
            f"the report is HTML: give -o a .html path, not {str(args.output)!r}"
        )
    if args.max_panels < 1:
        raise RegimesInputError(f"--max-panels must be at least 1, got {args.max_panels}")
    run = read_run(args.run)
    report = build_report(
        run,
        x=args.x,
        y=args.y,
        by=args.by,
        max_panels=args.max_panels,
        title=args.title,
        **_detect_options(args),
    )
    path = report.write(args.output)
    print(f"wrote {path}")
    if args.png_dir is not None:
        for image in report.write_images(args.png_dir, "png"):
            print(f"wrote {image}")
    for line in report.headlines():
        print(f"  {line}")
    return 0


def _flat(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with nested columns as JSON text and NaN as null, for CSV and JSON."""
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
                _flat(frame).write_csv(path)
            written.append(path)
    except OSError as exc:
        raise RegimesInputError(f"cannot write tables to {str(outdir)!r}: {exc.strerror}") from None
    return written
