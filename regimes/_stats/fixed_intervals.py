"""One given interval of one curve, tested against its flank trend.

:func:`regimes._stats.interval_tests.interval_tests` tests runs of segments that a segmentation
proposed. The explanation functions need the same test for an interval fixed in
advance: every interval of a short speedup curve (:func:`regimes.cache_speedup`), or
an anomaly's interval carried over to another backend's curve
(:func:`regimes.compare_backends`). This module frames a fixed interval for that test:

* **segments.** The interval becomes its own run of segments. One that touches an end of
  the grid gets its outer ``flank`` cells as a segment of their own, which the test's
  gates require to stand off the flank too: a dip followed by recovery cannot pass for
  a step that runs to the end of the grid.
* **trend.** The curve's smooth trend is fitted with a free level shift at each of
  those boundaries (:func:`regimes._stats.trends.level_trends`), so the interval's own
  level cannot bend it, and its uncertainty is carried into every contrast: a trend
  drawn far from the cells that support it has a wide interval, not a confident
  extrapolation.
* **between-cell variance.** See :func:`regimes._stats.between_cell.interval_tau`.

* **support.** A trend needs cells to stand on (:func:`flank_support`); a scan tests
  only the intervals that have them (:func:`supported_intervals`).
* **coordinate.** A scan may be given the same cells in other trend coordinates; each
  interior interval is then tested in the one whose trend fits its flanks best
  (:func:`scan_intervals`).

The returned estimate, standard error and df are those of the contrast (the log ratio
of the interval's level over the flank trend, the trend's uncertainty included);
``p_value`` is the gated one of ``interval_tests``, Bonferroni-adjusted for the scan over
the supported intervals of the grid, valid when the interval was picked from the same
data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from regimes._stats.between_cell import interval_tau
from regimes._stats.candidates import MIN_EDGE_FLANK
from regimes._stats.curves import Curve, CurveEstimates
from regimes._stats.interval_tests import IntervalTests, interval_tests
from regimes._stats.trends import SmoothTrend, level_trends

__all__ = [
    "EDGE_FLANK",
    "fixed_interval_test",
    "flank_support",
    "interval_segments",
    "interval_trends",
    "scan_intervals",
    "supported_intervals",
]

EDGE_FLANK = MIN_EDGE_FLANK
"""Cells of the one flank an interval touching an end of the grid needs, and the size of
the grid-end segment its gate tests (``flank[0]`` of
:func:`regimes._stats.interval_tests.interval_tests`)."""

SIDE_FLANK = 2
"""Cells each flank of an interior interval needs: one cell is one noisy reading (or part
of another anomaly), not a trend."""


def flank_support(start: int, end: int, t: int) -> str | None:
    """Say why cells ``start..end`` of a grid of ``t`` cannot be judged against a trend.

    ``None`` when they can.

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
    """List the intervals of a grid of ``t`` cells that have flank support.

    Every ``(start, end)`` that :func:`flank_support` admits, by start then end.
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
    """Frame ``[start, end]`` (cell indices) as a run of segments.

    Returns the breaks that make it one in a grid of ``t`` cells, and the indices of its first and
    last segment.
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


def interval_trends(
    curve: Curve,
    total_var: np.ndarray,
    intervals: Sequence[tuple[int, int]],
) -> list[tuple[list[int], SmoothTrend]]:
    """Fit the smooth trend for testing each interval of one curve, all in one batch.

    Breaks (:func:`interval_segments`) and trend of each interval (cell indices): the curve's
    robust polynomial with a free level shift at
    each of the interval's breaks (:func:`regimes._stats.trends.level_trends`, all
    intervals in one batch).
    """
    framed = [interval_segments(start, end, curve.u.size)[0] for start, end in intervals]
    k = len(framed)
    trends = level_trends(
        np.tile(curve.u, (k, 1)), np.tile(curve.level, (k, 1)), np.tile(total_var, (k, 1)), framed
    )
    return list(zip(framed, trends, strict=True))


def scan_intervals(
    curve: Curve,
    intervals: Sequence[tuple[int, int]],
    prior_tau: tuple[float, float],
    *,
    direction: str = "up",
    alternatives: Sequence[tuple[Curve, tuple[float, float]]] = (),
) -> list[IntervalTests]:
    """Test each interval ``(start, end)`` (cell indices) of one curve against its trend.

    One :class:`~regimes._stats.interval_tests.IntervalTests` of one row per interval.

    ``p_value`` is Bonferroni-adjusted for a scan over every interval of the grid that
    :func:`flank_support` admits: whatever rule picks one of them from the same data,
    the adjusted p-value stays valid, and intervals that are never tested cost nothing.

    ``alternatives`` are the same cells in other trend coordinates (``u``), each with its
    whole-curve between-cell variance. Each interior interval is then tested in the
    coordinate whose trend fits the cells *around* it best: the smallest between-cell
    variance :func:`regimes._stats.between_cell.interval_tau` finds there. The choice never looks
    at the tested
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
    # interval_tests adjusts for all T(T+1)/2 - 1 intervals of the grid; rescaled to
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
        for k, (breaks, smooth) in zip(tested, framings, strict=True):
            start, end = intervals[k]
            fits[k].append((interval_tau(c, start, end, breaks, smooth, tau), c, breaks, smooth))
    out = []
    for (start, end), candidates in zip(intervals, fits, strict=True):
        tau, c, breaks, smooth = min(candidates, key=lambda fit: fit[0][0])  # ties: the first
        est = CurveEstimates(c.u, c.level, c.var, c.df, *tau)
        _, first, last = interval_segments(start, end, t)
        tests = interval_tests(
            est, [(start, end, first, last)], breaks, smooth=smooth, direction=direction
        )
        p_value = np.where(tests.p_value < 1.0, tests.p_value * family, 1.0)
        out.append(replace(tests, p_value=p_value))
    return out


def fixed_interval_test(
    curve: Curve,
    start: int,
    end: int,
    prior_tau: tuple[float, float],
    *,
    direction: str = "up",
) -> IntervalTests:
    """Test cells ``start..end`` (indices) of one curve against its flank trend."""
    return scan_intervals(curve, [(start, end)], prior_tau, direction=direction)[0]
