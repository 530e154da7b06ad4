"""Segmentation, trends and the contrasts the tests are built from (synthetic signals)."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.robust.scale import qn_scale

from regimes._stats.between_cell import between_cell_variance, qn_scale_rows
from regimes._stats.candidates import candidate_intervals
from regimes._stats.contrasts import contrast_test, jump_contrast, level_contrast, trend_contrast
from regimes._stats.curves import CurveEstimates
from regimes._stats.interval_tests import change_point_tests
from regimes._stats.segmentation import bic_penalty, segment, segment_curve
from regimes._stats.trends import difference_trend, level_trend


def test_qn_rows_match_statsmodels() -> None:
    rng = np.random.default_rng(0)
    values = rng.standard_t(3, size=(5, 23))
    assert np.allclose(qn_scale_rows(values), [qn_scale(row) for row in values])


def test_segment_finds_planted_jumps_exactly() -> None:
    rng = np.random.default_rng(1)
    signal = rng.standard_normal(60)
    signal[20:32] += 6.0
    assert segment(signal, bic_penalty(60)) == [20, 32]


def test_segment_rarely_cuts_pure_noise() -> None:
    rng = np.random.default_rng(2)
    cut = sum(bool(segment(rng.standard_normal(40), bic_penalty(40))) for _ in range(200))
    assert cut / 200 < 0.2


def _curve(x: np.ndarray, noise: float, seed: int) -> np.ndarray:
    """Synthetic log latency of 0.05 s + 7 ms per token, with noise."""
    rng = np.random.default_rng(seed)
    return np.log(0.05 + 0.007 * x) + rng.normal(0.0, noise, x.size)


def test_difference_trend_ignores_a_plateau_over_most_of_the_grid() -> None:
    x = 16.0 * np.arange(1, 25)
    level = _curve(x, 0.01, 3)
    level[4:20] += np.log(5.0)
    u, var = np.log(x), np.full(x.size, 0.01**2)
    trend = difference_trend(u, level, var)
    residual = level - trend
    flanks = np.r_[0:4, 20:24]
    # flanks sit on the trend, the plateau 5x above it
    assert np.ptp(residual[flanks]) < 0.1
    assert np.median(residual[4:20]) - np.median(residual[flanks]) == pytest.approx(
        np.log(5), abs=0.1
    )


def test_segment_curve_recovers_a_step_and_its_trend() -> None:
    x = 16.0 * np.arange(1, 31)
    clean = np.log(0.05 + 0.007 * x)
    level = clean + np.random.default_rng(4).normal(0.0, 0.02, x.size)
    level[9:] += np.log(3.0)
    var = np.full(x.size, 0.02**2)
    breaks, smooth = segment_curve(np.log(x), level, var, bic_penalty(x.size))
    assert breaks == [9]
    # the smooth part follows the clean curve's shape (up to a constant)
    shape_error = (smooth.values - clean) - np.mean(smooth.values - clean)
    assert np.abs(shape_error).max() < 0.05


def test_smooth_trend_contrasts_are_linear_in_the_levels() -> None:
    x = 16.0 * np.arange(1, 21)
    level = _curve(x, 0.02, 5)
    var = np.full(x.size, 0.02**2)
    smooth = level_trend(np.log(x), level, var, [8])
    c = level_contrast(var, np.arange(8, 11), np.arange(5, 8))
    assert smooth.adjust(c) @ level == pytest.approx(c @ (level - smooth.values))


def test_jump_contrast_is_blind_to_a_kink_and_sees_a_step() -> None:
    u = np.arange(12, dtype=float)
    var = np.ones(12)
    left, right = np.arange(3, 6), np.arange(6, 9)
    kink = np.where(u < 5.5, u, 5.5 + 3 * (u - 5.5))
    c = jump_contrast(u, var, left, right)
    assert c @ kink == pytest.approx(0.0, abs=1e-9)
    assert c @ (u + 2.0 * (u > 5.5)) == pytest.approx(2.0)


def test_trend_contrast_measures_a_plateau_over_its_flanks() -> None:
    u = np.linspace(0.0, 3.0, 16)
    level = 1.5 * u
    level[5:11] += 0.8
    var = np.full(16, 0.01)
    c, at = trend_contrast(u, var, np.arange(5, 11), np.r_[2:5, 11:14])
    assert c @ level == pytest.approx(0.8)
    assert at @ level == pytest.approx(1.5 * u[5:11])


def test_contrast_test_variance_and_satterthwaite_df() -> None:
    c = np.array([0.5, 0.5, -1.0])
    var = np.array([0.02, 0.02, 0.04])
    estimate, se, dof = contrast_test(c, np.array([1.0, 3.0, 1.0]), var, np.full(3, 10.0), 0.0, 0.0)
    assert estimate == pytest.approx(1.0)
    assert se == pytest.approx(np.sqrt(0.25 * 0.02 * 2 + 0.04))
    assert 10.0 < dof < 30.0  # between one cell's df and the sum


def test_change_point_test_separates_step_from_noise() -> None:
    x = 16.0 * np.arange(1, 31)
    rng = np.random.default_rng(6)
    level = np.log(0.05 + 0.007 * x) + rng.normal(0.0, 0.02, x.size)
    level[15:] += np.log(2.0)
    var = np.full(x.size, 0.02**2)
    tau2, tau_df = between_cell_variance(np.log(x), level, var)
    est = CurveEstimates(np.log(x), level, var, np.full(x.size, 20.0), tau2, tau_df)
    breaks, smooth = segment_curve(est.u, level, est.total_var, bic_penalty(x.size))
    tests = change_point_tests(est, breaks, smooth=smooth)
    ratio, low, high = tests.ratio_interval(0.95)
    step = list(breaks).index(15)
    assert tests.p_value[step] < 1e-6 and low[step] < 2.0 < high[step]


def test_candidates_are_runs_of_segments_without_whole_grid_or_edge_singletons() -> None:
    cands = candidate_intervals(10, [1, 4, 9])
    spans = {(s, e) for s, e, _, _ in cands}
    assert (0, 9) not in spans and (0, 0) not in spans and (9, 9) not in spans
    assert {(1, 3), (4, 8), (1, 8), (0, 3), (4, 9)} <= spans
