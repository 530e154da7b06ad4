"""Running a sweep: every session of a spec, written trial by trial into a run directory.

:func:`run_sweep` runs (or resumes) a spec into a run directory. The pieces live in
private modules, one concern each: the seeded, interleaved order of generations
(:mod:`collectors._schedule`), what a run directory already holds
(:mod:`collectors._state`), the in-process session runner (:mod:`collectors._session`),
sessions in fresh processes (:mod:`collectors._process`), the run lock
(:mod:`collectors._lock`), signal handling (:mod:`collectors._signals`) and the
progress bar (:mod:`collectors._progress`).

Resume. A rerun with the same spec and directory resumes: the measured schedule is
rebuilt and filtered down to the (case, session, trial) keys not yet on disk, and each
case left is warmed again before its first remaining trial (the process state it was
warmed in is gone), its warm-ups numbered after those already stored so that no key
repeats; ``order`` continues after the largest stored.

Isolation. ``isolation = "process"`` runs every session in a fresh Python process
(:mod:`collectors.worker`); with ``"none"`` sessions run one after another in the
calling process.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data.io import RunWriter, read_run

from ._lock import RunBusyError, RunLock
from ._process import run_process_session
from ._progress import Progress
from ._schedule import ScheduledTrial, plan_session, schedule
from ._session import DEADLINE, EXIT_CODES, SessionOutcome, run_session
from ._signals import Interrupts
from ._state import RunState, check_run_dir, remove_stale_temp_files
from .spec import SweepSpec

__all__ = [
    "EXIT_CODES",
    "RunBusyError",
    "RunState",
    "ScheduledTrial",
    "SessionOutcome",
    "SweepResult",
    "plan_session",
    "run_session",
    "run_sweep",
    "schedule",
]


@dataclass
class SweepResult:
    """The outcome of :func:`run_sweep`; ``summary()`` says it in a few lines.

    Attributes
    ----------
    run_dir : pathlib.Path
        The run directory.
    status : str
        ``"complete"``, ``"incomplete"``, ``"interrupted"`` or ``"failed"``.
    measured, warmups, errors : int
        Measured trials, warm-ups and failed cases of this call.
    measured_on_disk, measured_expected, errors_on_disk : int
        Measured trials the run holds and asks for; failed cases it records.
    elapsed_s : float
        Wall time of this call.
    messages : list of str
        What the summary adds (how to resume, an interrupted compaction).
    """

    run_dir: Path
    status: str
    measured: int
    warmups: int
    errors: int
    measured_on_disk: int
    measured_expected: int
    errors_on_disk: int
    elapsed_s: float
    messages: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """The process exit status for :attr:`status` (see ``EXIT_CODES``)."""
        return EXIT_CODES[self.status]

    def summary(self) -> str:
        """Say in a few lines what ran, what the run directory holds, how to load it."""
        lines = [
            f"sweep {self.status}: {self.measured} measured trial(s) and {self.warmups} warm-up(s) "
            f"in {self.elapsed_s:.1f} s, {self.errors} new error(s)",
            f"run directory {str(self.run_dir)!r}: {self.measured_on_disk} of "
            f"{self.measured_expected} measured trials on disk, "
            f"{self.errors_on_disk} failed case(s) recorded",
            *self.messages,
            f"load it with: regimes.load({str(self.run_dir)!r})",
        ]
        return "\n".join(lines)


def _measured_left(spec: SweepSpec, writer: RunWriter) -> int:
    state = RunState.read(writer)
    return sum(
        1 for k in range(spec.sessions) for t in plan_session(spec, k, state) if not t.warmup
    )


def _run_plans(
    spec: SweepSpec,
    writer: RunWriter,
    plans: dict[int, list[ScheduledTrial]],
    deadline: float | None,
    lock: RunLock,
    interrupts: Interrupts,
    sink: Progress,
    messages: list[str],
) -> str:
    """Run each session's plan in turn; return the sweep's status."""

    def should_stop() -> str | None:
        return DEADLINE if deadline is not None and time.time() >= deadline else None

    status = "complete"
    try:
        for session, plan in plans.items():
            if not plan:
                continue
            if should_stop():
                status = "incomplete"
            elif spec.isolation == "none":
                outcome = run_session(
                    spec, writer, session, emit=sink, should_stop=should_stop, interrupts=interrupts
                )
                status = "incomplete" if outcome.stopped else "complete"
            else:
                status = run_process_session(
                    spec, writer, session, deadline, lock.fd, sink, messages
                )
            if status != "complete":
                break
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        sink.close()
    return status


def _finish(writer: RunWriter, status: str, left: int, compact: bool, messages: list[str]) -> str:
    """Compact a complete run; say how to resume an unfinished one."""
    if status == "complete" and left:  # pragma: no cover - a plan that did not drain is a bug
        status = "incomplete"
    if status == "complete" and compact:
        try:
            writer.compact()
        except KeyboardInterrupt:
            messages.append("compaction was interrupted; the data are complete (rerun to compact)")
    if status in ("incomplete", "interrupted"):
        messages.append(
            f"{left} measured trial(s) left: rerun the same command to resume where it stopped"
        )
    return status


def _run_meta(spec: SweepSpec, command: list[str] | None) -> dict[str, Any]:
    from .environment import environment_metadata

    return {
        "spec": spec.to_dict(),
        "command": command if command is not None else list(sys.argv),
        "environment": environment_metadata(spec.backends),
    }


def run_sweep(
    spec: SweepSpec,
    run_dir: str | os.PathLike[str],
    *,
    max_seconds: float | None = None,
    progress: bool = True,
    compact: bool = True,
    command: list[str] | None = None,
    lock_wait_s: float = 10.0,
) -> SweepResult:
    """Run (or resume) ``spec`` into ``run_dir`` and say how far it got.

    Every finished generation is written at once as an atomic parquet part, so a crash
    loses at most the generation in flight, and rerunning the same call resumes with
    no duplicate and no missing trial. A case that raises is recorded in the run's
    ``errors`` table and the sweep goes on.

    Parameters
    ----------
    spec : SweepSpec
        What to measure.
    run_dir : str or os.PathLike
        The run directory: created if new, resumed if it holds a run of ``spec``.
    max_seconds : float, optional
        Stop cleanly once this much wall time has passed (after the generation in
        flight, and after the first measured trial of a case whose warm-ups began).
    progress : bool, default True
        Show a progress bar on stderr.
    compact : bool, default True
        Merge each table's parts into one when the sweep completes.
    command : list of str, optional
        The command line recorded in ``meta.json`` (default ``sys.argv``).
    lock_wait_s : float, default 10.0
        How long to wait for another process still writing to ``run_dir``.

    Returns
    -------
    SweepResult
        Status ``complete`` (every measured trial is on disk or its case failed),
        ``incomplete`` (``max_seconds`` passed), ``interrupted`` (SIGINT/SIGTERM) or
        ``failed`` (a session process died outside any case); rerunning resumes in
        every case.

    Raises
    ------
    SpecError
        ``run_dir`` holds a run of another spec, or something that is not a run.
    RunBusyError
        Another process is writing to ``run_dir``.

    See Also
    --------
    SweepSpec.from_toml : read a spec file.
    regimes.load : read the trial table back.

    Examples
    --------
    >>> import tempfile, regimes
    >>> spec = SweepSpec.from_dict({"models": ["tiny-gpt2"], "backends": ["cpu"],
    ...                             "budgets": [2, 4], "trials": 2, "warmup": 0})
    >>> result = run_sweep(spec, tempfile.mkdtemp() + "/run", progress=False)
    >>> result.status, result.measured_on_disk
    ('complete', 4)
    """
    started = time.monotonic()
    deadline = time.time() + max_seconds if max_seconds is not None else None
    target = Path(run_dir)
    meta = _run_meta(spec, command)
    check_run_dir(spec, target)
    target.mkdir(parents=True, exist_ok=True)
    messages: list[str] = []
    with RunLock(target, lock_wait_s) as lock, Interrupts() as interrupts:
        remove_stale_temp_files(target)
        writer = RunWriter(target, meta)
        state = RunState.read(writer)
        plans = {k: plan_session(spec, k, state) for k in range(spec.sessions)}
        sink = Progress(sum(map(len, plans.values())), progress)
        status = _run_plans(spec, writer, plans, deadline, lock, interrupts, sink, messages)
        status = _finish(writer, status, _measured_left(spec, writer), compact, messages)
    run = read_run(target)
    return SweepResult(
        run_dir=target,
        status=status,
        measured=sink.counts["measured"],
        warmups=sink.counts["warmups"],
        errors=sink.counts["errors"],
        measured_on_disk=run.trials.filter(~pl.col("warmup")).height,
        measured_expected=spec.total_trials(),
        errors_on_disk=run.errors.height,
        elapsed_s=time.monotonic() - started,
        messages=messages,
    )
