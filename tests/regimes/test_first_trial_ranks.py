"""The first-trial test ranks each process's first trial among its cell's trials."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from regimes.detect._trials import _first_trials, _rank_sum_p


def test_the_exact_rank_sum_law():
    # two processes of three trials: the sum of ranks 6 has probability 1/9, 5 or more 3/9
    assert _rank_sum_p(np.array([3, 3]), np.array([3, 3])) == pytest.approx(1 / 9)
    assert _rank_sum_p(np.array([3, 2]), np.array([3, 3])) == pytest.approx(3 / 9)
    assert _rank_sum_p(np.array([1, 1]), np.array([3, 3])) == pytest.approx(1.0)
    many = np.full(200, 3)
    assert _rank_sum_p(np.full(200, 2), many) == pytest.approx(0.5, abs=0.03)


def _sweep(processes: int, trials: int, first: float, seed: int = 0) -> pl.DataFrame:
    """Processes spanning a blocked sweep of 8 cells: each process's first trial at cell 1."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(processes):
        order = 0
        for x in range(1, 9):
            for t in range(trials):
                slow = np.log(first) if (x == 1 and t == 0) else 0.0
                rows.append((0, float(x), s, order, float(np.log(x) + slow + rng.normal(0, 0.03))))
                order += 1
    return pl.DataFrame(rows, schema=["_curve", "_x", "_session", "order", "_ly"], orient="row")


def test_four_processes_with_slow_first_trials_are_enough():
    # a sign test over four processes cannot go below 1/16; their ranks reach 7**-4
    kept, table = _first_trials(_sweep(4, 7, 3.0), "order")
    row = table.row(0, named=True)
    assert row["dropped"] and row["n_dropped"] == 4 and row["p_value"] < 1e-3
    assert kept.height == 4 * 8 * 7 - 4


def test_first_trials_like_the_rest_are_kept():
    kept, table = _first_trials(_sweep(4, 7, 1.0), "order")
    assert not table.row(0, named=True)["dropped"] and kept.height == 4 * 8 * 7
