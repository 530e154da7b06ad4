"""A hinge's place is chosen with the regimes: a knot placed a cell late is not a step."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import shapes  # noqa: E402

from regimes import RegimesWarning, detect_regimes  # noqa: E402


def test_a_knot_the_robust_score_places_a_cell_late_leaves_no_change_point() -> None:
    # three smooth curves of bench/shapes.py (family curvature, seed 3) whose slope grows
    # 2-3.6x from one budget on, over a quadratic term: the robust score puts the knot
    # one cell after the first steeper step, and hinged there the trend left that step to
    # a significant "step to the end" (and, on 9 budgets, a 0.23x change point); offered
    # the knot's neighbours too, the trend takes the hinge where it is
    batch = shapes.make_family("curvature", "null", 56, seed=3)
    for k in (0, 17, 55):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RegimesWarning)
            rep = detect_regimes(batch.frames[k])
        assert rep.anomalies.height == 0
        assert rep.change_points.filter(pl.col("significant")).height == 0
        hinge = rep.groups.row(0, named=True)["slope_change_at"]
        assert hinge == batch.shapes[k].budgets[batch.shapes[k].hinge_at]


def test_a_hinge_that_levels_off_late_is_one_slope_change() -> None:
    # a smooth curve of bench/shapes.py (family mixed, seed 3) whose slope grows 3.9x
    # from the eleventh of 22 budgets, beside a fixed cost of half the latency there: its
    # rise levels off later than the hinge shape of m = 2.5, and with that shape alone the
    # trend left a 2x step to the end beside its hinge; offered m = 1.5 too, it is one
    # slope change near the true knot
    batch = shapes.make_family("mixed", "null", 6, seed=3)
    shape = batch.shapes[5]
    assert (len(shape.budgets), shape.hinge_at) == (22, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        rep = detect_regimes(batch.frames[5])
    assert rep.anomalies.height == 0
    assert rep.change_points.filter(pl.col("significant")).height == 0
    hinge = rep.groups.row(0, named=True)["slope_change_at"]
    assert hinge in shape.budgets[9:12]
