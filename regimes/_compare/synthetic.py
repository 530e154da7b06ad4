"""Pairs of synthetic runs of one curve with a known change between them.

For the calibration of :func:`regimes.compare_runs` (``bench/compare_calibration.py``)
and its tests. Both runs are :func:`regimes.simulate_sweep` sweeps of the same smooth
curve (the same intercept and per-token cost) with independent noise, processes and
hiccups; a spike multiplies ``width`` consecutive budgets of a run by ``ratio``. Every
frame is labelled synthetic (``run_id`` ``synthetic-base-<seed>`` /
``synthetic-new-<seed>``, ``source`` ``synthetic``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import polars as pl

from regimes.data.simulate import simulate_sweep

__all__ = ["EXPECTED_STATUSES", "SCENARIOS", "SyntheticPair", "synthetic_pair"]

SCENARIOS: dict[str, str] = {
    "same": "the same spike in both runs",
    "noise": "no spike in either run",
    "shift": "no spike; the new run uniformly slower",
    "removed": "a spike in the base run only",
    "added": "a spike in the new run only",
    "moved": "the spike one grid step later in the new run",
}
"""Scenarios of :func:`synthetic_pair`, with what changes between the runs."""

EXPECTED_STATUSES: dict[str, list[str]] = {
    "same": ["persists"],
    "noise": [],
    "shift": [],
    "removed": ["vanished"],
    "added": ["appeared"],
    "moved": ["changed"],
}
"""The statuses :func:`regimes.compare_runs` should give each scenario's regimes."""


class SyntheticPair(NamedTuple):
    """Two synthetic runs and the truth: each run's spike (budgets) and the shift."""

    base: pl.DataFrame
    new: pl.DataFrame
    truth: dict[str, Any]


def synthetic_pair(
    scenario: str,
    *,
    seed: int = 0,
    n_budgets: int = 24,
    budget_step: int = 16,
    trials: int = 5,
    sessions: int = 2,
    session_design: str = "shared",
    ratio: float = 3.0,
    width: int = 2,
    shift: float = 1.10,
    cv: float = 0.05,
    session_cv: float = 0.05,
    hiccup_rate: float = 0.01,
) -> SyntheticPair:
    """Simulate a base and a new run of one curve under ``scenario`` (:data:`SCENARIOS`).

    Parameters
    ----------
    scenario : str
        What changes between the runs.
    seed : int, default 0
        Seeds the curve (intercept 0.02-0.2 s, 2-20 ms per token), the spike's place
        (its first budget at least three budgets from either end) and both runs' noise.
    n_budgets, budget_step : int, default 24, 16
        The grid ``budget_step * (1..n_budgets)``.
    trials, sessions : int, default 5, 2
        Trials per budget in each process; processes per run.
    session_design : str, default "shared"
        ``shared``: each process runs every budget; ``per_cell``: every budget gets its
        own ``sessions`` fresh processes (see :func:`regimes.simulate_sweep`).
    ratio, width : float, int, default 3.0, 2
        The spike: a factor over ``width`` consecutive budgets.
    shift : float, default 1.10
        The new run's factor in the ``shift`` scenario.
    cv, session_cv, hiccup_rate : float, default 0.05, 0.05, 0.01
        Trial noise, process effect (log-scale sd), share of 1.5-3x single-trial hiccups.

    Returns
    -------
    SyntheticPair
        ``base``, ``new`` trial tables and ``truth``: ``scenario``, ``base_span``,
        ``new_span`` (inclusive budgets, or ``None``) and ``shift``.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {tuple(SCENARIOS)}, got {scenario!r}")
    rng = np.random.default_rng(seed)
    grid = budget_step * np.arange(1, n_budgets + 1)
    first = int(rng.integers(3, n_budgets - 3 - width))  # room for a move of one step
    span = (int(grid[first]), int(grid[first + width - 1]))
    moved = (int(grid[first + 1]), int(grid[first + width]))
    spans = {
        "same": (span, span),
        "removed": (span, None),
        "added": (None, span),
        "moved": (span, moved),
    }.get(scenario, (None, None))
    common: dict[str, Any] = dict(
        budgets=grid.tolist(),
        trials=trials,
        sessions=sessions,
        session_design=session_design,
        cv=cv,
        session_cv=session_cv,
        hiccup_rate=hiccup_rate,
        intercept_s=float(rng.uniform(0.02, 0.2)),
        per_token_s=float(rng.uniform(0.002, 0.02)),
    )
    factor = shift if scenario == "shift" else 1.0
    runs = []
    for name, own, scale in (("base", spans[0], 1.0), ("new", spans[1], factor)):
        trials_frame = simulate_sweep(1, seed=int(rng.integers(2**31)), **common).trials
        runs.append(
            _with_spike(trials_frame, own, ratio, scale).with_columns(
                pl.lit(f"synthetic-{name}-{seed}").alias("run_id")
            )
        )
    truth = {"scenario": scenario, "base_span": spans[0], "new_span": spans[1], "shift": factor}
    return SyntheticPair(runs[0], runs[1], truth)


def _with_spike(
    trials: pl.DataFrame, span: tuple[int, int] | None, ratio: float, scale: float
) -> pl.DataFrame:
    factor = pl.lit(scale)
    if span is not None:
        factor = pl.when(pl.col("budget").is_between(*span)).then(scale * ratio).otherwise(scale)
    return trials.with_columns(pl.col("latency_s") * factor)
