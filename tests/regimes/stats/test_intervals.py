"""How a fit's intervals are written: steps from the normal level, peaks side by side."""

from __future__ import annotations

import numpy as np
import pytest

from regimes._stats.intervals import as_steps, candidate_intervals, side_by_side, slow_starts
from regimes._stats.scan import RowFit, fit_rows, selection_threshold
from regimes._stats.smoother import smoother_for
from regimes.detect._regimes import mean_levels

T = 30


def _index(*pairs: tuple[int, int]) -> np.ndarray:
    starts, ends = candidate_intervals(T)
    where = {(int(a), int(b)): k for k, (a, b) in enumerate(zip(starts, ends, strict=True))}
    return np.array([[where[p] for p in pairs] + [-1] * (4 - len(pairs))])


def _pairs(chosen: np.ndarray) -> list[tuple[int, int]]:
    starts, ends = candidate_intervals(T)
    return [(int(starts[k]), int(ends[k])) for k in chosen[0] if k >= 0]


def test_an_interval_from_the_first_cell_is_written_as_the_step_after_it():
    assert _pairs(as_steps(_index((0, 9), (0, 1), (12, 14)), T)) == [(10, 29), (0, 1), (12, 14)]


def test_no_long_interval_starts_at_the_second_cell():
    starts, ends = candidate_intervals(T)
    from_second = {int(e) for s, e in zip(starts, ends, strict=True) if s == 1}
    # one or two cells there may be a spike; a longer regime is one from the first cell,
    # unless that one leaves too few cells outside it
    assert from_second == {1, 2, T - 3}
    assert {int(e) for s, e in zip(starts, ends, strict=True) if s == 0} == set(range(T - 3))


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        # a down-step from the fourth cell: the first three were slow
        (-0.4, [(0, 2), (12, 14)]),
        # a step up from the fourth cell: the first three were fast, the step stays
        (0.4, [(3, 29), (12, 14)]),
    ],
)
def test_a_slow_start_of_three_cells_is_read_as_such(delta, expected):
    chosen = _index((3, 29), (12, 14))
    assert _pairs(slow_starts(chosen, np.array([[delta, 0.5, np.nan, np.nan]]), T)) == expected
    # on six cells the rest is no longer than the start: the step stays
    starts, ends = candidate_intervals(6)
    step = int(np.flatnonzero((starts == 3) & (ends == 5))[0])
    assert slow_starts(np.array([[step]]), np.array([[-0.4]]), 6)[0, 0] == step


@pytest.mark.parametrize(
    ("pairs", "delta", "expected"),
    [
        # a spike at a step's onset, higher than the step: side by side
        ([(5, 29), (5, 7)], [0.5, 0.6], [(8, 29), (5, 7)]),
        # the same at a plateau's end, either order
        ([(14, 18), (5, 18)], [0.7, 0.4], [(14, 18), (5, 13)]),
        # a stair: the nested level lies between the trend and the plateau
        ([(5, 20), (5, 7)], [2.4, -0.3], [(5, 20), (5, 7)]),
        # a stair over most of the regime: a spike before a step, side by side
        ([(5, 29), (7, 29)], [0.9, -0.5], [(5, 6), (7, 29)]),
        # strictly inside: nested, whatever its level
        ([(5, 20), (8, 12)], [0.5, 1.0], [(5, 20), (8, 12)]),
        # a dip at a down-step's onset passes both neighbours too
        ([(5, 29), (5, 7)], [-0.5, -0.4], [(8, 29), (5, 7)]),
    ],
)
def test_a_peak_at_an_end_of_its_enclosing_regime_is_written_beside_it(pairs, delta, expected):
    chosen = _index(*pairs)
    d = np.array([delta + [np.nan] * (4 - len(delta))])
    assert _pairs(side_by_side(chosen, d, T)) == expected


def _spike_then_step(rng: np.random.Generator, rows: int) -> np.ndarray:
    u = np.log(16.0 * np.arange(1, T + 1))
    levels = 0.8 * u + rng.normal(0.0, 0.02, size=(rows, T))
    levels[:, 10:13] += np.log(3.0)
    levels[:, 13:] += np.log(1.6)
    return levels


def test_a_spike_before_a_step_is_measured_against_the_trend():
    rng = np.random.default_rng(4)
    levels = _spike_then_step(rng, 20)
    sm = smoother_for(np.log(16.0 * np.arange(1, T + 1)))
    fit = fit_rows(levels, sm, selection_threshold(T, 2.0), 4)
    starts, ends = candidate_intervals(T)
    for row in range(levels.shape[0]):
        found = {
            (int(starts[c]), int(ends[c])): float(np.exp(fit.delta[row, j]))
            for j, c in enumerate(fit.chosen[row])
            if c >= 0
        }
        assert found.get((10, 12)) == pytest.approx(3.0, rel=0.1), found
        assert found.get((13, 29)) == pytest.approx(1.6, rel=0.1), found


def _final(levels: np.ndarray, chosen: np.ndarray, apart: bool = False) -> RowFit:
    """The fit of ``chosen`` on a fixed smoother, each regime's level its mean."""
    from regimes._stats.final_fit import final_rows
    from regimes._stats.intervals import interval_indicators
    from regimes._stats.stack import stacked as _stacked

    sm = smoother_for(np.log(16.0 * np.arange(1, T + 1)))
    st = _stacked(sm.residual[2:3], np.array([-1]), candidate_intervals(T), interval_indicators(T))
    one = np.zeros(levels.shape[0], dtype=np.int64)
    rows = np.repeat(chosen, levels.shape[0], axis=0)
    delta, se, sigma, df, trend, cov = final_rows(levels, st, one, rows)
    fit = RowFit(rows, delta, se, sigma, df, one, trend, delta, cov)
    return mean_levels(fit, T, np.full(rows.shape, apart))


def _fitted(levels: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    fit = _final(levels, chosen)
    starts, ends = candidate_intervals(T)
    out = fit.trend.copy()
    for j, c in enumerate(chosen[0]):
        if c >= 0:
            out[:, starts[c] : ends[c] + 1] += fit.coef[:, j, None]
    return out


def test_a_stair_inside_a_regime_is_part_of_its_level():
    # a plateau of 2.0 over cells 10..19 whose first two cells stand at 1.5: one regime,
    # whose level is its mean over all ten cells; the coefficient is the other eight's
    levels = np.zeros((1, T))
    levels[0, 10:20] = 2.0
    levels[0, 10:12] = 1.5
    fit = _final(levels, _index((10, 19), (10, 11)))
    assert fit.coef[0, :2] == pytest.approx([2.0, -0.5], abs=1e-9)
    assert fit.delta[0, 0] == pytest.approx(1.9, abs=1e-9)
    # the mean over ten cells rests on more of them than the level of the eight alone
    assert fit.se_unit[0, 0] < _final(levels, _index((12, 19))).se_unit[0, 0]


@pytest.mark.parametrize(("apart", "step"), [(True, 0.5), (False, 0.5 + 2 / 20)])
def test_a_regime_nested_in_another_counts_in_its_level_unless_apart(apart, step):
    # a step of 0.5 from cell 10 with a spike 1.0 over it at 15..16: a spike measured
    # apart is left out of the step's level; one counted in makes it the step's mean
    levels = np.zeros((1, T))
    levels[0, 10:] = 0.5
    levels[0, 15:17] = 1.5
    fit = _final(levels, _index((10, 29), (15, 16)), apart)
    assert fit.coef[0, :2] == pytest.approx([0.5, 1.0], abs=1e-9)
    assert fit.delta[0, :2] == pytest.approx([step, 1.0], abs=1e-9)


def test_writing_the_intervals_leaves_the_fit_as_it_was():
    levels = _spike_then_step(np.random.default_rng(5), 1)
    nested, beside = _index((10, 29), (10, 12)), _index((13, 29), (10, 12))
    steps = _index((0, 9), (10, 12))
    np.testing.assert_allclose(_fitted(levels, nested), _fitted(levels, beside), atol=1e-10)
    np.testing.assert_allclose(_fitted(levels, steps), _fitted(levels, beside), atol=1e-10)


def test_a_regime_that_only_overlaps_another_stays_out_of_its_level():
    # a plateau of 2.0 over 10..19 and a regime of 0.3 over 15..22: the plateau's level
    # is its coefficient, the level of its cells the other regime leaves
    levels = np.zeros((1, T))
    levels[0, 10:20] = 2.0
    levels[0, 15:23] += 0.3
    fit = _final(levels, _index((10, 19), (15, 22)))
    np.testing.assert_allclose(fit.delta[0, :2], fit.coef[0, :2], atol=0.0)
    assert fit.coef[0, :2] == pytest.approx([2.0, 0.3], abs=1e-9)
