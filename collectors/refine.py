"""The probe collector of :func:`regimes.refine_boundaries`: budgets measured into the run.

:func:`run_prober` returns the callable that ``refine_boundaries`` calls once per round
with the round's :class:`regimes.refine.ProbeRequest` list. It measures the requested
budgets with the run's own spec in fresh sessions (:func:`collectors.sweep.collect_budgets`:
numbered after every session the run has, recorded in ``meta.json`` before their first
trial, every trial written atomically as it ends), and returns the rows it added. A
crash loses at most the generation in flight; ``regimes refine RUN`` again reads what is
on disk and continues.

``collect_budgets`` measures every case of the spec at the budgets it is given, so a
run of several cases (models, cache settings, prompt lengths) measures each probed
budget for all of them; the extra trials are evidence for those curves' own boundaries.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from regimes.data.io import read_run

from .spec import SpecError
from .sweep import collect_budgets

__all__ = ["RunProber", "run_prober"]


class RunProber:
    """Measure probe requests into a run directory (see the module docstring).

    Parameters
    ----------
    run_dir : str or os.PathLike
        An existing run made by ``regimes collect``.
    progress : bool, default False
        Show the collector's progress bar.

    Attributes
    ----------
    warmup : int
        Warm-ups per case and fresh session (the run's), which ``refine_boundaries``
        counts against ``max_generations`` before it asks.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, progress: bool = False):
        self.run_dir = Path(run_dir)
        spec = read_run(self.run_dir).meta.get("spec") or {}
        if "budgets" not in spec:
            raise SpecError(f"{str(self.run_dir)!r} holds a run without a readable sweep spec")
        self.warmup = int(spec.get("warmup", 1))
        self.progress = progress

    def __call__(self, requests: Sequence[Any]) -> pl.DataFrame:
        """Measure ``requests`` in fresh sessions; return the trial rows they added.

        Requests asking for the same number of trials share one session.
        """
        before = _last_order(self.run_dir)
        by_trials: dict[int, set[int]] = {}
        for request in requests:
            by_trials.setdefault(int(request.trials), set()).add(int(request.budget))
        for trials, budgets in sorted(by_trials.items()):
            result = collect_budgets(
                self.run_dir, sorted(budgets), trials=trials, progress=self.progress
            )
            if result.status == "interrupted":
                # everything measured is on disk; the caller stops, a rerun continues
                raise KeyboardInterrupt("probe collection interrupted")
            if result.status != "complete":
                break  # a failed session: the rows it wrote are returned all the same
        trials_table = read_run(self.run_dir).trials
        return trials_table.filter(pl.col("order") > before)


def _last_order(run_dir: Path) -> int:
    trials = read_run(run_dir).trials
    if trials.height == 0:
        return -1
    return int(trials.get_column("order").max())  # type: ignore[arg-type]


def run_prober(run_dir: str | os.PathLike[str], *, progress: bool = False) -> RunProber:
    """Return the probe collector of a run directory for :func:`regimes.refine_boundaries`.

    Parameters
    ----------
    run_dir : str or os.PathLike
        An existing run made by ``regimes collect``.
    progress : bool, default False
        Show the collector's progress bar.

    Returns
    -------
    RunProber
        ``prober(requests) -> polars.DataFrame`` of the rows it added (warm-ups
        included).

    Raises
    ------
    SpecError
        ``run_dir`` holds no readable sweep spec.

    See Also
    --------
    regimes.refine_boundaries : the sequential design that decides what to probe.
    collectors.sweep.collect_budgets : budgets measured in fresh sessions of a run.
    """
    return RunProber(run_dir, progress=progress)
