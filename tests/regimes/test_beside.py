"""Readings of the level beside a regime: a step after it, an adjacent regime's level.

Curves built by hand on one grid; the coverage these readings give is measured in
``bench/accuracy.py`` ("neighbours: 3x spike then 1.6x step").
"""

from __future__ import annotations

import math

import numpy as np

from regimes._stats.intervals import interval_index
from regimes._stats.scan import RowFit, refit_with
from regimes._stats.smoother import smoother_for
from regimes.detect._beside import beside_spans
from regimes.detect._regimes import as_tested

T = 24
SM = smoother_for(np.log(16.0 * np.arange(1, T + 1)))
UP = ("up", math.log(1.25), 0.05, 0.95)
SPIKE, STEP, SPIKE_AT, STEP_AT = math.log(3.0), math.log(1.6), (8, 9), 10


def _fit(levels: np.ndarray, which: int, *pairs: tuple[int, int]) -> RowFit:
    """The model of ``levels`` on smoother ``which`` with the regimes ``pairs``, as tested."""
    index = interval_index(T)
    chosen = np.array([[index[p] for p in pairs] + [-1] * (4 - len(pairs))])
    fit = refit_with(levels, SM, np.array([which]), chosen)
    return as_tested(fit, levels, SM, np.zeros(1), "up", UP[1], UP[2])


def _curve(step: float, seed: int = 1) -> np.ndarray:
    """A straight trend in log budget, a 3x spike over two cells, ``step`` after them."""
    u = np.log(16.0 * np.arange(1, T + 1))
    levels = 0.5 * u + 0.01 * np.random.default_rng(seed).standard_normal(T)
    levels[SPIKE_AT[0] : SPIKE_AT[1] + 1] += SPIKE
    levels[STEP_AT:] += step
    return levels[None, :]


def _flexible() -> int:
    """An unhinged smoother of four degrees of freedom: flexible enough to take a step in."""
    return int(np.argmin(np.where(SM.hinged, np.inf, np.abs(SM.edf - 4.0))))


def test_a_step_the_trend_took_in_is_read_after_the_spike() -> None:
    levels = _curve(STEP)
    fit = _fit(levels, _flexible(), SPIKE_AT)
    (span,) = beside_spans(levels, fit, [0], np.zeros(1), SM, UP)[0]
    # the model measures the spike against a trend that rises through it: short of 3x;
    # the reading with the step after it measures it against the level it leaves
    assert fit.delta[0, 0] < SPIKE - 0.1
    assert span is not None and span[0] <= SPIKE <= span[1]


def test_a_spike_on_a_smooth_trend_has_no_other_reading() -> None:
    levels = _curve(0.0)
    fit = _fit(levels, _flexible(), SPIKE_AT)
    assert beside_spans(levels, fit, [0], np.zeros(1), SM, UP) == [[None]]


def test_a_dip_the_model_put_before_the_spike_is_its_baseline_in_one_reading() -> None:
    # the trend at the step's level and the cells before the spike a dip under it
    levels = _curve(STEP)
    fit = _fit(levels, 0, (2, SPIKE_AT[0] - 1), SPIKE_AT)
    spans = beside_spans(levels, fit, [0], np.zeros(1), SM, UP)[0]
    spike = spans[1]
    contrast = float(fit.coef[0, 1] - fit.coef[0, 0])
    assert fit.delta[0, 1] < SPIKE - 0.3
    assert spike is not None and spike[0] <= contrast <= spike[1]
    assert spike[0] <= SPIKE <= spike[1]
    # in both directions the dip is a regime the call may report, not a baseline
    both = ("both", *UP[1:])
    alone = beside_spans(levels, fit, [0], np.zeros(1), SM, both)[0][1]
    assert alone is None or not alone[0] <= contrast <= alone[1]
