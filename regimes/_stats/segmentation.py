r"""Change points along ``x``: penalised l2 segmentation of detrended, standardised levels.

A latency curve rises smoothly with the budget, so segmenting the cell levels directly
would cut every smooth rise into a staircase. Instead:

1. the curve's smooth trend is fitted (:mod:`regimes._stats.trends`), first to its first
   differences, which no jump can bend;
2. residuals are standardised by each cell's total standard deviation
   :math:`\sqrt{v_t + \tau^2}` (sampling plus between-cell variance), so under the
   null they are roughly N(0, 1) and the penalty needs no tuning;
3. :func:`segment` runs ``ruptures.KernelCPD(kernel="linear")``: the exact l2
   (piecewise-constant) segmentation, solved in C, with a BIC-like penalty
   :math:`\beta = c \log T` per change point in units of the unit noise variance
   (``c = 2``: each change adds a location and a level);
4. trend and breaks are refined in turn (:func:`segment_curves`).

The shifts at the breaks are tested in :mod:`regimes._stats.interval_tests`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import ruptures as rpt

from regimes._stats.trends import (
    SmoothTrend,
    centre_within,
    difference_trends,
    level_trends,
    segment_index,
)

__all__ = ["bic_penalty", "segment", "segment_curve", "segment_curves"]


def _penalised_costs(
    standardised: np.ndarray, breaks: Sequence[Sequence[int]], penalty: float
) -> np.ndarray:
    """l2 cost of the segment means plus ``penalty`` per break (ruptures' objective)."""
    ids = segment_index(breaks, standardised.shape[1])
    centred = centre_within(standardised, np.ones_like(standardised), ids)
    return np.sum(centred**2, axis=1) + penalty * np.asarray([len(b) for b in breaks])


def segment_curves(
    u: np.ndarray,
    level: np.ndarray,
    total_var: np.ndarray,
    penalty: float,
    max_rounds: int = 4,
) -> tuple[list[list[int]], list[SmoothTrend]]:
    """:func:`segment_curve` for curves of equal length (rows), fitted together."""
    g = u.shape[0]
    sd = np.sqrt(total_var)
    no_breaks: list[list[int]] = [[] for _ in range(g)]
    starts = (
        difference_trends(u, level, total_var),
        np.stack([f.values for f in level_trends(u, level, total_var, no_breaks)]),
    )
    best_cost = np.full(g, np.inf)
    best_breaks: list[list[int]] = [[] for _ in range(g)]
    best_fits: list[SmoothTrend | None] = [None] * g
    first_breaks: list[list[int]] | None = None
    for start in starts:
        breaks = [segment(row, penalty) for row in (level - start) / sd]
        if first_breaks is None:
            first_breaks = breaks
        elif breaks == first_breaks:
            break  # the same start as before: the same end

        for _ in range(max_rounds):
            fits = level_trends(u, level, total_var, breaks)
            values = np.stack([f.values for f in fits])
            new_breaks = [segment(row, penalty) for row in (level - values) / sd]
            if new_breaks == breaks:
                break
            breaks = new_breaks
        else:
            fits = level_trends(u, level, total_var, breaks)
            values = np.stack([f.values for f in fits])
        cost = _penalised_costs((level - values) / sd, breaks, penalty)
        better = cost < best_cost
        for row in np.flatnonzero(better):
            best_breaks[row], best_fits[row] = breaks[row], fits[row]
        best_cost = np.where(better, cost, best_cost)
    return best_breaks, best_fits  # type: ignore[return-value]


def segment_curve(
    u: np.ndarray,
    level: np.ndarray,
    total_var: np.ndarray,
    penalty: float,
    max_rounds: int = 4,
) -> tuple[list[int], SmoothTrend]:
    """Segment one curve: its breaks and the smooth trend they were found against.

    Trend and breaks are refined in turn: :func:`level_trend` given the current breaks,
    then :func:`segment` of the standardised residuals, until the breaks stop changing
    (at most ``max_rounds`` refits). The alternation can settle on a staircase that
    mimics a bend of the trend, or on a trend that follows a plateau, depending on where
    it starts, so it starts twice: from :func:`difference_trend`, which no jump can
    bend, and from the robust polynomial of the levels without breaks, which no noisy
    slope can tilt. The result with the lower penalised cost (ruptures' objective on
    the final residuals) wins. :func:`segment_curves` does the same for many curves of
    equal length at once.
    """
    breaks, fits = segment_curves(
        np.asarray(u, float)[None],
        np.asarray(level, float)[None],
        np.asarray(total_var, float)[None],
        penalty,
        max_rounds,
    )
    return breaks[0], fits[0]


def bic_penalty(n_cells: int, factor: float = 2.0) -> float:
    """Penalty per change point for unit-variance l2 segmentation: ``factor * log(T)``."""
    return factor * float(np.log(max(n_cells, 2)))


def segment(standardised: np.ndarray, penalty: float) -> list[int]:
    """Return the indices where a new segment starts (exact l2, ``min_size=1``)."""
    t = standardised.size
    if t < 2:
        return []
    signal = np.ascontiguousarray(standardised, dtype=float).reshape(-1, 1)
    ends = rpt.KernelCPD(kernel="linear", min_size=1, jump=1).fit(signal).predict(pen=penalty)
    return [int(e) for e in ends[:-1]]
