"""A regime's ratio is its mean over its cells, less those of nested regimes reported apart;
a regime that could not be reported is no part of the model of one it overlaps partly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from regimes._stats.final_fit import final_rows
from regimes._stats.intervals import candidate_intervals, interval_indicators
from regimes._stats.scan import RowFit
from regimes._stats.smoother import smoother_for
from regimes._stats.stack import stacked as _stacked
from regimes.detect._regimes import as_tested

T = 30


def _index(*pairs: tuple[int, int]) -> np.ndarray:
    starts, ends = candidate_intervals(T)
    where = {(int(a), int(b)): k for k, (a, b) in enumerate(zip(starts, ends, strict=True))}
    return np.array([[where[p] for p in pairs] + [-1] * (4 - len(pairs))])


SM = smoother_for(np.log(16.0 * np.arange(1, T + 1)))


def _fit(levels: np.ndarray, *pairs: tuple[int, int]) -> RowFit:
    """The model of ``levels`` on the stiffest smoother with the regimes ``pairs``."""
    st = _stacked(SM.residual[:1], np.array([-1]), candidate_intervals(T), interval_indicators(T))
    one = np.zeros(1, dtype=np.int64)
    chosen = _index(*pairs)
    delta, se, sigma, df, trend, cov = final_rows(levels, st, one, chosen)
    return RowFit(chosen, delta, se, sigma, df, one, trend, delta, cov)


def _noise() -> np.ndarray:
    return 0.01 * np.random.default_rng(0).standard_normal((1, T))


def _tested(height: float, direction: str = "up") -> RowFit:
    """A 1.65x step from cell 10 with a regime of ``height`` (log) over it at 15..16."""
    levels = _noise()
    levels[0, 10:] += 0.5
    levels[0, 15:17] += height
    fit = _fit(levels, (10, 29), (15, 16))
    return as_tested(fit, levels, SM, np.zeros(1), direction, math.log(1.25), 0.05)


def test_a_nested_regime_that_could_be_reported_is_left_out_of_the_level_around_it():
    # 1.0 over the step: a 2.7x peak, beyond 1.25x with a tiny standard error
    fit = _tested(1.0)
    assert fit.delta[0, 0] == pytest.approx(fit.coef[0, 0], abs=1e-12)
    assert fit.delta[0, 0] == pytest.approx(0.5, abs=0.02)


@pytest.mark.parametrize(("height", "direction"), [(0.1, "up"), (-0.2, "up"), (0.1, "both")])
def test_a_nested_regime_that_could_never_be_reported_counts_in_the_level_around_it(
    height, direction
):
    # within 1.25x of the step (either way), or a dip where only slowdowns are tested:
    # its cells are part of the step's level, the mean over the step's 20 cells
    fit = _tested(height, direction)
    assert fit.delta[0, 0] == pytest.approx(fit.coef[0, 0] + 2 / 20 * fit.coef[0, 1], abs=1e-12)
    assert fit.delta[0, 0] == pytest.approx(0.5 + height / 10, abs=0.02)
    # the nested regime's own coefficient is untouched
    assert fit.delta[0, 1] == pytest.approx(fit.coef[0, 1], abs=1e-12)


def test_a_large_dip_inside_a_step_is_apart_where_speed_ups_are_tested():
    fit = _tested(-0.45, "both")
    assert fit.delta[0, 0] == pytest.approx(fit.coef[0, 0], abs=1e-12)


def _plateau_and_overlap(height: float) -> tuple[np.ndarray, RowFit]:
    """A 2.7x plateau over cells 8..17, and a regime of ``height`` over cells 14..21."""
    levels = _noise()
    levels[0, 8:18] += 1.0
    levels[0, 14:22] += height
    return levels, _fit(levels, (8, 17), (14, 21))


def test_a_regime_that_could_not_be_reported_is_no_part_of_the_model_of_one_it_overlaps():
    # 1.1x over cells 14..21: within min_ratio, and across the plateau's end
    levels, fit = _plateau_and_overlap(0.1)
    tested = as_tested(fit, levels, SM, np.zeros(1), "up", math.log(1.25), 0.05)
    alone = _fit(levels, (8, 17))
    assert tested.chosen.tolist() == alone.chosen.tolist()
    assert tested.delta[0, 0] == pytest.approx(alone.delta[0, 0], abs=1e-12)
    # with it in the model, the plateau read against a baseline it had lifted
    assert fit.delta[0, 0] < tested.delta[0, 0] - 0.01


def test_an_overlapping_regime_that_could_be_reported_stays_in_the_model():
    levels, fit = _plateau_and_overlap(0.6)
    tested = as_tested(fit, levels, SM, np.zeros(1), "up", math.log(1.25), 0.05)
    assert tested.chosen.tolist() == fit.chosen.tolist()
    assert tested.delta[0, 0] == pytest.approx(fit.coef[0, 0], abs=1e-12)
