"""One given interval of one curve, tested against its flank trend.

:func:`regimes.intervals.test_intervals` tests runs of segments that a segmentation
proposed. The explanation functions need the same test for an interval fixed in
advance: every interval of a short speedup curve (:func:`regimes.cache_speedup`), or
an anomaly's interval carried over to another backend's curve
(:func:`regimes.compare_backends`). This module frames a fixed interval for that test:

* **segments.** The interval becomes its own run of segments. One that touches an end of
  the grid gets its outer ``flank`` cells as a segment of their own, which the test's
  gates require to stand off the flank too: a dip followed by recovery cannot pass for
  a step that runs to the end of the grid.
* **trend.** The curve's smooth trend is fitted with a free level shift at each of
  those boundaries (:func:`regimes.changepoints.level_trend`), so the interval's own
  level cannot bend it, and its uncertainty is carried into every contrast: a trend
  drawn far from the cells that support it has a wide interval, not a confident
  extrapolation.
* **between-cell variance.** See :func:`interval_tau`.

The returned estimate, standard error and df are those of the plain contrast (the log
ratio of the interval's level over the flank trend); ``p_value`` is the scan-adjusted,
gated one of ``test_intervals``, valid when the interval was picked from the same data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from .changepoints import _biweight_wls, _power_basis, default_degree
from .intervals import (
    CurveEstimates,
    IntervalTests,
    SmoothTrend,
    between_cell_variance,
    test_intervals,
)

__all__ = ["Curve", "curve_from_levels", "flank_support", "interval_segments",
           "interval_tau", "test_fixed_interval", "whole_curve_taus"]

EDGE_FLANK = 3
"""Cells of the one flank an interval touching an end of the grid needs, and the size of
the grid-end segment its gate tests (``flank[0]`` of :func:`test_intervals`)."""

SIDE_FLANK = 2
"""Cells each flank of an interior interval needs: one cell is one noisy reading (or part
of another anomaly), not a trend."""


class Curve(NamedTuple):
    """One curve's cells in increasing x: positions, trend coordinate, log levels with
    their sampling variances and df (from :func:`regimes.intervals.cell_levels`)."""

    x: np.ndarray
    u: np.ndarray
    level: np.ndarray
    var: np.ndarray
    df: np.ndarray


def curve_from_levels(cells: pl.DataFrame, x: str = "_x") -> Curve:
    """A :class:`Curve` from one curve's rows of ``cell_levels`` output.

    The trend coordinate is ``log x`` when every x is positive, as in detection.
    """
    cells = cells.sort(x)
    xs = cells.get_column(x).to_numpy()
    u = np.log(xs) if np.all(xs > 0) else xs.astype(float)
    return Curve(xs, u, *(cells.get_column(c).to_numpy() for c in ("level", "var", "df")))


def whole_curve_taus(curves: Sequence[Curve]) -> list[tuple[float, float]]:
    """Whole-curve between-cell variance ``(tau2, df)`` of each curve; curves too short
    for their own estimate borrow the median of the others, as detection does."""
    taus = [between_cell_variance(c.u, c.level, c.var) for c in curves]
    known = [t for t in taus if math.isfinite(t[0])]
    fallback = (float(np.median([t[0] for t in known])), float(np.median([t[1] for t in known]))
                ) if known else (0.0, 0.0)
    return [t if math.isfinite(t[0]) else fallback for t in taus]


def flank_support(start: int, end: int, t: int) -> str | None:
    """Why cells ``start..end`` of a grid of ``t`` cannot be judged against a flank
    trend, or ``None`` when they can.

    * an interior interval needs :data:`SIDE_FLANK` cells on each side, and
      :data:`EDGE_FLANK` on each side when it covers more than its flanks do;
    * an interval touching an end of the grid needs two cells (one cell at the edge has
      no trend of its own side), :data:`EDGE_FLANK` flank cells, and may not be longer
      than its flank: its trend is extrapolated from one side, and no further than the
      cells that support it reach.
    """
    width = end - start + 1
    left, right = start, t - 1 - end
    if left == 0 and right == 0:
        return "the interval covers the whole grid: no flank to compare with"
    if left and right:
        need = EDGE_FLANK if width > left + right else SIDE_FLANK
        if min(left, right) < need:
            return f"a flank of {min(left, right)} cell(s); the trend needs {need} on each side"
        return None
    flank = left or right
    if width < 2:
        return "one cell at the edge of the grid has no trend of its own side"
    if flank < EDGE_FLANK:
        return f"a flank of {flank} cell(s) on its one side; the trend needs {EDGE_FLANK}"
    if width > flank:
        return (f"{width} cells against a flank of {flank} on one side: the trend would be "
                "extrapolated beyond its support")
    return None


def interval_segments(start: int, end: int, t: int, flank: int = EDGE_FLANK
                      ) -> tuple[list[int], int, int]:
    """Breaks that make ``[start, end]`` (cell indices) a run of segments of a grid of
    ``t`` cells, and the indices of its first and last segment."""
    width = end - start + 1
    inner = {start, end + 1}
    if start == 0 and width > flank:
        inner.add(flank)
    if end == t - 1 and width > flank:
        inner.add(t - flank)
    breaks = sorted(b for b in inner if 0 < b < t)
    edges = [0, *breaks, t]
    return breaks, edges.index(start), edges.index(end + 1) - 1


def interval_tau(
    curve: Curve, start: int, end: int, breaks: Sequence[int], smooth: SmoothTrend,
    prior: tuple[float, float],
) -> tuple[float, float]:
    """Between-cell variance ``(tau2, df)`` for testing ``start..end``: estimated without
    the tested cells, or ``prior`` when fewer than 5 cells remain."""
    u, lev, var = curve.u, curve.level, curve.var
    keep = np.r_[0:start, end + 1:u.size]
    leave_out = between_cell_variance(u[keep], lev[keep], var[keep])
    return leave_out if math.isfinite(leave_out[0]) else prior


def interval_trends(
    curve: Curve, total_var: np.ndarray, intervals: Sequence[tuple[int, int]],
) -> list[tuple[list[int], SmoothTrend]]:
    """Breaks and smooth trend for testing each interval (cell indices) of one curve.

    Each trend is the curve's polynomial (degree as :func:`regimes.changepoints.level_trend`
    picks it) plus a free level shift at each of the interval's breaks, fitted by weighted
    least squares with the robust weights of one biweight fit of the whole curve (a
    one-step M-estimator). Cells that a hiccup or another anomaly pushed off the trend are
    down-weighted once; the interval's own level is absorbed by its shifts, so it bends
    nothing. Linear in the levels given those weights, so its uncertainty carries into
    every contrast.

    Written here rather than calling ``level_trend`` per interval: the fits of all
    intervals of a curve are one stacked pseudo-inverse, where a robust refit of each of
    the ``T^2 / 2`` intervals would cost a few milliseconds apiece.
    """
    u, t = curve.u, curve.u.size
    centre, spread = float(u.mean()), float(np.ptp(u)) or 1.0
    pilot_degree = default_degree(t)
    while pilot_degree > 1 and t < 4 * (pilot_degree + 1):
        pilot_degree -= 1
    pilot = np.column_stack([np.ones(t), _power_basis(u, centre, spread, pilot_degree)])
    sw = np.sqrt(_biweight_wls(pilot, curve.level, total_var)[1])
    framed = [interval_segments(start, end, t)[0] for start, end in intervals]
    out: list[tuple[list[int], SmoothTrend] | None] = [None] * len(framed)
    for n_breaks in sorted({len(b) for b in framed}):
        members = [k for k, b in enumerate(framed) if len(b) == n_breaks]
        degree = default_degree(t)
        while degree > 1 and t - n_breaks < 4 * (degree + 1):
            degree -= 1
        poly = np.column_stack([np.ones(t), _power_basis(u, centre, spread, degree)])
        design = np.repeat(np.hstack([poly, np.zeros((t, n_breaks))])[None], len(members), axis=0)
        for row, k in enumerate(members):
            for j, b in enumerate(framed[k]):
                design[row, b:, degree + 1 + j] = 1.0
        coef_maps = (np.linalg.pinv(design * sw[None, :, None]) * sw)[:, : degree + 1]
        values = poly @ (coef_maps @ curve.level).T
        for row, k in enumerate(members):
            out[k] = (framed[k], SmoothTrend(values=values[:, row], basis=poly,
                                             coef_map=coef_maps[row]))
    return out  # type: ignore[return-value]


def scan_intervals(
    curve: Curve,
    intervals: Sequence[tuple[int, int]],
    prior_tau: tuple[float, float],
    *,
    direction: str = "up",
    level: float = 0.95,
) -> list[IntervalTests]:
    """Test each interval ``(start, end)`` (cell indices) of one curve against its flank
    trend; one :class:`~regimes.intervals.IntervalTests` of one row per interval."""
    t = curve.u.size
    for start, end in intervals:
        if start == 0 and end == t - 1:
            raise ValueError("the interval covers the whole grid: no flank to compare with")
    out = []
    for (start, end), (breaks, smooth) in zip(
        intervals, interval_trends(curve, curve.var + prior_tau[0], intervals)
    ):
        tau = interval_tau(curve, start, end, breaks, smooth, prior_tau)
        est = CurveEstimates(curve.u, curve.level, curve.var, curve.df, *tau)
        edges = [0, *breaks, t]
        segments = (start, end, edges.index(start), edges.index(end + 1) - 1)
        out.append(test_intervals(est, [segments], breaks, smooth=smooth,
                                  direction=direction, level=level))
    return out


def test_fixed_interval(
    curve: Curve,
    start: int,
    end: int,
    prior_tau: tuple[float, float],
    *,
    direction: str = "up",
    level: float = 0.95,
) -> IntervalTests:
    """Test cells ``start..end`` (indices) of one curve against its flank trend."""
    return scan_intervals(curve, [(start, end)], prior_tau, direction=direction,
                          level=level)[0]
