"""The trend's roughness penalty is the discrete integral of its squared curvature.

Every curve here is synthetic: log-normal trials around a latency linear in the budget,
on a linear grid, whose first budget lies ``log 2`` from the second in ``u = log x``.
"""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl

from regimes import RegimesWarning, detect_regimes
from regimes._stats.smoother import _second_differences


def test_the_penalty_of_a_parabola_is_its_integral_of_squared_curvature() -> None:
    # g = u^2 has g'' = 2 everywhere: the penalty is 4 times the span of u its second
    # differences cover, on any spacing (here the log of a linear grid: uneven)
    u = np.log(16.0 * np.arange(1, 25))
    u = (u - u[0]) / (u[-1] - u[0])
    h = np.diff(u)
    penalty = float(np.sum((_second_differences(u) @ u**2) ** 2))
    covered = float(np.sum(0.5 * (h[:-1] + h[1:])))
    assert np.isclose(penalty, 4.0 * covered, rtol=1e-12)


def test_a_unit_kink_costs_less_where_the_grid_is_sparse() -> None:
    # a slope change of one at a cell spread over the span about it: its cost is two
    # over that span, the integral's, not the square of its divided difference
    u = np.log(16.0 * np.arange(1, 25))
    u = (u - u[0]) / (u[-1] - u[0])
    d = _second_differences(u)
    costs = []
    for k in (1, 20):
        kink = np.maximum(0.0, u - u[k])
        costs.append(float(np.sum((d @ kink) ** 2)))
        assert np.isclose(costs[-1], 2.0 / (u[k + 1] - u[k - 1]), rtol=1e-9)
    assert costs[0] < costs[1]


def _curve(seed: int, ratio: float) -> pl.DataFrame:
    """One synthetic curve: 24 budgets 16..384, 5 trials of 5 % noise, its first budget slow."""
    rng = np.random.default_rng(seed)
    budgets = 16 * np.arange(1, 25)
    log_mu = np.log(0.05 + 0.004 * budgets)
    log_mu[0] += np.log(ratio)
    cell = np.repeat(np.arange(24), 5)
    return pl.DataFrame(
        {
            "run_id": "synthetic",
            "model": f"synthetic-{seed}",
            "session": 0,
            "budget": budgets[cell],
            "trial": np.tile(np.arange(5), 24),
            "latency_s": np.exp(log_mu[cell] + rng.normal(0.0, 0.05, cell.size)),
        }
    )


def test_a_slow_first_budget_is_not_taken_in_by_the_trend() -> None:
    # unweighted, a bend between the first two cells cost what one between the last two
    # cost, over about twenty times the span of u: flexible trends bent to the first
    # budget and took a 2.5x spike in (9 of 20 found; 20 of 20 weighted)
    found = 0
    for seed in range(20):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RegimesWarning)
            rows = detect_regimes(_curve(seed, 2.5)).anomalies
        found += rows.filter(pl.col("start") == 16).height
    assert found >= 18
