"""The first-trial test ranks each process's first trial among its own trials.

Each trial is measured from the median of its cell's other trials, and ranked within its
process.
"""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest

from regimes.detect._trials import _first_trials, _rank_sum_p, _subset_sum_law, with_cell_ids


def test_the_exact_rank_sum_law():
    # two cells of three trials, one first trial each: a rank sum of 6 has probability
    # 1/9, of 5 or more 3/9
    one = np.array([1, 1])
    assert _rank_sum_p(6, np.array([3, 3]), one) == pytest.approx(1 / 9)
    assert _rank_sum_p(5, np.array([3, 3]), one) == pytest.approx(3 / 9)
    assert _rank_sum_p(2, np.array([3, 3]), one) == pytest.approx(1.0)
    # two first trials among four: their rank sums 3, 4, 5, 5, 6, 7 are equally likely
    assert _rank_sum_p(7, np.array([4]), np.array([2])) == pytest.approx(1 / 6)
    assert _rank_sum_p(5, np.array([4]), np.array([2])) == pytest.approx(4 / 6)
    # beyond the exact range, the normal law: half the mass above the mean
    assert _rank_sum_p(400, np.full(200, 3), np.ones(200)) == pytest.approx(0.5, abs=0.03)


def test_the_law_matches_counting_every_subset():
    law = _subset_sum_law(7, 3)
    sums = [sum(c) for c in itertools.combinations(range(1, 8), 3)]
    counted = np.bincount(np.array(sums) - 6, minlength=law.size) / len(sums)
    assert law == pytest.approx(counted)


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
    frame = pl.DataFrame(rows, schema=["_curve", "_x", "_session", "order", "_ly"], orient="row")
    return with_cell_ids(frame.sort("_curve", "_x", "_session"))


def test_four_processes_with_slow_first_trials_are_enough():
    # a sign test over four processes cannot go below 1/16; their ranks reach 7**-4
    kept, table = _first_trials(_sweep(4, 7, 3.0), "order")
    row = table.row(0, named=True)
    assert row["dropped"] and row["n_dropped"] == 4 and row["p_value"] < 1e-3
    assert kept.height == 4 * 8 * 7 - 4


def test_first_trials_like_the_rest_are_kept():
    kept, table = _first_trials(_sweep(4, 7, 1.0), "order")
    assert not table.row(0, named=True)["dropped"] and kept.height == 4 * 8 * 7


def test_two_trial_processes_spanning_a_blocked_sweep_are_tested_across_it():
    # five processes of two trials over eight cells: each first trial ranks 16 of its
    # process's 16 (among its first cell's ten trials alone, five first trials could
    # not go below 1/252)
    kept, table = _first_trials(_sweep(5, 2, 3.0), "order")
    row = table.row(0, named=True)
    assert row["dropped"] and row["n_dropped"] == 5
    assert row["p_value"] == pytest.approx(16.0**-5)
    assert kept.height == 5 * 8 * 2 - 5


def test_three_processes_whose_first_trials_share_the_first_budget_are_enough():
    # ranked within their cell, three first trials of six reach 1/20 at best, and a
    # blocked sweep of three processes kept its slow first budget (family mixed)
    kept, table = _first_trials(_sweep(3, 2, 3.0), "order")
    row = table.row(0, named=True)
    assert row["dropped"] and row["p_value"] == pytest.approx(16.0**-3)
    assert kept.height == 3 * 8 * 2 - 3


def test_without_a_first_trial_effect_the_test_holds_its_level():
    # each trial against the median of its cell's others: with its own value in that
    # median, a trial sits nearer it than a first trial does, and three processes'
    # first trials fell under 0.01 in 0.03 of sweeps
    tables = [_first_trials(_sweep(3, 2, 1.0, seed), "order")[1] for seed in range(300)]
    p = np.array([table["p_value"][0] for table in tables])
    assert np.mean(p < 0.01) <= 0.02 and np.mean(p < 0.05) <= 0.07


def test_a_cell_that_would_keep_one_trial_is_not_tested():
    # one process of two trials per cell: leaving its first trial out keeps one
    kept, table = _first_trials(_sweep(1, 2, 3.0), "order")
    assert table.height == 0 and kept.height == 8 * 2


def test_first_trials_of_one_process_are_one_stratum():
    # without ``order``, each cell's trial 0 is a first trial: one process's two first
    # trials, ranked 5 and 6 of its six, are a 2-subset of 1..6 (1/15), not two draws
    rows = [
        (0, float(x), 0, t, float(np.log(x) + (0.5 if t == 0 else 0.01 * t)))
        for x in (1, 2)
        for t in range(3)
    ]
    frame = pl.DataFrame(rows, schema=["_curve", "_x", "_session", "trial", "_ly"], orient="row")
    _, table = _first_trials(with_cell_ids(frame), "trial")
    row = table.row(0, named=True)
    assert row["n_processes"] == 1 and row["p_value"] == pytest.approx(1 / 15)
