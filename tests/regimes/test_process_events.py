"""The process and trial deviations the detection bootstrap draws (regimes.detect._trials).

A process's own deviation is what it adds to the shift its cell's processes share: two
slow processes of three keep their whole excess, three slow together (a regime) keep none;
a trial's, what it adds to its process's and the shift its cell's trials share.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from regimes.detect._draws import _middle_draws, median_draws
from regimes.detect._regimes import classes_on, width_class
from regimes.detect._trials import resampled, residual_pools, with_cell_ids

SLOW = float(np.log(2.5))


def _frame(levels: list[list[float]], trials: int = 4, seed: int = 0) -> pl.DataFrame:
    """One curve: cell ``t`` measured in ``len(levels[t])`` processes at those log levels."""
    rng = np.random.default_rng(seed)
    rows = []
    for x, cell in enumerate(levels):
        for s, level in enumerate(cell):
            noise = rng.normal(0.0, 0.01, trials)
            rows += [(0, float(x + 1), s, level + e - noise.mean()) for e in noise]
    return with_cell_ids(
        pl.DataFrame(rows, schema=["_curve", "_x", "_session", "_adj"], orient="row")
    )


def _events(levels: list[list[float]]) -> np.ndarray:
    pools = residual_pools(_frame(levels))[0]
    return resampled(pools, np.zeros(len(levels)))[0]


def test_two_slow_processes_of_three_keep_their_whole_excess():
    events = _events([[0.0, SLOW, SLOW], [0.0, 0.0, 0.0]])
    assert events.size == 6
    assert np.count_nonzero(events) == 2
    assert events[-2:] == pytest.approx([SLOW, SLOW], abs=0.02)


def test_processes_slow_together_are_a_shift_of_their_cell_not_their_own():
    # a regime (every process slower), and a cell the trend misses by 20 % in every process
    events = _events([[SLOW, SLOW, SLOW], [0.2, 0.2, 0.2], [0.0, 0.0, 0.0]])
    assert np.abs(events).max() < 0.05


def test_a_process_beyond_its_cells_shared_shift_keeps_what_it_adds():
    events = _events([[SLOW, SLOW, 2 * SLOW], [0.0, 0.0, 0.0]])
    assert np.count_nonzero(events) == 1 and events[-1] == pytest.approx(SLOW, abs=0.02)


def test_cells_measured_in_one_process_have_no_process_deviation():
    events = _events([[SLOW], [0.0], [0.0, 0.0]])
    assert events.size == 2 and not events.any()


def _trial_frame(cells: list[list[float]]) -> pl.DataFrame:
    """One curve in one process: cell ``t`` holds trials at the log times ``cells[t]``."""
    rows = [(0, float(x + 1), 0, v) for x, cell in enumerate(cells) for v in cell]
    return with_cell_ids(
        pl.DataFrame(rows, schema=["_curve", "_x", "_session", "_adj"], orient="row")
    )


def test_a_hiccup_in_a_cell_of_two_keeps_its_whole_excess():
    # centred on their cell's mean, the hiccup would keep half and its partner the
    # other half, negated: a draw could never rebuild a cell as slow as this one
    hiccup = float(np.log(2.7))
    pools = residual_pools(_trial_frame([[0.0, hiccup], [0.01, -0.01], [-0.02, 0.02]]))[0]
    residuals = resampled(pools, np.zeros(3))[1]
    assert residuals.size == 6
    assert residuals[-1] == pytest.approx(hiccup)
    assert residuals[0] == pytest.approx(-0.02)


def test_trials_slow_together_are_a_shift_of_their_cell_not_their_own():
    pools = residual_pools(_trial_frame([[SLOW + 0.01, SLOW, SLOW + 0.02], [0.0, 0.01, -0.01]]))[0]
    residuals = resampled(pools, np.zeros(2))[1]
    assert np.abs(residuals).max() == pytest.approx(0.02)


@pytest.mark.parametrize(("width", "cls"), [(1, 0), (2, 1), (3, 1), (4, 2), (40, 2)])
def test_regimes_are_compared_within_their_width_class(width, cls):
    assert int(width_class(np.array(width))) == cls


@pytest.mark.parametrize(("cells", "classes"), [(4, 1), (5, 2), (6, 2), (7, 3), (60, 3)])
def test_a_grid_holds_the_classes_its_widest_regime_reaches(cells, classes):
    # a regime leaves three cells outside it
    assert classes_on(cells) == classes


@pytest.mark.parametrize("trials", [[4, 4, 4, 4], [4, 3, 5, 4]])
def test_the_drawn_levels_are_each_cells_median_of_its_drawn_trials(trials: list[int]):
    # as many trials in every cell, or not: the draws are laid out by cell either way
    rng = np.random.default_rng(3)
    rows = [
        (0, float(x + 1), s, float(v))
        for x, n in enumerate(trials)
        for s in range(2)
        for v in rng.normal(0.0, 0.1, n)
    ]
    frame = pl.DataFrame(rows, schema=["_curve", "_x", "_session", "_adj"], orient="row")
    pools = residual_pools(with_cell_ids(frame))[0]
    trend = np.zeros(len(trials))
    medians, var = median_draws(pools, len(trials), trend, 50, np.random.default_rng(7))
    # the same draws, replayed, and each cell's median taken on its own
    replay = np.random.default_rng(7)
    events, residuals = resampled(pools, trend)
    total = int(pools.block_size.sum())
    values = residuals[replay.integers(0, residuals.size, size=(50, total))]
    if events.size >= 2:
        effect = events[replay.integers(0, events.size, size=(50, pools.block_size.size))]
        values += np.repeat(effect, pools.block_size, axis=1)
    cell_of = np.repeat(pools.block_cell, pools.block_size)
    expected = np.stack([np.median(values[:, cell_of == c], axis=1) for c in range(4)], axis=1)
    expected -= expected.mean(axis=0)
    assert medians == pytest.approx(expected, abs=1e-12)
    assert var == pytest.approx(expected.var(axis=0), abs=1e-12)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_a_cells_drawn_median_has_the_law_of_its_resampled_trials_median(n: int):
    # the middle order statistics of n indices drawn with replacement from 0..N-1: the
    # a-th is at most j with the chance that Binomial(n, (j + 1) / N) reaches a
    pool = np.arange(23, dtype=float)
    lo, hi = _middle_draws(pool, np.array([n]), 20_000, np.random.default_rng(n))
    j = np.arange(pool.size)
    for drawn, rank in ((lo[:, 0], (n - 1) // 2 + 1), (hi[:, 0], n // 2 + 1)):
        law = stats.binom.sf(rank - 1, n, (j + 1) / pool.size)
        seen = (drawn[:, None] <= j[None, :]).mean(axis=0)
        assert np.abs(seen - law).max() < 0.015
    # and the two together, as a sort of every drawn trial gives them
    trials = np.sort(np.random.default_rng(99).integers(0, pool.size, (20_000, n)), axis=1)
    gap = trials[:, n // 2] - trials[:, (n - 1) // 2]
    assert np.mean(hi - lo) == pytest.approx(np.mean(gap), abs=0.1)
