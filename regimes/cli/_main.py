"""The ``regimes`` command line: ``collect``, ``analyze``, ``report``, ``refine``.

Each subcommand lives with the code it drives: ``collect`` in :mod:`collectors.cli`
(imported lazily, so the analysis commands work without torch), ``analyze`` and
``report`` in :mod:`regimes.commands`. Errors the user can fix print one line and exit
with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from regimes.data.schema import RegimesInputError

EXIT_USAGE = 2


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="regimes",
        description="Measure decode latency across decoding budgets and find where it "
        "leaves its smooth trend.",
    )
    from regimes import __version__

    parser.add_argument("--version", action="version", version=f"regimes {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from collectors.cli import register as register_collect

    register_collect(sub)
    try:
        from regimes.cli._analysis import register as register_analysis
    except ImportError:  # analysis commands not present in this build
        pass
    else:
        register_analysis(sub)
    from regimes.cli._refine import register as register_refine

    register_refine(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except RegimesInputError as exc:
        print(f"regimes {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
