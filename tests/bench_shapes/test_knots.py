"""A hinge's place is chosen with the regimes: a knot placed a cell late is not a step.

The curves are synthetic, drawn by ``bench/shapes.py`` (families ``curvature`` and
``mixed``, seed 3, before their hinges reached the last grid step) and kept in
``frames/`` as drawn, so that a change of the generator leaves them as they were.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import polars as pl
import pytest

from regimes import RegimeResult, RegimesWarning, detect_regimes

FRAMES = Path(__file__).resolve().parent / "frames"


def _analyse(name: str) -> RegimeResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        return detect_regimes(pl.read_parquet(FRAMES / f"{name}.parquet"))


@pytest.mark.parametrize(
    ("name", "knot"),
    [
        ("curvature-null-seed3-0000", 1024),
        ("curvature-null-seed3-0017", 291),
        ("curvature-null-seed3-0055", 186),
    ],
)
def test_a_knot_the_robust_score_places_a_cell_late_leaves_no_change_point(
    name: str, knot: int
) -> None:
    # smooth curves whose slope grows 2-3.6x from one budget on, over a quadratic term:
    # the robust score puts the knot one cell after the first steeper step, and hinged
    # there the trend left that step to a significant "step to the end" (and, on 9
    # budgets, a 0.23x change point); offered the knot's neighbours too, the trend takes
    # the hinge where it is
    rep = _analyse(name)
    assert rep.anomalies.height == 0
    assert rep.change_points.filter(pl.col("significant")).height == 0
    assert rep.groups.row(0, named=True)["slope_change_at"] == knot


def test_a_hinge_that_levels_off_late_is_one_slope_change() -> None:
    # a smooth curve whose slope grows 3.9x from the eleventh of 22 budgets (157), beside
    # a fixed cost of half the latency there: its rise levels off later than the hinge
    # shape of m = 2.5, and with that shape alone the trend left a 2x step to the end
    # beside its hinge; offered m = 1.5 too, it is one slope change near the true knot
    rep = _analyse("mixed-null-seed3-0005")
    assert rep.anomalies.height == 0
    assert rep.change_points.filter(pl.col("significant")).height == 0
    assert rep.groups.row(0, named=True)["slope_change_at"] in (117, 157, 210)
