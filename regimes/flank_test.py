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
* **between-cell variance, interval left out.** The curve's process variance
  :math:`\\tau^2` (:func:`regimes.intervals.between_cell_variance`) is estimated without
  the tested cells. On a short curve a single anomalous cell enters most second
  differences (3 of 4 with 6 cells) and would inflate a whole-curve estimate until
  nothing is significant. With fewer than 5 cells left the whole-curve estimate is used.

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

from .changepoints import difference_trend
from .intervals import CurveEstimates, IntervalTests, between_cell_variance, test_intervals

__all__ = ["Curve", "curve_from_levels", "interval_segments", "test_fixed_interval",
           "whole_curve_taus"]


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


def interval_segments(start: int, end: int, t: int, flank: int = 3) -> tuple[list[int], int, int]:
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


def test_fixed_interval(
    curve: Curve,
    start: int,
    end: int,
    whole_tau: tuple[float, float],
    *,
    direction: str = "up",
    level: float = 0.95,
) -> IntervalTests:
    """Test cells ``start..end`` (indices) of one curve against its flank trend."""
    u, level_values, var, dof = curve.u, curve.level, curve.var, curve.df
    t = u.size
    if start == 0 and end == t - 1:
        raise ValueError("the interval covers the whole grid: no flank to compare with")
    keep = np.r_[0:start, end + 1:t]
    tau = between_cell_variance(u[keep], level_values[keep], var[keep])
    est = CurveEstimates(u, level_values, var, dof,
                         *(tau if math.isfinite(tau[0]) else whole_tau))
    breaks, first, last = interval_segments(start, end, t)
    # test_intervals reads the smooth trend only for intervals touching an end.
    touches_end = start == 0 or end == t - 1
    smooth = difference_trend(u, level_values, est.total_var, breaks) if touches_end else None
    return test_intervals(est, [(start, end, first, last)], breaks, smooth=smooth,
                          direction=direction, level=level)
