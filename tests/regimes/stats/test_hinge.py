"""A trend may change slope once: the hinge regressor, its partial spline, its knot.

Every curve here is synthetic: latency linear in the budget whose slope grows from one
budget on, on a geometric grid, with log-normal trials.
"""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl
import pytest

from regimes import RegimesWarning, detect_regimes
from regimes._stats.smoother import choose_knots, hinge_regressor, smoother_for

BUDGETS = 16 * 2.0 ** np.arange(9)  # 16..4096


def hinged_log_latency(knot: int, factor: float, budgets: np.ndarray = BUDGETS) -> np.ndarray:
    """Log of ``0.05 + 0.002 x``, its slope ``factor`` times steeper from ``budgets[knot]``."""
    mu = 0.05 + 0.002 * budgets + (factor - 1.0) * 0.002 * np.maximum(0.0, budgets - budgets[knot])
    return np.log(mu)


def test_the_regressor_is_flat_to_its_knot_then_levels_off() -> None:
    f = hinge_regressor(np.log(BUDGETS), 4, 2.5)
    assert np.all(f[:5] == 0.0)
    assert np.all(np.diff(f[4:]) > 0.0)
    assert f[-1] < np.log(2.5)


def test_the_partial_spline_leaves_nothing_of_its_hinge_or_a_line() -> None:
    u = np.log(BUDGETS)
    sm = smoother_for(u, (4, 2.5, ()))
    # the ladder, and the ladder hinged at the knot and at either neighbour
    ladder = int(np.sum(~sm.hinged))
    assert sm.knots[sm.hinged].tolist() == [3] * ladder + [4] * ladder + [5] * ladder
    for knot in (3, 4, 5):
        f = hinge_regressor(u, knot, 2.5)
        for a in sm.residual[sm.knots == knot]:
            np.testing.assert_allclose(a @ f, 0.0, atol=1e-8)
            np.testing.assert_allclose(a @ (1.0 + 0.3 * u), 0.0, atol=1e-6)
            np.testing.assert_allclose(a, a.T, atol=1e-12)
        # the regressor adds at most one degree of freedom, all of one to the stiffest
        # smoother (a line), less to flexible ones that could already follow part of it
        extra = sm.edf[sm.knots == knot] - sm.edf[~sm.hinged]
        assert np.all((extra > 0.0) & (extra <= 1.0 + 1e-9))
        assert abs(extra[0] - 1.0) < 0.05


def test_a_knot_at_the_margin_has_the_neighbours_the_margin_allows() -> None:
    sm = smoother_for(np.log(BUDGETS), (2, 2.5, ()))  # KNOT_MARGIN: two cells before it
    assert sorted(set(sm.knots[sm.hinged].tolist())) == [2, 3]


def test_the_knot_is_found_where_the_slope_grows() -> None:
    rng = np.random.default_rng(0)
    u = np.log(BUDGETS)
    for knot in (3, 4, 5):
        levels = hinged_log_latency(knot, 3.5) + rng.normal(0.0, 0.01, (20, BUDGETS.size))
        found = choose_knots(u, levels)
        # within a grid step: the intercept makes the rise start a little later
        assert sum(k is not None and abs(k[0] - knot) <= 1 for k in found) >= 18


def _trials(
    log_mu: np.ndarray,
    seed: int,
    trials: int = 5,
    cv: float = 0.03,
    budgets: np.ndarray = BUDGETS,
) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    cell = np.repeat(np.arange(budgets.size), trials)
    latency = np.exp(log_mu[cell] + rng.normal(0.0, cv, cell.size))
    budget = budgets.astype(np.int64)[cell]
    frame = pl.DataFrame({"budget": budget, "latency_s": latency})
    return frame.with_columns(
        pl.lit(f"synthetic-{seed}").alias("model"),
        pl.lit(0).alias("session"),
        pl.Series("trial", np.tile(np.arange(trials), budgets.size)),
    )


def _analyse(frame: pl.DataFrame):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        return detect_regimes(frame)


def test_a_hinge_is_one_slope_change_not_a_regime() -> None:
    # a slope 3.5x steeper from 256 on is a rise of 2x within one step of this grid:
    # a stiff trend read it as a step to the end, in every curve; the hinge's shapes
    # (m = 1.5, 2.5) are not quite this one's, so a curve may still show it at level alpha
    flagged, hinged = 0, 0
    for seed in range(20):
        rep = _analyse(_trials(hinged_log_latency(4, 3.5), seed))
        significant = rep.change_points.filter(pl.col("significant")).height
        flagged += rep.anomalies.height > 0 or significant > 0
        group = rep.groups.row(0, named=True)
        if group["slope_change_at"] == 256:
            hinged += 1
            assert group["slope_after"] > group["slope_before"]
    assert flagged <= 2
    assert hinged >= 16


def test_a_smooth_curve_is_offered_a_hinge_but_rarely_takes_one() -> None:
    # every curve whose slope grows somewhere is offered the hinged smoothers; the joint
    # choice, at three degrees of freedom for the hinge, decides whether it has one
    log_mu = np.log(0.05 + 0.002 * BUDGETS)
    hinged = 0
    for seed in range(20):
        rep = _analyse(_trials(log_mu, seed))
        assert rep.anomalies.height == 0
        hinged += rep.groups.row(0, named=True)["slope_change_at"] is not None
    assert hinged <= 3


def test_a_slope_that_falls_is_never_a_hinge() -> None:
    for seed in range(10):
        rep = _analyse(_trials(hinged_log_latency(4, 0.3), seed))
        assert rep.groups.row(0, named=True)["slope_change_at"] is None


def test_a_step_is_not_taken_for_a_hinge() -> None:
    # a 2x step on a near power law: the hinge cannot rise within one grid step
    cells = np.arange(BUDGETS.size)
    step = np.log(0.002 * BUDGETS + 0.005) + np.where(cells >= 5, np.log(2.0), 0.0)
    for seed in range(5):
        rep = _analyse(_trials(step, seed))
        assert rep.anomalies.select("start", "end").rows() == [(512, 4096)]


SHORT = 128 * 2.0 ** np.arange(6)  # 128..4096


def test_a_hinge_in_the_last_grid_step_is_a_slope_change_not_a_spike() -> None:
    # on a powers-of-two grid a slope 3x steeper from 2048 on doubles the last budget
    # alone: a stiff trend left it as a one-budget regime, in 13 of 15 such curves of
    # six budgets (the knot needed two budgets after it), and the joint choice, offered
    # the hinge, kept the regime its own selection had found beside it
    flagged, hinged = 0, 0
    for seed in range(20):
        rep = _analyse(_trials(hinged_log_latency(4, 3.0, SHORT), seed, budgets=SHORT))
        flagged += rep.anomalies.height > 0
        hinged += rep.groups.row(0, named=True)["slope_change_at"] == 2048
    assert flagged <= 1
    assert hinged >= 17


def test_a_last_step_hinge_on_a_curve_bent_by_its_fixed_cost_is_a_slope_change() -> None:
    # 2 + 0.015 x is convex on the log scale over 16..4096 (its fixed cost flattens the
    # first budgets), and a slope 3x steeper from 2048 on: read over the stiffest
    # smoother's line, the last budget's rise took the bend in and passed HINGE_MAX, and
    # every one of these curves kept a one-budget regime at 4096 (family ``mixed`` of
    # ``bench/shapes.py``, seeds 1 and 4); over the most flexible trend, a slope change
    x = BUDGETS
    log_mu = np.log(2.0 + 0.015 * x + 2.0 * 0.015 * np.maximum(0.0, x - x[7]))
    for seed in range(10):
        rep = _analyse(_trials(log_mu, seed))
        assert rep.anomalies.height == 0
        assert rep.groups.row(0, named=True)["slope_change_at"] == 2048


def test_a_rise_at_the_end_of_a_linear_grid_is_not_a_hinge() -> None:
    # a 2.5x last budget on a linear grid would need a slope 30 times steeper over the
    # last step: beyond HINGE_MAX, it stays a one-budget regime at the grid's end
    linear = 16.0 * np.arange(1, 21)
    u = np.log(linear)
    log_mu = np.log(0.05 + 0.002 * linear) + np.where(np.arange(20) == 19, np.log(2.5), 0.0)
    knot = choose_knots(u, log_mu[None])[0]
    assert knot is None or knot[0] < 18
    for seed in range(5):
        rep = _analyse(_trials(log_mu, seed, budgets=linear))
        assert rep.anomalies.select("start", "end").rows() == [(320, 320)]


@pytest.mark.parametrize(
    ("budgets", "knot", "factor"),
    [
        # 14 budgets 1.25x apart, a slope 3.8x steeper from the thirteenth: the last
        # budget alone rises 1.5x
        (np.round(16 * 1.25 ** np.arange(14)), 12, 3.8),
        # 24 budgets 1.24x apart, a slope 4x steeper from the twenty-second: the last two
        # rise (offered the last step's knot alone, 8 of these 10 curves kept a regime,
        # as did 2 to 3 in 100 smooth curves of family ``curvature`` of
        # ``bench/shapes.py``, seeds 1, 2 and 4)
        (np.round(16 * 1.24 ** np.arange(24)), 21, 4.0),
    ],
)
def test_a_hinge_in_the_last_two_steps_of_a_longer_grid_is_offered_beside_the_knot(
    budgets: np.ndarray, knot: int, factor: float
) -> None:
    # the robust score, blind to one or two cells of many, places the knot earlier, and
    # offered only that knot and its neighbours the trend left the end a regime
    flagged, hinged = 0, 0
    for seed in range(10):
        rep = _analyse(_trials(hinged_log_latency(knot, factor, budgets), seed, budgets=budgets))
        flagged += rep.anomalies.height > 0
        hinged += rep.groups.row(0, named=True)["slope_change_at"] == int(budgets[knot])
    assert flagged <= 1
    assert hinged >= 8
