"""Running a sweep: a seeded, shuffled, interleaved schedule, written trial by trial.

Schedule. Within a session the cases are grouped by what must be loaded, the
(model, backend, dtype) triple, so each model is built once per session and freed
before the next (memory stays bounded by one model). Group order is shuffled per
session. Inside a group run ``trials`` rounds; round :math:`r` runs trial :math:`r` of
every case of the group in a fresh random permutation. Each budget is therefore
measured once per round, spread over the whole time the group runs, so a slow drift
(thermal throttling, a background job) adds noise to every budget alike instead of
masquerading as a budget effect. The permutations come from
``numpy.random.default_rng((seed, session))``: the same spec gives the same order.

Warm-ups are lazy: in each process, a case's ``warmup`` warm-up generations run
immediately before that case's first measured trial in that process (so, in a fresh
session, inside round 0 just before the case's turn). A sliced or interrupted process
has therefore warmed only the cases it measured, and a process that resumes warms
only the cases it reaches, instead of paying every case's warm-ups up front. A
``max_seconds`` deadline never falls between a case's warm-ups and its first measured
trial (it would waste them); a slice overruns by at most that many generations.

Crash safety. Each finished generation is written as its own atomic parquet part
(:class:`regimes.data.io.RunWriter`) before the next starts, so a crash, a kill or a power
loss costs at most the generation in flight. A rerun with the same spec and directory
resumes: the measured schedule is rebuilt and filtered down to the (case, session,
trial) keys not yet on disk, and each case left is warmed again before its first
remaining trial (the process state it was warmed in is gone), its warm-ups numbered
after those already stored so that no key repeats; ``order`` continues after the
largest stored. SIGINT and SIGTERM stop the sweep between parts, never inside one.

Failures. A case that raises (out of memory, a dtype the device lacks, a
:class:`~collectors.engines.BudgetMismatch`) is recorded in the ``errors`` table with
its traceback and its remaining trials in that session are skipped; the sweep goes on,
and a resume does not retry it. A session process that dies outright (a native crash,
the out-of-memory killer) is charged to the case it was running in the same way.

Isolation. ``isolation = "process"`` runs every session in a fresh Python process
(:mod:`collectors.worker`), which reports progress as JSON lines on its stdout; with
``"none"`` sessions run one after another in the calling process.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from regimes.data.io import RunWriter, read_run
from regimes.data.schema import RegimesInputError

from . import engines, models
from .backends import Backend, get_backend, rss_bytes
from .spec import Case, SpecError, SweepSpec

__all__ = [
    "EXIT_CODES",
    "RunBusyError",
    "ScheduledTrial",
    "SessionOutcome",
    "SweepResult",
    "plan_session",
    "run_session",
    "run_sweep",
    "schedule",
]

EXIT_CODES: dict[str, int] = {"complete": 0, "failed": 1, "incomplete": 3, "interrupted": 130}
"""Process exit status for each final sweep status (130 = 128 + SIGINT, the shell convention)."""

_CASE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Case))
"""Case columns, in the order they lead :data:`regimes.data.io.TRIAL_KEY`."""

_DEADLINE = "deadline"
"""The stop reason of a sliced sweep (``max_seconds``); the only one that waits for a
case's warm-ups to reach its first measured trial."""

Event = dict[str, Any]
EventSink = Callable[[Event], None]


class RunBusyError(RegimesInputError):
    """Another process is writing to the same run directory."""


@dataclass(frozen=True)
class ScheduledTrial:
    """One generation to run: a case, in a session, as warm-up or measured trial."""

    case: Case
    session: int
    trial: int
    warmup: bool

    @property
    def key(self) -> tuple[Any, ...]:
        """The trial's identity, in :data:`regimes.data.io.TRIAL_KEY` order."""
        c = self.case
        return (
            c.model,
            c.backend,
            c.dtype,
            c.use_cache,
            c.prompt_tokens,
            c.budget,
            self.session,
            self.trial,
            self.warmup,
        )


def _measured_order(spec: SweepSpec, session: int) -> list[ScheduledTrial]:
    """The measured trials of one session in execution order (groups, then rounds)."""
    rng = np.random.default_rng((spec.seed, session))
    cases = spec.cases()
    groups = [list(g) for _, g in itertools.groupby(cases, key=lambda c: c.load_key)]
    order: list[ScheduledTrial] = []
    for g in rng.permutation(len(groups)):
        group = groups[g]
        for r in range(spec.trials):
            order.extend(
                ScheduledTrial(group[i], session, r, False) for i in rng.permutation(len(group))
            )
    return order


def _with_lazy_warmups(
    measured: list[ScheduledTrial], warmup: int, warmups_stored: dict[tuple[Case, int], int]
) -> list[ScheduledTrial]:
    """Put each case's ``warmup`` warm-ups immediately before its first trial in ``measured``.

    Warm-up numbers continue after the ``warmups_stored`` ones of that (case, session),
    so that no key repeats across resumes.
    """
    plan: list[ScheduledTrial] = []
    warmed: set[Case] = set()
    for t in measured:
        if t.case not in warmed:
            warmed.add(t.case)
            first = warmups_stored.get((t.case, t.session), 0)
            plan.extend(ScheduledTrial(t.case, t.session, first + w, True) for w in range(warmup))
        plan.append(t)
    return plan


def schedule(spec: SweepSpec, session: int) -> list[ScheduledTrial]:
    """The full execution order of one session (see the module docstring).

    Deterministic in ``(spec.seed, session)``: the warm-ups draw no random numbers, so
    the measured order does not depend on ``spec.warmup``.
    """
    return _with_lazy_warmups(_measured_order(spec, session), spec.warmup, {})


@dataclass(frozen=True)
class RunState:
    """What a run directory already holds, as far as planning needs it."""

    done: frozenset[tuple[Any, ...]]
    failed: frozenset[tuple[Case, int]]
    warmups_stored: dict[tuple[Case, int], int]
    next_order: int
    run_id: str

    @classmethod
    def read(cls, writer: RunWriter) -> RunState:
        run = writer.existing()
        trials, errors = run.trials, run.errors
        case_cols = list(_CASE_FIELDS)
        measured = trials.filter(~pl.col("warmup"))
        done = frozenset(measured.select([*case_cols, "session", "trial", "warmup"]).iter_rows())
        failed = frozenset(
            (Case(*row[:-1]), row[-1]) for row in errors.select([*case_cols, "session"]).iter_rows()
        )
        warm = (
            trials.filter(pl.col("warmup"))
            .group_by([*case_cols, "session"])
            .agg(pl.col("trial").max() + 1)
        )
        warmups_stored = {(Case(*row[:-2]), row[-2]): row[-1] for row in warm.iter_rows()}
        next_order = int(trials["order"].max()) + 1 if trials.height else 0  # type: ignore[arg-type]
        return cls(done, failed, warmups_stored, next_order, writer.run_id)


def plan_session(spec: SweepSpec, session: int, state: RunState) -> list[ScheduledTrial]:
    """What a process starting ``session`` now runs, given what ``state`` holds.

    The measured order of :func:`schedule`, less the measured trials already stored
    and every trial of a case that failed in this session; then each case left gets
    fresh warm-ups immediately before its first remaining trial (whatever an earlier
    process warmed is gone), numbered after the warm-ups already stored for that
    (case, session).
    """
    left = [
        t
        for t in _measured_order(spec, session)
        if t.key not in state.done and (t.case, session) not in state.failed
    ]
    return _with_lazy_warmups(left, spec.warmup, state.warmups_stored)


_PROCESS_ID: tuple[int, str] | None = None


def process_id() -> str:
    """A string unique to this OS process (host, pid and a random suffix, as pids recur)."""
    global _PROCESS_ID
    if _PROCESS_ID is None or _PROCESS_ID[0] != os.getpid():
        _PROCESS_ID = (os.getpid(), f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    return _PROCESS_ID[1]


class _Interrupts:
    """Turn SIGINT and SIGTERM into KeyboardInterrupt, but never inside :meth:`deferred`.

    Signal handlers can only be installed from the main thread; elsewhere this does
    nothing and Python's defaults apply.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict[int, Any] = {}
        self._deferring = False
        self._pending = False
        self._raised = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self._raised:
            return  # a second Ctrl-C must not break the clean stop the first one began
        if self._deferring:
            self._pending = True
        else:
            self._raised = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in self._SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
            if self._pending:
                self._pending = False
                self._raised = True
                raise KeyboardInterrupt("interrupted")


@dataclass
class SessionOutcome:
    """What one call of :func:`run_session` did."""

    measured: int = 0
    warmups: int = 0
    errors: int = 0
    stopped: str | None = None


def _error_row(
    run_id: str,
    case: Case,
    session: int,
    exc: BaseException | None,
    *,
    error_type: str | None = None,
    message: str | None = None,
    trace: str | None = None,
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "session": session,
        "backend": case.backend,
        "model": case.model,
        "dtype": case.dtype,
        "use_cache": case.use_cache,
        "prompt_tokens": case.prompt_tokens,
        "budget": case.budget,
        "error_type": error_type or type(exc).__name__,
        "error": message if message is not None else str(exc),
        "traceback": trace if trace is not None else "".join(traceback.format_exception(exc)),
    }


def _case_dict(case: Case) -> dict[str, Any]:
    return {name: getattr(case, name) for name in _CASE_FIELDS}


class _SessionRun:
    """Runs one session's plan; holds what the trials share (backends, prompts, order)."""

    def __init__(
        self,
        spec: SweepSpec,
        writer: RunWriter,
        session: int,
        state: RunState,
        emit: EventSink,
        should_stop: Callable[[], str | None],
        interrupts: _Interrupts,
    ):
        self.spec, self.writer, self.session, self.state = spec, writer, session, state
        self.emit, self.should_stop, self.interrupts = emit, should_stop, interrupts
        self.order = state.next_order
        self.outcome = SessionOutcome()
        self.backends: dict[str, Backend] = {}
        self.device_names: dict[str, str] = {}

    def backend(self, name: str) -> Backend:
        if name not in self.backends:
            self.backends[name] = get_backend(name)
            self.device_names[name] = self.backends[name].device_name()
        return self.backends[name]

    def record_errors(self, cases: list[Case], exc: BaseException, skipped: int) -> None:
        rows = [_error_row(self.state.run_id, case, self.session, exc) for case in cases]
        with self.interrupts.deferred():
            self.writer.write_errors(rows)
        self.outcome.errors += len(rows)
        for case in cases:
            self.emit(
                {
                    "event": "error",
                    "session": self.session,
                    "case": _case_dict(case),
                    "error_type": type(exc).__name__,
                    "error": str(exc).splitlines()[0] if str(exc) else "",
                }
            )
        self.emit({"event": "skip", "n": skipped})

    def run(self, plan: list[ScheduledTrial]) -> SessionOutcome:
        for load_key, items in itertools.groupby(plan, key=lambda t: t.case.load_key):
            reason = self.should_stop()
            if reason:
                self.outcome.stopped = reason
                break
            if not self.run_group(load_key, list(items)):
                break
        return self.outcome

    def run_group(self, load_key: tuple[str, str, str], items: list[ScheduledTrial]) -> bool:
        model_name, backend_name, dtype = load_key
        self.emit(
            {
                "event": "load",
                "session": self.session,
                "model": model_name,
                "backend": backend_name,
                "dtype": dtype,
            }
        )
        backend: Backend | None = None
        try:
            backend = self.backend(backend_name)
            loaded = models.load_model(
                model_name,
                dtype=dtype,
                device=backend,
                weights=self.spec.weights,
                seed=self.spec.seed,
                label=model_name,
            )
        except Exception as exc:
            self.record_errors(list(dict.fromkeys(t.case for t in items)), exc, len(items))
            self.release(backend)
            return True
        try:
            return self.run_trials(loaded, backend, items)
        finally:
            del loaded
            self.release(backend)

    @staticmethod
    def release(backend: Backend | None) -> None:
        """Free what a model or a failed generation left (it must not crowd the next)."""
        gc.collect()
        if backend is not None:
            backend.empty_cache()

    def run_trials(
        self, loaded: models.LoadedModel, backend: Backend, items: list[ScheduledTrial]
    ) -> bool:
        prompts: dict[int, Any] = {}
        failed: set[Case] = set()
        remaining = Counter(t.case for t in items)
        warming = False  # the last generation was a warm-up whose case is not yet measured
        for item in items:
            case = item.case
            if case in failed:
                continue
            reason = self.should_stop()
            # A deadline waits for the case being warmed to get its first measured
            # trial: warm-ups are useless to the next process, so stopping between
            # them and the trial would throw away the time spent on them.
            if reason and not (warming and reason == _DEADLINE):
                self.outcome.stopped = reason
                return False
            self.emit(
                {
                    "event": "start",
                    "session": self.session,
                    "case": _case_dict(case),
                    "trial": item.trial,
                    "warmup": item.warmup,
                }
            )
            try:
                if case.prompt_tokens not in prompts:
                    prompts[case.prompt_tokens] = models.make_prompt(
                        case.prompt_tokens, loaded.vocab_size, seed=self.spec.seed
                    )
                timing = engines.run_generation(
                    loaded,
                    backend,
                    prompts[case.prompt_tokens],
                    budget=case.budget,
                    use_cache=case.use_cache,
                    engine=self.spec.engine,
                    instrument=self.spec.instrument,
                )
                memory = backend.memory()
            except Exception as exc:
                failed.add(case)
                self.record_errors([case], exc, remaining[case])
            if case in failed:
                warming = False
                # Outside the except block, whose traceback still holds the failed
                # generation's tensors.
                self.release(backend)
                continue
            remaining[case] -= 1
            self.write_trial(item, timing, memory)
            warming = item.warmup
        return True

    def write_trial(
        self, item: ScheduledTrial, timing: engines.TrialTiming, memory: dict[str, int | None]
    ) -> None:
        case = item.case
        row = {
            **_case_dict(case),
            "run_id": self.state.run_id,
            "session": self.session,
            "device": self.device_names[case.backend],
            "engine": self.spec.engine,
            "trial": item.trial,
            "order": self.order,
            "warmup": item.warmup,
            "latency_s": timing.latency_s,
            "prefill_s": timing.prefill_s,
            "decode_s": timing.decode_s,
            "new_tokens": timing.new_tokens,
            **memory,
            "rss_bytes": rss_bytes(),
            "instrumented": self.spec.instrument,
            "process_id": process_id(),
        }
        with self.interrupts.deferred():
            # Trial before steps: a kill between the two loses one trial's step times,
            # whereas the other order would let a resume store them twice.
            self.writer.write_trials([row])
            if timing.step_s is not None:
                steps = pl.DataFrame(
                    {"step": np.arange(len(timing.step_s)), "step_s": timing.step_s}
                ).with_columns(
                    pl.lit(value).alias(name)
                    for name, value in {
                        **_case_dict(case),
                        "run_id": self.state.run_id,
                        "session": self.session,
                        "device": row["device"],
                        "trial": item.trial,
                        "warmup": item.warmup,
                    }.items()
                )
                self.writer.write_steps(steps)
        self.order += 1
        if item.warmup:
            self.outcome.warmups += 1
        else:
            self.outcome.measured += 1
        self.emit(
            {
                "event": "trial",
                "session": self.session,
                "case": _case_dict(case),
                "trial": item.trial,
                "warmup": item.warmup,
                "latency_s": timing.latency_s,
            }
        )


def _never_stop() -> str | None:
    return None


def run_session(
    spec: SweepSpec,
    writer: RunWriter,
    session: int,
    *,
    emit: EventSink | None = None,
    should_stop: Callable[[], str | None] = _never_stop,
    interrupts: _Interrupts | None = None,
) -> SessionOutcome:
    """Run what is left of ``session`` in this process, writing each trial as it ends.

    ``should_stop`` is asked before each generation and each model load; a non-empty
    answer (e.g. ``"deadline"``) ends the session cleanly and is returned in
    :attr:`SessionOutcome.stopped`, except that ``"deadline"`` lets a case whose
    warm-ups have begun run its first measured trial. KeyboardInterrupt propagates after the last
    complete part is on disk.
    """
    state = RunState.read(writer)
    plan = plan_session(spec, session, state)
    guard = interrupts or _Interrupts()
    runner = _SessionRun(
        spec, writer, session, state, emit or (lambda event: None), should_stop, guard
    )
    if interrupts is not None:
        return runner.run(plan)
    with guard:
        return runner.run(plan)


@dataclass
class SweepResult:
    """The outcome of :func:`run_sweep`; ``summary()`` says it in a few lines."""

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
        return EXIT_CODES[self.status]

    def summary(self) -> str:
        lines = [
            f"sweep {self.status}: {self.measured} measured trial(s) and {self.warmups} warm-up(s) "
            f"in {self.elapsed_s:.1f} s, {self.errors} new error(s)",
            f"run directory {str(self.run_dir)!r}: {self.measured_on_disk} of "
            f"{self.measured_expected} measured trials on disk, {self.errors_on_disk} failed case(s) recorded",
            *self.messages,
            f"load it with: regimes.load({str(self.run_dir)!r})",
        ]
        return "\n".join(lines)


class _RunLock:
    """An exclusive ``flock`` on ``RUN/.lock`` so two writers never share a run directory.

    The descriptor is passed to session processes, so the lock lives as long as any of
    them does (a worker orphaned by a killed parent keeps the run busy until it exits).
    """

    def __init__(self, run_dir: Path, wait_s: float):
        self.path = run_dir / ".lock"
        self.wait_s = wait_s
        self.fd: int | None = None

    def __enter__(self) -> _RunLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows has no flock; run unlocked
            return self
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        give_up = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= give_up:
                    os.close(self.fd)
                    self.fd = None
                    raise RunBusyError(
                        f"another process is writing to {str(self.path.parent)!r}; "
                        "wait for it to finish (or stop it) and rerun"
                    ) from None
                time.sleep(0.2)

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _check_run_dir(spec: SweepSpec, run_dir: Path) -> None:
    """Refuse, before touching anything, a directory that holds another spec's run or
    something that is not a run at all.
    """
    meta_path = run_dir / "meta.json"
    if meta_path.exists():
        try:
            stored = json.loads(meta_path.read_text())["spec"]
        except (KeyError, json.JSONDecodeError):
            raise SpecError(f"{str(run_dir)!r} holds a run without a readable sweep spec") from None
        previous = SweepSpec.from_dict(stored, check_available=False)
        differences = previous.differences(spec)
        if differences:
            detail = "; ".join(
                f"{k}: {getattr(previous, k)!r} there, {getattr(spec, k)!r} now"
                for k in differences
            )
            raise SpecError(
                f"{str(run_dir)!r} holds a run of a different spec ({detail}); "
                "use a new output directory, or the original spec to resume"
            )
    elif run_dir.exists() and (
        not run_dir.is_dir() or any(p.name != ".lock" for p in run_dir.iterdir())
    ):
        raise SpecError(
            f"{str(run_dir)!r} exists and is not a run directory; choose an empty or new one"
        )


def _remove_stale_temp_files(run_dir: Path) -> None:
    """Temporary files of writes that were killed mid-way.

    Only called with the run locked, so none of them can belong to a live writer.
    """
    for stale in run_dir.glob("*/.part-*.tmp"):
        stale.unlink()


class _Progress:
    """Turns session events into a tqdm bar (total = generations, warm-ups included)
    and counts what was done.
    """

    def __init__(self, total: int, enabled: bool):
        from tqdm.auto import tqdm

        self.bar = tqdm(
            total=total,
            unit="gen",
            disable=not enabled,
            dynamic_ncols=True,
            file=sys.stderr,
            smoothing=0.05,
        )
        self.counts = Counter[str]()
        self._write = tqdm.write

    def write(self, line: str) -> None:
        self._write(line, file=sys.stderr)

    def __call__(self, event: Event) -> None:
        kind = event.get("event")
        if kind == "trial":
            case = event["case"]
            self.counts["warmups" if event["warmup"] else "measured"] += 1
            self.bar.set_postfix_str(
                f"session {event['session']} budget {case['budget']} "
                f"{'cache' if case['use_cache'] else 'no-cache'} {event['latency_s']:.3g}s",
                refresh=False,
            )
            self.bar.update(1)
        elif kind == "skip":
            self.retotal(self.bar.total - int(event["n"]))
        elif kind == "error":
            self.counts["errors"] += 1
            case = Case(**event["case"])
            self.write(
                f"error in {case.label()} (session {event['session']}): "
                f"{event['error_type']}: {event['error']}"
            )

    def retotal(self, total: int) -> None:
        self.bar.total = max(self.bar.n, total)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def _crash_error_rows(
    run_id: str, spec: SweepSpec, session: int, last: Event | None, returncode: int
) -> list[dict[str, Any]]:
    try:
        how = (
            f"signal {signal.Signals(-returncode).name}"
            if returncode < 0
            else f"status {returncode}"
        )
    except ValueError:
        how = f"status {returncode}"
    message = f"the session process exited with {how} while running this case"
    if last is None:
        return []
    if last["event"] == "start":
        cases = [Case(**last["case"])]
    else:
        load_key = (last["model"], last["backend"], last["dtype"])
        cases = [c for c in spec.cases() if c.load_key == load_key]
    return [
        _error_row(run_id, c, session, None, error_type="WorkerCrash", message=message, trace="")
        for c in cases
    ]


def _set_parent_death_signal() -> None:
    """On Linux, have the kernel SIGKILL this process when its parent dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # pragma: no cover - best effort only
        pass


def _run_worker(
    run_dir: Path, session: int, deadline: float | None, lock_fd: int | None, sink: _Progress
) -> tuple[int, Event | None]:
    """Run a session in a fresh process; return its exit status and, if it was in the
    middle of something (a model load or a generation), the event that began it.
    """
    command = [
        sys.executable,
        "-m",
        "collectors.worker",
        str(run_dir),
        "--session",
        str(session),
        "--parent-pid",
        str(os.getpid()),
    ]
    if deadline is not None:
        command += ["--deadline", repr(deadline)]
    # The child must import this very source tree, installed or not.
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        pass_fds=(lock_fd,) if lock_fd is not None else (),
        preexec_fn=_set_parent_death_signal if sys.platform.startswith("linux") else None,
    )
    in_flight: Event | None = None
    try:
        assert child.stdout is not None
        for line in child.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = None
            if not isinstance(event, dict) or "event" not in event:
                sink.write(line.rstrip("\n"))
                continue
            if event["event"] in ("start", "load"):
                in_flight = event
            elif event["event"] in ("trial", "skip"):
                in_flight = None
            sink(event)
        return child.wait(), in_flight
    except BaseException:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        raise


def _run_process_session(
    spec: SweepSpec,
    writer: RunWriter,
    session: int,
    deadline: float | None,
    lock_fd: int | None,
    sink: _Progress,
    messages: list[str],
) -> str:
    """Run one session in fresh processes until its plan is empty; return a status.

    A process that dies mid-case is charged to that case (a ``WorkerCrash`` error row)
    and a new process takes over the rest of the session; every relaunch therefore
    removes at least one case, so this ends.
    """
    while True:
        returncode, in_flight = _run_worker(writer.path, session, deadline, lock_fd, sink)
        if returncode == EXIT_CODES["complete"]:
            return "complete"
        if returncode == EXIT_CODES["incomplete"]:
            return "incomplete"
        if returncode == EXIT_CODES["interrupted"]:
            return "interrupted"
        rows = _crash_error_rows(writer.run_id, spec, session, in_flight, returncode)
        if not rows:
            messages.append(
                f"session {session}: the session process exited with status {returncode} "
                "outside any case (see its output above)"
            )
            return "failed"
        writer.write_errors(rows)
        for row in rows:
            sink(
                {
                    "event": "error",
                    "session": session,
                    "case": {k: row[k] for k in _CASE_FIELDS},
                    "error_type": row["error_type"],
                    "error": row["error"],
                }
            )
        state = RunState.read(writer)
        sink.retotal(
            sink.bar.n
            + sum(len(plan_session(spec, k, state)) for k in range(session, spec.sessions))
        )
        if not plan_session(spec, session, state):
            return "complete"


def _measured_left(spec: SweepSpec, writer: RunWriter) -> int:
    state = RunState.read(writer)
    return sum(
        1 for k in range(spec.sessions) for t in plan_session(spec, k, state) if not t.warmup
    )


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

    Status ``complete`` (every measured trial is on disk or its case failed; the parts
    are then compacted unless ``compact=False``), ``incomplete`` (``max_seconds`` of
    wall time passed; the trial in flight was finished first, and so was the first
    measured trial of a case whose warm-ups had begun), ``interrupted``
    (SIGINT/SIGTERM) or ``failed`` (a session process died outside any case).
    Rerunning the same call resumes in every case. ``lock_wait_s`` is how long to wait
    for another process still writing to ``run_dir``.
    """
    from .environment import environment_metadata

    started = time.monotonic()
    deadline = time.time() + max_seconds if max_seconds is not None else None
    target = Path(run_dir)
    meta = {
        "spec": spec.to_dict(),
        "command": command if command is not None else list(sys.argv),
        "environment": environment_metadata(spec.backends),
    }
    _check_run_dir(spec, target)
    target.mkdir(parents=True, exist_ok=True)
    messages: list[str] = []
    with _RunLock(target, lock_wait_s) as lock, _Interrupts() as interrupts:
        _remove_stale_temp_files(target)
        writer = RunWriter(target, meta)
        state = RunState.read(writer)
        plans = {k: plan_session(spec, k, state) for k in range(spec.sessions)}
        sink = _Progress(sum(map(len, plans.values())), progress)

        def should_stop() -> str | None:
            return _DEADLINE if deadline is not None and time.time() >= deadline else None

        status = "complete"
        try:
            for session, plan in plans.items():
                if not plan:
                    continue
                if should_stop():
                    status = "incomplete"
                elif spec.isolation == "none":
                    outcome = run_session(
                        spec,
                        writer,
                        session,
                        emit=sink,
                        should_stop=should_stop,
                        interrupts=interrupts,
                    )
                    status = "incomplete" if outcome.stopped else "complete"
                else:
                    status = _run_process_session(
                        spec, writer, session, deadline, lock.fd, sink, messages
                    )
                if status != "complete":
                    break
        except KeyboardInterrupt:
            status = "interrupted"
        finally:
            sink.close()
        left = _measured_left(spec, writer)
        if status == "complete" and left:  # pragma: no cover - a plan that did not drain is a bug
            status = "incomplete"
        if status == "complete" and compact:
            try:
                writer.compact()
            except KeyboardInterrupt:
                messages.append(
                    "compaction was interrupted; the data are complete (rerun to compact)"
                )
    run = read_run(target)
    if status in ("incomplete", "interrupted"):
        messages.append(
            f"{left} measured trial(s) left: rerun the same command to resume where it stopped"
        )
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
