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
  those boundaries (:func:`regimes.changepoints.level_trends`), so the interval's own
  level cannot bend it, and its uncertainty is carried into every contrast: a trend
  drawn far from the cells that support it has a wide interval, not a confident
  extrapolation.
* **between-cell variance.** See :func:`interval_tau`.

* **support.** A trend needs cells to stand on (:func:`flank_support`); a scan tests
  only the intervals that have them (:func:`supported_intervals`).
* **coordinate.** A scan may be given the same cells in other trend coordinates; each
  interior interval is then tested in the one whose trend fits its flanks best
  (:func:`scan_intervals`).

The returned estimate, standard error and df are those of the contrast (the log ratio
of the interval's level over the flank trend, the trend's uncertainty included);
``p_value`` is the gated one of ``test_intervals``, Bonferroni-adjusted for the scan over
the supported intervals of the grid, valid when the interval was picked from the same
data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np
import polars as pl

from regimes._stats.changepoints import default_degree, level_trends
from regimes._stats.intervals import (
    MIN_EDGE_FLANK,
    CurveEstimates,
    IntervalTests,
    SmoothTrend,
    between_cell_variance,
    test_intervals,
)

__all__ = [
    "Curve",
    "curve_from_levels",
    "flank_support",
    "interval_segments",
    "interval_tau",
    "interval_trends",
    "scan_intervals",
    "supported_intervals",
    "test_fixed_interval",
    "whole_curve_taus",
]

EDGE_FLANK = MIN_EDGE_FLANK
"""Cells of the one flank an interval touching an end of the grid needs, and the size of
the grid-end segment its gate tests (``flank[0]`` of :func:`test_intervals`)."""

SIDE_FLANK = 2
"""Cells each flank of an interior interval needs: one cell is one noisy reading (or part
of another anomaly), not a trend."""


class Curve(NamedTuple):
    """One curve's cells in increasing x: positions, trend coordinate, log levels with
    their sampling variances and df (from :func:`regimes.intervals.cell_levels`).
    """

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
    for their own estimate borrow the median of the others, as detection does.
    """
    taus = [between_cell_variance(c.u, c.level, c.var) for c in curves]
    known = [t for t in taus if math.isfinite(t[0])]
    fallback = (
        (float(np.median([t[0] for t in known])), float(np.median([t[1] for t in known])))
        if known
        else (0.0, 0.0)
    )
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
        return (
            f"{width} cells against a flank of {flank} on one side: the trend would be "
            "extrapolated beyond its support"
        )
    return None


def supported_intervals(t: int) -> list[tuple[int, int]]:
    """Every interval ``(start, end)`` of a grid of ``t`` cells that :func:`flank_support`
    admits, by start then end.
    """
    return [
        (start, end)
        for start in range(t)
        for end in range(start, t)
        if flank_support(start, end, t) is None
    ]


def interval_segments(
    start: int, end: int, t: int, flank: int = EDGE_FLANK
) -> tuple[list[int], int, int]:
    """Breaks that make ``[start, end]`` (cell indices) a run of segments of a grid of
    ``t`` cells, and the indices of its first and last segment.
    """
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
    curve: Curve,
    start: int,
    end: int,
    breaks: Sequence[int],
    smooth: SmoothTrend,
    fallback: tuple[float, float],
) -> tuple[float, float]:
    """Between-cell variance ``(tau2, df)`` for testing cells ``start..end``.

    The tested cells must not inflate it, so it comes from the cells around the trend
    fitted with the interval's own level shifts, by the first of:

    * the robust Qn scale of the residuals within segments
      (:func:`regimes.intervals.between_cell_variance` with ``breaks`` and ``smooth``),
      when it has at least 4 degrees of freedom;
    * on short grids, the least-squares residual variance of the cells outside the
      interval around a low-degree polynomial (:func:`_flank_lack_of_fit`), which
      spends every cell: with 6 budgets a robust scale has one degree of freedom;
    * ``fallback``, the curve's whole-curve estimate.

    Every estimate is a total residual variance minus the sampling part, cut at 0. A
    t test that plugged in ``tau2 = 0`` with its Satterthwaite df would act as if the
    between-cell variance were known to be 0; :func:`_carried` keeps the uncertainty of
    the total instead.
    """
    u, lev, var = curve.u, curve.level, curve.var
    robust = between_cell_variance(u, lev, var, breaks, smooth.values)
    if math.isfinite(robust[0]) and robust[1] >= 4:
        return _carried(*robust, float(np.median(var)))
    keep = np.r_[0:start, end + 1 : u.size]
    lack_of_fit = _flank_lack_of_fit(u[keep], lev[keep], var[keep])
    if lack_of_fit is not None:
        return _carried(*lack_of_fit)
    return _carried(*fallback, float(np.median(var)))


def _flank_lack_of_fit(
    u: np.ndarray, level: np.ndarray, var: np.ndarray
) -> tuple[float, float, float] | None:
    """``(tau2, df, sampling)`` from an ordinary least-squares polynomial through the
    cells, or ``None`` without a residual degree of freedom.

    The degree is :func:`regimes.changepoints.default_degree` lowered until each
    coefficient has four cells (a line below 8 cells). With hat values :math:`h_i`,
    :math:`E[\\mathrm{RSS}] = \\sum_i (1 - h_i)(v_i + \\tau^2)`, so
    :math:`\\hat\\tau^2 = \\max(0, (\\mathrm{RSS} - \\sum_i (1 - h_i) v_i) / (n - p))` with
    :math:`n - p` degrees of freedom; ``sampling`` is :math:`\\sum_i (1-h_i) v_i/(n-p)`.
    """
    n = u.size
    degree = default_degree(n)
    while degree > 1 and n < 4 * (degree + 1):
        degree -= 1
    p = degree + 1
    if n - p < 1:
        return None
    spread = float(np.ptp(u)) or 1.0
    design = np.vander((u - u.mean()) / spread, p, increasing=True)
    q, _ = np.linalg.qr(design)
    residual = level - q @ (q.T @ level)
    free = 1.0 - np.sum(q**2, axis=1)
    sampling = float(free @ var) / (n - p)
    return max(0.0, float(residual @ residual) / (n - p) - sampling), float(n - p), sampling


def _carried(tau2: float, df: float, sampling: float) -> tuple[float, float]:
    """``(tau2, df)`` for :func:`regimes.intervals.contrast_test` that carries the
    uncertainty of the estimated *total* :math:`s^2 = \\tau^2 + v`.

    :math:`\\hat\\tau^2 = s^2 - v` varies as :math:`s^2` does, :math:`2 s^4 / d`, so its
    Satterthwaite df is :math:`d\\,(\\hat\\tau^2 / s^2)^2`; at :math:`\\hat\\tau^2 = 0` a
    vanishing floor keeps that term, whose share of the contrast's variance
    does not depend on the floor.
    """
    total = tau2 + sampling
    if not (math.isfinite(total) and total > 0 and df > 0):
        return max(0.0, tau2), df
    tau2 = max(tau2, 1e-9 * total)
    return tau2, df * (tau2 / total) ** 2


def interval_trends(
    curve: Curve,
    total_var: np.ndarray,
    intervals: Sequence[tuple[int, int]],
) -> list[tuple[list[int], SmoothTrend]]:
    """Breaks (:func:`interval_segments`) and smooth trend for testing each interval
    (cell indices) of one curve: the curve's robust polynomial with a free level shift at
    each of the interval's breaks (:func:`regimes.changepoints.level_trends`, all
    intervals in one batch).
    """
    framed = [interval_segments(start, end, curve.u.size)[0] for start, end in intervals]
    k = len(framed)
    trends = level_trends(
        np.tile(curve.u, (k, 1)), np.tile(curve.level, (k, 1)), np.tile(total_var, (k, 1)), framed
    )
    return list(zip(framed, trends))


def scan_intervals(
    curve: Curve,
    intervals: Sequence[tuple[int, int]],
    prior_tau: tuple[float, float],
    *,
    direction: str = "up",
    level: float = 0.95,
    alternatives: Sequence[tuple[Curve, tuple[float, float]]] = (),
) -> list[IntervalTests]:
    """Test each interval ``(start, end)`` (cell indices) of one curve against its flank
    trend; one :class:`~regimes.intervals.IntervalTests` of one row per interval.

    ``p_value`` is Bonferroni-adjusted for a scan over every interval of the grid that
    :func:`flank_support` admits: whatever rule picks one of them from the same data,
    the adjusted p-value stays valid, and intervals that are never tested cost nothing.

    ``alternatives`` are the same cells in other trend coordinates (``u``), each with its
    whole-curve between-cell variance. Each interior interval is then tested in the
    coordinate whose trend fits the cells *around* it best: the smallest between-cell
    variance :func:`interval_tau` finds there. The choice never looks at the tested
    cells, so their contrast keeps its reference distribution; what it costs is that the
    variance is the smaller of correlated estimates, which
    ``bench/speedup_calibration.py`` measures (null rates unchanged within their CIs).
    An interval at an end of the grid keeps ``curve``'s coordinate: its trend is
    extrapolated from three cells on one side, whose fit (one residual degree of
    freedom) cannot tell the shapes apart, and picking the better-fitting one there
    reported 4 of 300 smooth 12-budget speedup curves against 0 of 300 without.
    """
    t = curve.u.size
    for start, end in intervals:
        if start == 0 and end == t - 1:
            raise ValueError("the interval covers the whole grid: no flank to compare with")
    # test_intervals adjusts for all T(T+1)/2 - 1 intervals of the grid; rescaled to
    # the supported ones where that adjustment did not cap the p-value at 1.
    family = min(1.0, len(supported_intervals(t)) / max(1, t * (t + 1) // 2 - 1))
    interior = [k for k, (start, end) in enumerate(intervals) if 0 < start and end < t - 1]
    options = [
        (curve, prior_tau, range(len(intervals))),
        *((c, tau, interior) for c, tau in alternatives),
    ]
    fits: list[list] = [[] for _ in intervals]
    for c, tau, tested in options:
        if not tested:
            continue
        framings = interval_trends(c, c.var + tau[0], [intervals[k] for k in tested])
        for k, (breaks, smooth) in zip(tested, framings):
            start, end = intervals[k]
            fits[k].append((interval_tau(c, start, end, breaks, smooth, tau), c, breaks, smooth))
    out = []
    for (start, end), candidates in zip(intervals, fits):
        tau, c, breaks, smooth = min(candidates, key=lambda fit: fit[0][0])  # ties: the first
        est = CurveEstimates(c.u, c.level, c.var, c.df, *tau)
        _, first, last = interval_segments(start, end, t)
        tests = test_intervals(
            est,
            [(start, end, first, last)],
            breaks,
            smooth=smooth,
            direction=direction,
            level=level,
        )
        p_value = np.where(tests.p_value < 1.0, tests.p_value * family, 1.0)
        out.append(replace(tests, p_value=p_value))
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
    return scan_intervals(curve, [(start, end)], prior_tau, direction=direction, level=level)[0]
