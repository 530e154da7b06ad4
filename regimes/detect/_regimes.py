"""What a fitted row's selected intervals mean as regimes of a curve.

The trend has a free constant, so a regime touching the first cell and its complement,
a step to the end of the grid, are the same model; which one a curve holds is a
convention, stated once here and used by every stage that reads a fit.
"""

from __future__ import annotations

import numpy as np

from regimes._stats.scan import RowFit, candidate_intervals
from regimes.data.schema import n_boot_floor

__all__ = ["KMAX", "START_CELLS", "as_step", "canonical", "spread"]

KMAX = 4
"""Most regimes one curve's model holds."""

START_CELLS = 2
"""Longest regime read at the start of the grid; a longer one is a step to the end."""


def as_step(end: np.ndarray | int, t: int) -> np.ndarray | bool:
    """Whether the regime ``[0, end]`` is read as its complement, a step to the end.

    A curve starts at its normal level, so a departure from the start is a step (up or
    down) from where the curve leaves it, unless it is over by :data:`START_CELLS` cells
    and shorter than the rest: then it is an edge, or a spike over the first budgets.
    """
    width = np.asarray(end) + 1
    return (width > START_CELLS) | (t - width < width)


def canonical(fit: RowFit, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row's regimes as arrays ``(K, KMAX)``: start, end, signed delta (NaN unused)."""
    starts, ends = candidate_intervals(t)
    used = fit.chosen >= 0
    idx = np.maximum(fit.chosen, 0)
    a, b = starts[idx], ends[idx]
    flip = used & (a == 0) & as_step(b, t)
    a, b = np.where(flip, b + 1, a), np.where(flip, t - 1, b)
    delta = np.where(used, np.where(flip, -fit.delta, fit.delta), np.nan)
    return a, b, delta


def spread(
    found: RowFit, t: int, regime: tuple[int, int, float, float], level: float
) -> tuple[tuple[int, int, int, int], tuple[float, float] | None]:
    """Bounds on a regime's onset and end, and its delta's basic interval, over draws.

    The draws are made under the fitted model, so their regime's delta spreads around
    the estimate as the estimate spreads around the truth, selection's bias included:
    the basic interval ``2 delta - q_hi .. 2 delta - q_lo`` (Davison and Hinkley, 1997,
    section 5.2) turns that spread back. It is ``None`` where fewer draws than
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
    return bounds, (min(2.0 * delta - q_hi, delta), max(2.0 * delta - q_lo, delta))
