"""What a fitted row's selected intervals mean as regimes of a curve.

The fit writes its intervals by the conventions of :mod:`regimes._stats.intervals` (a
curve starts at its normal level; nested regimes that share a boundary side by side);
every stage that reads a fit reads them from here.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from regimes._stats.intervals import START_CELLS, as_step, candidate_intervals
from regimes._stats.scan import RowFit
from regimes.data.schema import n_boot_floor

__all__ = [
    "KMAX",
    "START_CELLS",
    "WIDTH_CLASSES",
    "as_step",
    "canonical",
    "classes_on",
    "spread",
    "width_class",
]

KMAX = 4
"""Most regimes one curve's model holds."""

WIDTH_EDGES = np.array([2, 4])
"""Widths (cells) at which a regime's class changes: 1, 2-3, 4 or more."""

WIDTH_CLASSES = WIDTH_EDGES.size + 1
"""Number of width classes, each with its own null maxima."""


def width_class(width: np.ndarray) -> np.ndarray:
    """Return the class of each regime width: 0 for 1 cell, 1 for 2-3, 2 for 4 or more."""
    return np.searchsorted(WIDTH_EDGES, width, side="right")


def classes_on(t: int) -> int:
    """Return how many width classes a grid of ``t`` cells holds (three cells stay out)."""
    return int(width_class(np.array(max(1, t - 3)))) + 1


def canonical(fit: RowFit, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row's regimes as arrays ``(K, KMAX)``: start, end, signed delta (NaN unused)."""
    starts, ends = candidate_intervals(t)
    idx = np.maximum(fit.chosen, 0)
    return starts[idx], ends[idx], np.where(fit.chosen >= 0, fit.delta, np.nan)


def spread(
    found: RowFit, t: int, regime: tuple[int, int, float, float], level: float, df: float
) -> tuple[tuple[int, int, int, int], tuple[float, float] | None]:
    """Bounds on a regime's onset and end, and its delta's basic interval, over draws.

    The draws are made under the fitted model, so their regime's delta spreads around
    the estimate as the estimate spreads around the truth, selection's bias included:
    the basic interval ``2 delta - q_hi .. 2 delta - q_lo`` (Davison and Hinkley, 1997,
    section 5.2) turns that spread back, widened about ``delta`` by
    :math:`t_{df}/z` at the interval's level: the draws take the cell noise as known,
    while the curve estimated it on ``df`` degrees of freedom (Hesterberg's expanded
    percentile interval, 2015). It is ``None`` where fewer draws than
    :func:`regimes.data.schema.n_boot_floor` found the regime (a quantile of so few is
    not an interval); it never leaves out the estimate itself.
    """
    s, e, delta, _ = regime
    a, b, d = canonical(found, t)
    overlap = np.minimum(b, e) - np.maximum(a, s) + 1
    overlap = np.where(np.sign(np.nan_to_num(d)) == np.sign(delta), overlap, 0)
    best = np.argmax(overlap, axis=1)
    rows = np.flatnonzero(overlap[np.arange(overlap.shape[0]), best] > 0)
    if rows.size == 0:
        return (s, s, e, e), None
    lo, hi = (1.0 - level) / 2.0, (1.0 + level) / 2.0
    starts, ends = a[rows, best[rows]], b[rows, best[rows]]
    bounds = (
        int(np.quantile(starts, lo, method="lower")),
        int(np.quantile(starts, hi, method="higher")),
        int(np.quantile(ends, lo, method="lower")),
        int(np.quantile(ends, hi, method="higher")),
    )
    if rows.size < n_boot_floor(level):
        return bounds, None
    q_lo, q_hi = np.quantile(d[rows, best[rows]], [lo, hi])
    # the draws take the curve's noise as known; its estimate rests on df degrees of
    # freedom, so the spread is widened as a t quantile widens a normal one
    widen = float(special.stdtrit(df, hi) / special.ndtri(hi))
    low, high = delta - widen * (q_hi - delta), delta + widen * (delta - q_lo)
    return bounds, (min(low, delta), max(high, delta))
