"""Refinement starts from the detection's bounds on each boundary, not one grid step.

An anomaly's ``start_low..start_high`` bounds its first anomalous budget and
``end_low..end_high`` its last; the onset's starting bracket is then the grid budget
before ``start_low`` to ``start_high``, the recovery's ``end_low`` to the grid budget
after ``end_high``. Every trial here is synthetic (:class:`regimes.refine.SimulatedProbe`).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl
import pytest

import regimes
from regimes._refine.brackets import boundaries_from
from regimes._refine.sprt import Noise
from regimes.refine import SimulatedProbe, refine_boundaries

GRID = list(range(480, 657, 16))
"""480..656 step 16: the published MPS window."""


def _report(bounds: dict[str, int], change_bounds: tuple[int, int] | None = None) -> Any:
    """A detection-shaped report of one curve: a 3x plateau on 512..624 of ``GRID``."""
    budgets = np.asarray(GRID)
    inside = (budgets >= 512) & (budgets <= 624)
    baseline = 0.01 * budgets
    curve = pl.DataFrame(
        {
            "model": "m",
            "budget": budgets,
            "n": 3,
            "n_sessions": 1,
            "median": baseline * np.where(inside, 3.0, 1.0),
            "baseline": baseline,
            "segment": np.cumsum(np.r_[0, np.diff(inside.astype(int)) != 0]),
            "anomalous": inside,
        }
    )
    anomaly = {"model": "m", "start": 512, "end": 624, "recovered": True} | bounds
    after_low, after_high = change_bounds or (512, 512)
    change_points = pl.DataFrame(
        {
            "model": ["m"],
            "x_before": [496],
            "x_after": [512],
            "significant": [change_bounds is not None],
            "after_low": [after_low],
            "after_high": [after_high],
        }
    )
    return SimpleNamespace(
        group_columns=["model"],
        curve=curve,
        anomalies=pl.DataFrame([anomaly]),
        change_points=change_points,
    )


def _brackets(report: Any) -> list[tuple[str, int, int]]:
    noise = {("m",): Noise(sigma_w=0.05, sigma_s=0.0, tau=0.0)}
    found, _ = boundaries_from(report, None, noise)
    return [(b.kind, b.low, b.high) for b in found]


def test_bounds_on_one_budget_give_the_one_grid_step():
    bounds = {"start_low": 512, "start_high": 512, "end_low": 624, "end_high": 624}
    assert _brackets(_report(bounds)) == [("onset", 496, 512), ("recovery", 624, 640)]


def test_wide_bounds_widen_each_bracket_to_the_neighbouring_grid_budgets():
    bounds = {"start_low": 496, "start_high": 528, "end_low": 608, "end_high": 640}
    assert _brackets(_report(bounds)) == [("onset", 480, 528), ("recovery", 608, 656)]


def test_the_side_levels_are_read_outside_the_widened_bracket():
    bounds = {"start_low": 496, "start_high": 528, "end_low": 608, "end_high": 624}
    noise = {("m",): Noise(sigma_w=0.05, sigma_s=0.0, tau=0.0)}
    onset = boundaries_from(_report(bounds), None, noise)[0][0]
    # the left level is the trend (no budget left of 480 is anomalous), the right one 3x it
    assert onset.step() == pytest.approx(np.log(3.0), rel=1e-9)


def test_bounds_that_reach_the_grid_end_stay_on_the_grid():
    bounds = {"start_low": 480, "start_high": 512, "end_low": 624, "end_high": 656}
    assert _brackets(_report(bounds)) == [("onset", 480, 512), ("recovery", 624, 656)]


def test_a_change_point_brackets_from_its_own_bounds():
    bounds = {"start_low": 512, "start_high": 512, "end_low": 624, "end_high": 624}
    report = _report(bounds, change_bounds=(496, 528))
    report.anomalies = report.anomalies.clear()
    assert _brackets(report) == [("change", 480, 528)]


def test_refinement_from_wide_bounds_still_reaches_the_exact_token(monkeypatch):
    """The grid budgets inside a widened bracket are decided as probes already measured."""
    oracle = SimulatedProbe(505, 633, factor=3.0, seed=11)
    coarse = oracle.sweep(GRID, trials=3)
    detect = regimes.detect_regimes

    def wide(*args: Any, **kwargs: Any) -> Any:
        rep = detect(*args, **kwargs)
        widened = rep.anomalies.with_columns(
            start_low=pl.lit(496), start_high=pl.lit(528), end_low=pl.lit(608), end_high=pl.lit(640)
        )
        return dataclasses.replace(rep, anomalies=widened)

    monkeypatch.setattr("regimes.detect.detect_regimes", wide)
    result = refine_boundaries(coarse, probe=oracle, n_boot=100)
    rows = result.boundaries.select("kind", "grid_low", "grid_high", "low", "high", "resolved")
    assert rows.rows() == [
        ("onset", 480, 528, 504, 505, True),
        ("recovery", 608, 656, 633, 634, True),
    ]
