"""The ``regimes collect`` command: run a sweep spec into a run directory.

Usage::

    regimes collect SPEC.toml -o RUN_DIR [--max-seconds S] [--no-compact] [--quiet]
                    [--cluster tcp://HOST:PORT] [--yes]

With ``--cluster`` the sweep runs on the workers of a Dask scheduler
(:mod:`collectors.fleet`) and RUN_DIR is written here as their trials come back.

Rerunning the same command resumes an interrupted or sliced sweep. Exit status: 0
complete, 2 a spec or directory problem or the ``collect`` extra not installed (one line
on stderr, before any work), 3 incomplete (``--max-seconds`` passed; rerun to
continue), 4 complete but some cases failed (their count on stderr; the run's ``errors``
table holds them), 130 interrupted, 1 a session process failed outside any case.

Before it starts, the command prints an estimate of how long the sweep will take
(:mod:`collectors._estimate`); a call that may run longer than a few hours (without
``--max-seconds`` to bound it) asks for a confirmation on a terminal, and is refused
with one line, exit 2, when standard input is not one, unless ``--yes`` is given.

Before measuring, the command looks at how quiet the machine is (load, other busy
processes, the CPU frequency governor, other processes on the GPU, macOS power and
thermal state: :mod:`collectors.hygiene`), warns about what would disturb the timings,
and records it in ``meta.json``.

This module is imported by ``regimes --help`` and every other subcommand, so it must
not import torch: everything measurement-related is imported inside the handler.
"""

from __future__ import annotations

import argparse
import errno
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["EXIT_CASES_FAILED", "register", "run_collect"]


def register(subparsers: Any) -> None:
    """Add the ``collect`` subcommand to the ``regimes`` command's subparsers."""
    collect = subparsers.add_parser(
        "collect",
        help="measure latency over a sweep spec (TOML) into a run directory",
        description="Run every case of a sweep spec (models x backends x dtypes x cache x "
        "prompt lengths x budgets) in a shuffled, interleaved order, writing each trial to "
        "RUN_DIR as soon as it finishes. Rerun the same command to resume.",
    )
    collect.add_argument("spec", type=Path, help="the sweep spec, a TOML file")
    collect.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="run directory to create or resume (default: runs/<spec name>)",
    )
    collect.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        metavar="S",
        help="stop cleanly after the trial in flight (and after the first measured "
        "trial of a case being warmed up) once the sweep has run S seconds, never before "
        "its first measured trial; exit status 3, rerun the same command to continue",
    )
    collect.add_argument(
        "--no-compact",
        action="store_true",
        help="keep one parquet part per trial instead of merging them at the end",
    )
    collect.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    collect.add_argument(
        "--cluster",
        default=None,
        metavar="tcp://HOST:PORT",
        help="run on the workers of this Dask scheduler (a fleet of machines, each "
        "started with `dask worker tcp://HOST:PORT`); the spec is checked against the "
        "backends the fleet offers, not this machine's",
    )
    collect.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="start without asking even when the estimate is over "
        f"{_CONFIRM_HOURS:g} hours (without it such a sweep asks on a terminal, and is "
        "refused, exit 2, when standard input is not one)",
    )
    collect.set_defaults(handler=run_collect)


_CONFIRM_HOURS = 4.0
"""Hours over which a call asks for a confirmation (``collectors._estimate.CONFIRM_ABOVE_S``;
repeated here because this module must not import the collectors' dependencies)."""


EXIT_CASES_FAILED = 4
"""Exit status of a sweep that ran to the end with cases recorded as failed."""

_COLLECT_NEEDS = ("torch", "transformers", "tqdm", "psutil")
"""What measuring imports beyond the analysis package: the ``collect`` extra."""


def _missing_extra(exc: ImportError) -> str | None:
    """Name the ``collect`` dependency whose absence ``exc`` reports, if it is one."""
    name = (exc.name or "").split(".")[0]
    return name if name in _COLLECT_NEEDS else None


def run_collect(args: argparse.Namespace) -> int:
    """Run ``regimes collect``: validate, run, print the summary, return the exit status.

    Ctrl-C at any moment (importing torch takes seconds) ends with one line and the
    status of an interrupted sweep; a write the system refuses (a full disk, a
    file-size limit) ends with one line naming the file and how to resume.
    """
    try:
        return _collect(args)
    except KeyboardInterrupt:
        resume = shlex.join(_resume_command(args, _run_dir(args)))
        print(f"collect: interrupted; rerun to resume: {resume}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise
        where = f" {str(exc.filename)!r}" if exc.filename else ""
        resume = shlex.join(_resume_command(args, _run_dir(args)))
        print(
            f"regimes collect: error: {exc.strerror}:{where}; every trial written before it "
            f"is kept: make room (or raise the file-size limit) and resume with: {resume}",
            file=sys.stderr,
        )
        return 2


EXIT_INTERRUPTED = 130
"""Exit status of an interrupted sweep (as ``collectors.sweep.EXIT_CODES`` says)."""


def _run_dir(args: argparse.Namespace) -> Path:
    return args.output if args.output is not None else Path("runs") / args.spec.stem


def _collect(args: argparse.Namespace) -> int:
    from regimes.data.schema import RegimesInputError

    if args.max_seconds is not None and not args.max_seconds > 0:
        raise RegimesInputError(f"--max-seconds must be positive, got {args.max_seconds}")
    try:
        from ._state import check_run_dir
        from .hygiene import machine_state
        from .spec import SweepSpec
        from .sweep import EXIT_CODES
    except ImportError as exc:
        missing = _missing_extra(exc)
        if missing is None:
            raise
        print(
            f"regimes collect: error: measuring needs {missing}, which is not installed "
            "here; install the collect extra: pip install 'regimes[collect]'",
            file=sys.stderr,
        )
        return 2
    spec = SweepSpec.from_toml(args.spec, check_available=args.cluster is None)
    if spec.endpoint is not None and not _has_serve_extra():
        return 2
    run_dir = _run_dir(args)
    check_run_dir(spec, run_dir)  # a directory it cannot use is refused before any output
    resume = _resume_command(args, run_dir)
    if not _announce(spec, run_dir, args):
        return 2
    try:
        hygiene = machine_state() if args.cluster is None else None
        for warning in (hygiene or {}).get("warnings", []):
            print(f"collect: warning: the machine is not quiet: {warning}", file=sys.stderr)
        result = _sweep(spec, run_dir, args, hygiene)
    except KeyboardInterrupt:  # outside the sweep loop, e.g. while reading the environment
        print(f"collect: interrupted; rerun to resume: {shlex.join(resume)}", file=sys.stderr)
        return EXIT_CODES["interrupted"]
    print(result.summary())
    if result.status != "complete":
        print(f"resume with: {shlex.join(resume)}")
    return _exit_status(result)


def _has_serve_extra() -> bool:
    """Whether the ``serve`` extra (httpx, httpx-sse) is here; say how to get it if not."""
    try:
        import httpx  # noqa: F401
        import httpx_sse  # noqa: F401
    except ImportError as exc:
        print(
            f"regimes collect: error: measuring an endpoint needs {exc.name}, which is not "
            "installed here; install the serve extra: pip install 'regimes[collect,serve]'",
            file=sys.stderr,
        )
        return False
    return True


def _announce(spec: Any, run_dir: Path, args: argparse.Namespace) -> bool:
    """Say what the sweep holds and how long it should take; ask before a long one.

    Returns whether to start. Asked on a terminal only: a script or a scheduler job
    (standard input not a terminal) is refused with one line unless ``--yes``.
    """
    from ._estimate import CONFIRM_ABOVE_S, estimate_sweep, format_duration

    print(
        f"collect: {len(spec.cases())} case(s) x {spec.trials} trial(s) x {spec.sessions} "
        f"session(s) (+{spec.warmups_per_session()} warm-up(s) per session, "
        f"{spec.warmup_policy}) -> {str(run_dir)!r}",
        file=sys.stderr,
    )
    estimate = estimate_sweep(spec, run_dir)
    fleet = " of machine time, shared among the fleet's hosts" if args.cluster else ""
    print(f"collect: estimate: {estimate.describe()}{fleet}", file=sys.stderr)
    # what this call may run: --max-seconds bounds a slice of a long sweep
    bound = min(estimate.seconds, args.max_seconds or float("inf"))
    if args.yes or bound <= CONFIRM_ABOVE_S:
        return True
    long = f"this sweep may run about {format_duration(bound)}"
    if not sys.stdin.isatty():
        print(
            f"regimes collect: error: {long}, over {format_duration(CONFIRM_ABOVE_S)}; pass "
            "--yes to start it, or --max-seconds S to run it in slices",
            file=sys.stderr,
        )
        return False
    print(f"collect: {long}; start it? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return True
    print("collect: not started", file=sys.stderr)
    return False


def _resume_command(args: argparse.Namespace, run_dir: Path) -> list[str]:
    resume = ["regimes", "collect", str(args.spec), "-o", str(run_dir)]
    if args.max_seconds is not None:
        resume += ["--max-seconds", f"{args.max_seconds:g}"]
    if args.cluster is not None:
        resume += ["--cluster", args.cluster]
    if getattr(args, "yes", False):
        resume.append("--yes")
    return resume


def _sweep(spec: Any, run_dir: Path, args: argparse.Namespace, hygiene: Any) -> Any:
    """Run the sweep here, or on the fleet at ``--cluster``."""
    options: dict[str, Any] = {
        "max_seconds": args.max_seconds,
        "progress": not args.quiet,
        "compact": not args.no_compact,
        "command": list(sys.argv),
    }
    if args.cluster is not None:
        from .fleet import SchedulerLost, run_fleet_sweep

        try:
            return run_fleet_sweep(spec, run_dir, args.cluster, **options)
        except SchedulerLost as exc:
            resume = shlex.join(_resume_command(args, run_dir))
            raise SchedulerLost(f"{exc}: {resume}") from None
    from .sweep import run_sweep

    return run_sweep(spec, run_dir, hygiene=hygiene, **options)


def _exit_status(result: Any) -> int:
    """Return the sweep's exit status, or :data:`EXIT_CASES_FAILED` after failed cases.

    The run's ``errors`` table is the record: one row per failed case and session.
    """
    if result.exit_code != 0 or not result.errors_on_disk:
        return int(result.exit_code)
    from regimes.data.io import read_run

    errors = read_run(result.run_dir).errors
    print(
        f"collect: {errors.height} failed case(s) in {errors['session'].n_unique()} "
        f"session(s), recorded in the run's errors table "
        f"(regimes.read_run({str(result.run_dir)!r}).errors); exit status {EXIT_CASES_FAILED}",
        file=sys.stderr,
    )
    return EXIT_CASES_FAILED
