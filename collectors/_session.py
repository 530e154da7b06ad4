"""The session runner: run what is left of one session in this process, trial by trial.

Crash safety. Each finished generation is written as its own atomic parquet part
(:class:`regimes.data.io.RunWriter`) before the next starts, so a crash, a kill or a
power loss costs at most the generation in flight; ``order`` continues after the
largest stored. SIGINT and SIGTERM stop the session between parts, never inside one.

Failures. A case that raises (out of memory, a dtype the device lacks, a
:class:`~collectors.engines.BudgetMismatch`) is recorded in the ``errors`` table with
its traceback and its remaining trials in that session are skipped; the session goes
on, and a resume does not retry it.

A ``"deadline"`` stop never falls between a case's warm-ups and its first measured
trial (it would waste them), nor before the call has made progress (a measured trial
written or a case recorded as failed), so that every slice of a sliced sweep gets
further than the last however long it spent before its first generation; a slice
overruns by at most a case's warm-ups and one trial.

The plan is lazy (:func:`collectors._schedule.iter_plan`): a session of millions of
trials starts at once, and what a failure skips is counted, not listed.
"""

from __future__ import annotations

import gc
import itertools
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from regimes.data.io import RunWriter

from . import engines, models
from ._attention import allowed_sdpa_backends, enabled_sdpa_backends
from ._events import EventSink, error_event, ignore
from ._schedule import ScheduledTrial, generations_left, iter_plan
from ._signals import Interrupts
from ._state import RunState, case_dict, error_row
from .backends import Backend, get_backend, rss_bytes
from .profiling import profiled, slowed_attention
from .spec import Case, SweepSpec

__all__ = [
    "DEADLINE",
    "EXIT_CODES",
    "SessionOutcome",
    "drive",
    "host_name",
    "process_id",
    "run_session",
]

EXIT_CODES: dict[str, int] = {"complete": 0, "failed": 1, "incomplete": 3, "interrupted": 130}
"""Process exit status for each final sweep status (130 = 128 + SIGINT, the shell convention)."""

DEADLINE = "deadline"
"""The stop reason of a sliced sweep (``max_seconds``); the only one that waits for a
case's warm-ups to reach its first measured trial."""

_PROCESS_ID: tuple[int, str] | None = None

_ATTENTION_COLUMNS = ("attn_implementation", "sdpa_backends")
"""Columns of a trial row that say which attention ran; its step rows repeat them."""


def host_name() -> str:
    """Return the host name trials record: ``$REGIMES_HOST`` if set, else the machine's.

    The override names a machine of a fleet whose own name is not telling (a cloud
    box), and lets one machine pose as two in tests.
    """
    return os.environ.get("REGIMES_HOST") or socket.gethostname()


def process_id() -> str:
    """Return a string unique to this OS process (host, pid and a random suffix).

    The suffix is there because pids recur.
    """
    global _PROCESS_ID
    if _PROCESS_ID is None or _PROCESS_ID[0] != os.getpid():
        _PROCESS_ID = (os.getpid(), f"{host_name()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    return _PROCESS_ID[1]


@dataclass
class SessionOutcome:
    """What one call of :func:`run_session` did."""

    measured: int = 0
    warmups: int = 0
    errors: int = 0
    stopped: str | None = None
    profiled: int = 0


class _SessionRun:
    """Runs one session's plan; holds what the trials share (backends, prompts, order).

    Subclasses (an endpoint's runner) replace :meth:`load` and :meth:`generate`; an
    exception in :attr:`fatal` stops the session instead of failing a case.
    """

    fatal: tuple[type[BaseException], ...] = ()

    def __init__(
        self,
        spec: SweepSpec,
        writer: RunWriter,
        session: int,
        state: RunState,
        emit: EventSink,
        should_stop: Callable[[], str | None],
        interrupts: Interrupts,
    ):
        self.spec, self.writer, self.session, self.state = spec, writer, session, state
        self.emit, self.should_stop, self.interrupts = emit, should_stop, interrupts
        # generations the plan has left per case: what a failure skips, without listing it
        self.remaining = generations_left(spec, session, state)
        self.order = state.next_order
        self.outcome = SessionOutcome()
        self.backends: dict[str, Backend] = {}
        self.device_names: dict[str, str] = {}
        self.profiling = False  # the generation being run is a profiled one

    def backend(self, name: str) -> Backend:
        if name not in self.backends:
            self.backends[name] = get_backend(name)
            self.device_names[name] = self.backends[name].device_name()
        return self.backends[name]

    def record_errors(self, cases: list[Case], exc: BaseException, skipped: int) -> None:
        rows = [error_row(self.state.run_id, case, self.session, exc) for case in cases]
        with self.interrupts.deferred():
            self.writer.write_errors(rows)
        self.outcome.errors += len(rows)
        for case in cases:
            self.emit(error_event(self.session, case_dict(case), type(exc).__name__, str(exc)))
        self.emit({"event": "skip", "n": skipped})

    @property
    def progressed(self) -> bool:
        """Whether this call has written a measured trial or a profile, or a failed case."""
        return bool(self.outcome.measured or self.outcome.profiled or self.outcome.errors)

    def stop_reason(self, warming: bool = False) -> str | None:
        """Why to stop before the next load or generation (``None``: go on).

        A deadline waits for the case being warmed to get its first measured trial
        (warm-ups are useless to the next process) and for the call's first progress
        (else a slice that began late would measure nothing, and so would every rerun).
        """
        reason = self.should_stop()
        if reason == DEADLINE and (warming or not self.progressed):
            return None
        return reason

    def run(self, plan: Iterable[ScheduledTrial]) -> SessionOutcome:
        for load_key, items in itertools.groupby(plan, key=lambda t: t.case.load_key):
            reason = self.stop_reason()
            if reason:
                self.outcome.stopped = reason
                break
            if not self.run_group(load_key, items):
                break
        return self.outcome

    def run_group(self, load_key: tuple[Any, ...], items: Iterable[ScheduledTrial]) -> bool:
        model_name, backend_name, dtype, attn = load_key
        self.emit(
            {
                "event": "load",
                "session": self.session,
                "model": model_name,
                "backend": backend_name,
                "dtype": dtype,
                "attn_implementation": attn,
            }
        )
        backend: Backend | None = None
        try:
            backend = self.group_backend(backend_name)
            loaded = self.load(load_key, backend)
        except self.fatal:
            raise
        except Exception as exc:
            cases = [c for c, n in self.remaining.items() if n and c.load_key == load_key]
            self.record_errors(cases, exc, sum(self.remaining[c] for c in cases))
            self.release(backend)
            return True
        try:
            return self.run_trials(loaded, backend, items)
        finally:
            del loaded
            self.release(backend)

    def group_backend(self, name: str) -> Backend | None:
        """Return the backend a group's generations run on."""
        return self.backend(name)

    def load(self, load_key: tuple[Any, ...], backend: Any) -> Any:
        """Load what the group's generations run on (the model, on ``backend``)."""
        model_name, _, dtype, attn = load_key
        return models.load_model(
            model_name,
            dtype=dtype,
            device=backend,
            weights=self.spec.weights,
            seed=self.spec.seed,
            label=model_name,
            attn_implementation=attn,
        )

    @staticmethod
    def release(backend: Backend | None) -> None:
        """Free what a model or a failed generation left (it must not crowd the next)."""
        gc.collect()
        if backend is not None:
            backend.empty_cache()

    def run_trials(self, loaded: Any, backend: Any, items: Iterable[ScheduledTrial]) -> bool:
        prompts: dict[int, Any] = {}
        failed: set[Case] = set()
        remaining = self.remaining
        warming = False  # the last generation was a warm-up whose case is not yet measured
        for item in items:
            if item.case in failed:
                continue
            reason = self.stop_reason(warming)
            if reason:
                self.outcome.stopped = reason
                return False
            self.profiling = item.profiled
            measured = self.measure(loaded, backend, prompts, item, remaining[item.case])
            if measured is None:
                failed.add(item.case)
                warming = False
                # Only now, outside the except block whose traceback held the failed
                # generation's tensors, can they be freed.
                self.release(backend)
                continue
            remaining[item.case] -= 1
            if item.profiled:
                self.write_profile(item, loaded, *measured)
                continue
            self.write_trial(item, loaded, *measured)
            warming = item.warmup
        return True

    def measure(
        self,
        loaded: Any,
        backend: Any,
        prompts: dict[int, Any],
        item: ScheduledTrial,
        remaining: int,
    ) -> tuple[Any, dict[str, Any]] | None:
        """Run one generation; on failure record it (``remaining`` trials skipped).

        Returns the timing and what the row records besides it: memory counters and
        the SDPA kernels enabled while it ran.
        """
        case = item.case
        self.emit(
            {
                "event": "start",
                "session": self.session,
                "case": case_dict(case),
                "trial": item.trial,
                "warmup": item.warmup,
            }
        )
        try:
            return self.generate(loaded, backend, prompts, case)
        except self.fatal:
            raise
        except Exception as exc:
            self.record_errors([case], exc, remaining)
        return None

    def generate(
        self, loaded: Any, backend: Any, prompts: dict[int, Any], case: Case
    ) -> tuple[Any, dict[str, Any]]:
        """Run one generation of ``case``; return its timing and what the row adds."""
        if case.prompt_tokens not in prompts:
            prompts[case.prompt_tokens] = models.make_prompt(
                case.prompt_tokens, loaded.vocab_size, seed=self.spec.seed
            )
        slow = self.spec.slow_attention
        repeats = slow.factor_for(case.budget) if slow is not None else 1
        if repeats > 1 and loaded.attn_implementation != "sdpa":
            raise ValueError(
                f"slow_attention repeats scaled-dot-product attention, which this model does "
                f"not run (attn_implementation {loaded.attn_implementation!r}); give "
                "attn_implementation = 'sdpa'"
            )

        def run() -> Any:
            return engines.run_generation(
                loaded,
                backend,
                prompts[case.prompt_tokens],
                budget=case.budget,
                use_cache=case.use_cache,
                engine=self.spec.engine,
                instrument=self.spec.instrument,
                slowdown=self.injected_factor(case) or 1.0,
            )

        ops: dict[str, Any] = {}
        with allowed_sdpa_backends(self.spec.sdpa_backends), slowed_attention(repeats):
            sdpa = ",".join(enabled_sdpa_backends())
            if self.profiling:
                timing, ops["_ops"] = profiled(run, case.backend)
            else:
                timing = run()
        return timing, {**backend.memory(), "sdpa_backends": sdpa, **ops}

    def injected_factor(self, case: Case) -> float | None:
        """Return the slowdown injected into ``case`` (``None`` in a run without one)."""
        inject = self.spec.inject
        return inject.factor_for(case.budget) if inject is not None else None

    def trial_row(
        self,
        item: ScheduledTrial,
        loaded: Any,
        timing: Any,
        observed: dict[str, Any],
    ) -> dict[str, Any]:
        return {
            **case_dict(item.case),
            "run_id": self.state.run_id,
            "session": self.session,
            "device": self.device_names[item.case.backend],
            "engine": self.spec.engine,
            "trial": item.trial,
            "order": self.order,
            "warmup": item.warmup,
            "latency_s": timing.latency_s,
            "prefill_s": timing.prefill_s,
            "decode_s": timing.decode_s,
            "new_tokens": timing.new_tokens,
            **observed,
            "attn_implementation": loaded.attn_implementation,
            "rss_bytes": rss_bytes(),
            "instrumented": self.spec.instrument,
            "process_id": process_id(),
            "host": host_name(),
            "injected_factor": self.injected_factor(item.case),
        }

    @staticmethod
    def step_frame(item: ScheduledTrial, row: dict[str, Any], step_s: list[float]) -> pl.DataFrame:
        """Build the ``steps`` rows of one instrumented trial.

        The attention columns travel with the case keys: two implementations of one case
        share every other key, and their steps must not be mixed.
        """
        keys = ("run_id", "session", "device", "trial", "warmup", *_ATTENTION_COLUMNS)
        constants = {**case_dict(item.case), **{k: row.get(k) for k in keys}}
        return pl.DataFrame({"step": np.arange(len(step_s)), "step_s": step_s}).with_columns(
            pl.lit(value).alias(name) for name, value in constants.items()
        )

    def write_profile(
        self, item: ScheduledTrial, loaded: Any, timing: Any, observed: dict[str, Any]
    ) -> None:
        """Write one profiled generation's operators as one ``ops`` part (no trial row)."""
        constants = {
            **case_dict(item.case),
            "run_id": self.state.run_id,
            "session": self.session,
            "device": self.device_names[item.case.backend],
            "trial": item.trial,
            "attn_implementation": loaded.attn_implementation,
            "sdpa_backends": observed.get("sdpa_backends"),
            "latency_s": timing.latency_s,
            "process_id": process_id(),
            "host": host_name(),
        }
        frame = pl.DataFrame(observed["_ops"], infer_schema_length=None).with_columns(
            pl.lit(value).alias(name) for name, value in constants.items()
        )
        with self.interrupts.deferred():
            self.writer.write_ops(frame)
        self.outcome.profiled += 1
        self.emit(
            {
                "event": "profiled",
                "session": self.session,
                "case": case_dict(item.case),
                "trial": item.trial,
                "latency_s": timing.latency_s,
            }
        )

    def write_trial(
        self,
        item: ScheduledTrial,
        loaded: Any,
        timing: Any,
        observed: dict[str, Any],
    ) -> None:
        row = self.trial_row(item, loaded, timing, observed)
        with self.interrupts.deferred():
            # Trial before steps: a kill between the two loses one trial's step times,
            # whereas the other order would let a resume store them twice.
            self.writer.write_trials([row])
            if timing.step_s is not None:
                self.writer.write_steps(self.step_frame(item, row, timing.step_s))
        self.order += 1
        if item.warmup:
            self.outcome.warmups += 1
        else:
            self.outcome.measured += 1
        self.emit(
            {
                "event": "trial",
                "session": self.session,
                "case": case_dict(item.case),
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
    interrupts: Interrupts | None = None,
) -> SessionOutcome:
    """Run what is left of ``session`` in this process, writing each trial as it ends.

    ``should_stop`` is asked before each generation and each model load; a non-empty
    answer (e.g. ``"deadline"``) ends the session cleanly and is returned in
    :attr:`SessionOutcome.stopped`, except that ``"deadline"`` lets a case whose
    warm-ups have begun run its first measured trial, and waits for the call's first
    measured trial (or failed case). KeyboardInterrupt propagates
    after the last complete part is on disk.
    """
    state = RunState.read(writer)
    guard = interrupts or Interrupts()
    runner = _SessionRun(spec, writer, session, state, emit or ignore, should_stop, guard)
    return drive(runner, iter_plan(spec, session, state), own_interrupts=interrupts is None)


def drive(
    runner: _SessionRun, plan: Iterable[ScheduledTrial], *, own_interrupts: bool
) -> SessionOutcome:
    """Run ``plan`` with ``runner``, inside its interrupt guard when the call owns it."""
    if not own_interrupts:
        return runner.run(plan)
    with runner.interrupts:
        return runner.run(plan)
