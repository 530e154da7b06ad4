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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data.io import RunWriter, read_run

from ._batches import claim_batch, measured_left, read_meta, session_specs, stored_spec
from ._events import EventSink
from ._lock import RunBusyError, RunLock
from ._process import run_process_session
from ._profile_auto import needs_choice, record_choice, resolved
from ._progress import Progress
from ._schedule import ScheduledTrial, generations_left, plan_session, schedule
from ._session import DEADLINE, EXIT_CODES, SessionOutcome, run_session
from ._signals import Interrupts
from ._state import RunState, check_run_dir, remove_stale_temp_files
from .spec import SpecError, SweepSpec

__all__ = [
    "EXIT_CODES",
    "RunBusyError",
    "RunState",
    "ScheduledTrial",
    "SessionOutcome",
    "SweepResult",
    "collect_budgets",
    "plan_session",
    "run_stored_session",
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
    sessions : tuple of int
        The session numbers this call ran or resumed.
    batch : str or None
        The batch those sessions belong to (:func:`collect_budgets`), ``None`` for the
        run's own sessions.
    profiled : int
        Profiled generations of this call (spec key ``profile``; ``ops`` table).
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
    sessions: tuple[int, ...] = ()
    batch: str | None = None
    profiled: int = 0

    @property
    def exit_code(self) -> int:
        """The process exit status for :attr:`status` (see ``EXIT_CODES``)."""
        return EXIT_CODES[self.status]

    def summary(self) -> str:
        """Say in a few lines what ran, what the run directory holds, how to load it."""
        profiled = f", {self.profiled} profiled generation(s)" if self.profiled else ""
        lines = [
            f"sweep {self.status}: {self.measured} measured trial(s) and {self.warmups} warm-up(s)"
            f"{profiled} in {self.elapsed_s:.1f} s, {self.errors} new error(s)",
            f"run directory {str(self.run_dir)!r}: {self.measured_on_disk} of "
            f"{self.measured_expected} measured trials on disk, "
            f"{self.errors_on_disk} failed case(s) recorded",
            *self.messages,
            f"load it with: regimes.load({str(self.run_dir)!r})",
        ]
        return "\n".join(lines)


def _run_plans(
    pending: dict[int, SweepSpec],
    writer: RunWriter,
    deadline: float | None,
    lock: RunLock,
    interrupts: Interrupts,
    sink: Progress,
    messages: list[str],
) -> str:
    """Run each pending session in turn, in its spec's isolation; return the status."""

    def should_stop() -> str | None:
        return DEADLINE if deadline is not None and time.time() >= deadline else None

    status = "complete"
    try:
        for session, spec in pending.items():
            if not generations_left(spec, session, RunState.read(writer)):
                continue
            # Only once this call has made progress: each session also waits for its
            # first, so a slice whose deadline passed before it began still measures.
            progressed = sink.counts["measured"] or sink.counts["profiled"] or sink.counts["errors"]
            if should_stop() and progressed:
                status = "incomplete"
            elif spec.isolation == "none":
                outcome = session_runner(spec)(
                    spec, writer, session, emit=sink, should_stop=should_stop, interrupts=interrupts
                )
                status = "incomplete" if outcome.stopped else "complete"
            else:
                status = run_process_session(
                    pending, session, writer, deadline, lock.fd, sink, messages
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


@dataclass
class _Call:
    """How one call runs its sessions: deadline, progress bar, compaction, lock wait.

    The deadline counts from the call's start: reading the environment and the run
    are part of the time the caller gave.
    """

    max_seconds: float | None
    progress: bool
    compact: bool
    lock_wait_s: float
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)

    @property
    def deadline(self) -> float | None:
        return self.started_wall + self.max_seconds if self.max_seconds is not None else None


def _run_pending(
    pending: dict[int, SweepSpec],
    writer: RunWriter,
    lock: RunLock,
    interrupts: Interrupts,
    call: _Call,
) -> tuple[str, Progress, list[str]]:
    """Run what is left of the ``pending`` sessions; return status, counts and messages."""
    messages: list[str] = []
    state = RunState.read(writer)
    # counted, not planned: listing millions of trials only to count them took minutes
    total = sum(sum(generations_left(s, k, state).values()) for k, s in pending.items())
    sink = Progress(total, call.progress)
    deadline = call.deadline
    status = _run_plans(pending, writer, deadline, lock, interrupts, sink, messages)
    left = measured_left(pending, RunState.read(writer))
    return _finish(writer, status, left, call.compact, messages), sink, messages


def _result(
    target: Path,
    status: str,
    sink: Progress,
    messages: list[str],
    call: _Call,
    pending: dict[int, SweepSpec],
    batch: str | None = None,
) -> SweepResult:
    run = read_run(target)
    specs = session_specs(run.meta)
    return SweepResult(
        run_dir=target,
        status=status,
        measured=sink.counts["measured"],
        warmups=sink.counts["warmups"],
        errors=sink.counts["errors"],
        measured_on_disk=run.trials.filter(~pl.col("warmup")).height,
        measured_expected=sum(len(s.cases()) * s.trials for s in specs.values()),
        errors_on_disk=run.errors.height,
        elapsed_s=time.monotonic() - call.started,
        messages=messages,
        sessions=tuple(pending),
        batch=batch,
        profiled=sink.counts["profiled"],
    )


def session_runner(spec: SweepSpec) -> Callable[..., SessionOutcome]:
    """Return the runner of a session of ``spec``: in this process, or against its endpoint."""
    if spec.endpoint is None:
        return run_session
    from .endpoint._runner import run_endpoint_session

    return run_endpoint_session


def _run_meta(
    spec: SweepSpec, command: list[str] | None, hygiene: dict[str, Any] | None
) -> dict[str, Any]:
    from .environment import environment_metadata
    from .hygiene import collect_env_text, machine_state

    local = [b for b in spec.backends if spec.endpoint is None]
    meta: dict[str, Any] = {
        "spec": spec.to_dict(),
        "command": command if command is not None else list(sys.argv),
        "environment": environment_metadata(local),
        "hygiene": hygiene if hygiene is not None else machine_state(),
        "collect_env": collect_env_text(),
    }
    if spec.endpoint is not None:
        from .endpoint._provenance import endpoint_metadata

        meta["endpoint"] = endpoint_metadata(spec.endpoint)
    if spec.inject is not None:
        # Fault injection makes the latencies synthetic; say so where every reader looks.
        meta.update(inject=spec.inject.to_dict(), synthetic=True)
    if spec.slow_attention is not None:
        meta.update(slow_attention=spec.slow_attention.to_dict(), synthetic=True)
    return meta


def run_sweep(
    spec: SweepSpec,
    run_dir: str | os.PathLike[str],
    *,
    max_seconds: float | None = None,
    progress: bool = True,
    compact: bool = True,
    command: list[str] | None = None,
    lock_wait_s: float = 10.0,
    hygiene: dict[str, Any] | None = None,
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
        Stop cleanly once this much wall time has passed since the call began (after
        the generation in flight, after the first measured trial of a case whose
        warm-ups began, and not before the call's first measured trial or failed
        case, so that every slice of a sweep gets further than the last).
    progress : bool, default True
        Show a progress bar on stderr.
    compact : bool, default True
        Merge each table's parts into one when the sweep completes.
    command : list of str, optional
        The command line recorded in ``meta.json`` (default ``sys.argv``).
    lock_wait_s : float, default 10.0
        How long to wait for another process still writing to ``run_dir``.
    hygiene : dict, optional
        How quiet the machine is, recorded in ``meta.json`` (default: looked at now
        with :func:`collectors.hygiene.machine_state`; ``regimes collect`` looks
        before it starts, to warn).

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
    collect_budgets : add budgets to a run in fresh sessions.
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
    call = _Call(max_seconds, progress, compact, lock_wait_s)
    target = Path(run_dir)
    meta = _run_meta(spec, command, hygiene)
    check_run_dir(spec, target)  # before anything is created: a refused directory stays as it was
    target.mkdir(parents=True, exist_ok=True)
    with RunLock(target, lock_wait_s) as lock, Interrupts() as interrupts:
        check_run_dir(spec, target)  # again under the lock: another writer may have begun
        remove_stale_temp_files(target)
        writer = RunWriter(target, meta)
        pending = dict.fromkeys(range(spec.sessions), resolved(spec, writer.meta))
        status, sink, messages = _run_pending(pending, writer, lock, interrupts, call)
        if status == "complete" and needs_choice(spec, writer.meta):
            status = _profile_chosen(spec, writer, lock, interrupts, call, sink, messages)
    return _result(target, status, sink, messages, call, pending)


def _profile_chosen(
    spec: SweepSpec,
    writer: RunWriter,
    lock: RunLock,
    interrupts: Interrupts,
    call: _Call,
    sink: Progress,
    messages: list[str],
) -> str:
    """Choose the budgets of ``profile = "auto"`` and profile them in the run's sessions.

    The choice is recorded in ``meta.json`` first (:mod:`collectors._profile_auto`), so
    the session processes, and a rerun after an interruption, profile the same budgets.
    """
    choice = record_choice(writer, spec)
    messages.append(choice.message())
    if not choice.budgets:
        return "complete"
    pending = dict.fromkeys(range(spec.sessions), resolved(spec, writer.meta))
    status, more, later = _run_pending(pending, writer, lock, interrupts, call)
    sink.counts.update(more.counts)
    messages.extend(later)
    return status


def _batch_overrides(
    base: SweepSpec,
    budgets: Sequence[int],
    trials: int | None,
    warmup: int | None,
    isolation: str | None,
) -> dict[str, Any]:
    """Check the spec keys a batch replaces as a spec would, and return them."""
    given = {"budgets": budgets, "trials": trials, "warmup": warmup, "isolation": isolation}
    overrides = {key: value for key, value in given.items() if value is not None}
    if isinstance(budgets, Sequence) and not isinstance(budgets, str):
        overrides["budgets"] = list(budgets)
    checked = SweepSpec.from_dict({**base.to_dict(), **overrides})
    return {key: _plain(getattr(checked, key)) for key in overrides}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def collect_budgets(
    run_dir: str | os.PathLike[str],
    budgets: Sequence[int],
    *,
    sessions: int = 1,
    trials: int | None = None,
    warmup: int | None = None,
    isolation: str | None = None,
    batch: str | None = None,
    max_seconds: float | None = None,
    progress: bool = False,
    compact: bool = True,
    command: list[str] | None = None,
    lock_wait_s: float = 10.0,
    hygiene: dict[str, Any] | None = None,
) -> SweepResult:
    """Measure ``budgets`` with the run's own spec in fresh sessions, appended to the run.

    The spec stored in ``run_dir`` is run again with its budgets replaced by
    ``budgets`` (and, if given, its trials, warm-ups and isolation replaced), in
    ``sessions`` new sessions numbered after every session the run already has, so
    no trial key collides. Everything else stays the run's: models, dtypes, cache
    settings, prompts, engine, instrumentation, seed, fault injection. The batch is
    recorded in ``meta.json`` (``batches``) before its first trial, and every trial is
    written atomically as it ends: a crash loses at most the generation in flight, and
    the same call again resumes the batch (an unnamed batch with the same settings and
    trials left is continued; a finished one is not, so calling again adds sessions).

    Parameters
    ----------
    run_dir : str or os.PathLike
        An existing run directory (made by :func:`run_sweep`).
    budgets : sequence of int
        The budgets to measure, within the model's positions.
    sessions : int, default 1
        Fresh sessions to run them in.
    trials, warmup : int, optional
        Measured trials and warm-ups per case and session (default: the run's).
    isolation : str, optional
        ``"process"`` or ``"none"`` (default: the run's).
    batch : str, optional
        A name for the batch: a named batch that exists is resumed (its settings must
        match). Default: ``batch-N``.
    max_seconds, progress, compact, command, lock_wait_s, hygiene
        As in :func:`run_sweep` (``progress`` defaults to False here).

    Returns
    -------
    SweepResult
        As :func:`run_sweep`'s; ``sessions`` and ``batch`` name what ran.

    Raises
    ------
    SpecError
        ``run_dir`` is not a run, a budget is invalid for the run's spec, or a named
        batch exists with other settings.
    RunBusyError
        Another process is writing to ``run_dir``.

    See Also
    --------
    run_sweep : create or resume the run itself.
    run_stored_session : run one session of a run as a unit.

    Examples
    --------
    >>> import tempfile, regimes
    >>> spec = SweepSpec.from_dict({"models": ["tiny-gpt2"], "backends": ["cpu"],
    ...                             "budgets": [2, 8], "trials": 2, "warmup": 0})
    >>> path = tempfile.mkdtemp() + "/run"
    >>> _ = run_sweep(spec, path, progress=False)
    >>> more = collect_budgets(path, [3, 5], sessions=2)
    >>> more.status, more.sessions, more.measured
    ('complete', (1, 2), 8)
    >>> sorted(regimes.load(path)["budget"].unique())
    [2, 3, 5, 8]
    """
    call = _Call(max_seconds, progress, compact, lock_wait_s)
    target = Path(run_dir)
    base = stored_spec(read_meta(target))
    overrides = _batch_overrides(base, budgets, trials, warmup, isolation)
    if not _is_count(sessions):
        raise SpecError(f"sessions must be a positive integer, got {sessions!r}")
    with RunLock(target, lock_wait_s) as lock, Interrupts() as interrupts:
        remove_stale_temp_files(target)
        claimed = claim_batch(target, overrides, sessions, batch)
        meta = {**_run_meta(base, command, hygiene), "batch": claimed.name}
        del meta["spec"]
        writer = RunWriter(target, meta)
        pending = dict.fromkeys(claimed.sessions, claimed.spec)
        status, sink, messages = _run_pending(pending, writer, lock, interrupts, call)
    return _result(target, status, sink, messages, call, pending, claimed.name)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def run_stored_session(
    run_dir: str | os.PathLike[str],
    session: int,
    *,
    emit: EventSink | None = None,
    should_stop: Callable[[], str | None] | None = None,
) -> SessionOutcome:
    """Run what is left of one session of an existing run, in this process.

    The unit of work of a sweep: the spec that governs ``session`` (the run's own, or
    its batch's) is read from ``run_dir/meta.json``, and the session's remaining
    trials are run and written as :func:`run_session` does. Session processes
    (``isolation = "process"``) run exactly this; so can a worker on another machine
    that sees the same directory. The caller makes sure no other process runs the
    same session at the same time (:func:`run_sweep` holds the run's lock).

    Parameters
    ----------
    run_dir : str or os.PathLike
        The run directory.
    session : int
        A session number of the run (its own or a batch's).
    emit : callable, optional
        Receives each progress event (a dict).
    should_stop : callable, optional
        Asked before each generation and model load; a non-empty answer (a reason)
        ends the session cleanly.

    Returns
    -------
    SessionOutcome
        Measured trials, warm-ups and errors written, and why it stopped early if it
        did.

    Raises
    ------
    RegimesInputError
        ``run_dir`` is not a run, or has no session ``session``.
    """
    writer = RunWriter(run_dir, None)
    specs = session_specs(writer.meta)
    if session not in specs:
        raise SpecError(
            f"{str(run_dir)!r} has no session {session}; its sessions are {sorted(specs)}"
        )
    return session_runner(specs[session])(
        specs[session], writer, session, emit=emit, should_stop=should_stop or _never_stop
    )


def _never_stop() -> str | None:
    return None
