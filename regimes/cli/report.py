"""``regimes report``: one offline HTML report of a run, and optionally PNG charts.

The run is analysed once (:func:`regimes.analyze`: each run detected once, the base run
too with ``--baseline``), then drawn (:mod:`regimes.viz.html`): the run's environment,
the findings with their CIs and every chart the data supports; it opens without a
network.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from regimes.cli._options import (
    add_detection_options,
    add_skip_damaged,
    detection_options,
    on_damaged,
)
from regimes.data.schema import RegimesInputError

__all__ = ["register", "run_report"]


def register(subparsers: Any) -> None:
    """Add ``report`` to the ``regimes`` command's subparsers."""
    report = subparsers.add_parser(
        "report",
        help="write an offline HTML report with charts",
        description="Analyse a run and write one self-contained HTML file (no network "
        "needed to view it) with the environment, the findings and every chart the data "
        "supports.",
    )
    add_detection_options(report)
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
        "--baseline",
        type=Path,
        default=None,
        metavar="BASE_RUN",
        help="also compare the run against this base run (regimes compare BASE_RUN RUN): "
        "what appeared, vanished or changed opens the report, with both runs drawn",
    )
    report.add_argument(
        "--max-panels",
        type=int,
        default=12,
        help="most groups drawn in the latency chart (default: 12)",
    )
    add_skip_damaged(report)
    report.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace) -> int:
    """Run ``regimes report``; return the exit status."""
    from regimes.analysis import analyze
    from regimes.data.io import read_run
    from regimes.viz.html import build_report

    if args.output.suffix.lower() not in (".html", ".htm"):
        raise RegimesInputError(
            f"the report is HTML: give -o a .html path, not {str(args.output)!r}"
        )
    if args.max_panels < 1:
        raise RegimesInputError(f"--max-panels must be at least 1, got {args.max_panels}")
    options = detection_options(args)
    run = read_run(args.run, on_damaged=on_damaged(args))
    baseline = read_run(args.baseline) if args.baseline is not None else None
    analysis = analyze(run, options, baseline)
    report = build_report(analysis, max_panels=args.max_panels, title=args.title)
    path = report.write(args.output)
    print(f"wrote {path}")
    if args.png_dir is not None:
        for image in report.write_images(args.png_dir, "png"):
            print(f"wrote {image}")
    for line in report.headlines():
        print(f"  {line}")
    return 0
