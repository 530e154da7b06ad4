"""What a fitted row's selected intervals mean as regimes of a curve.

The fit writes its intervals by the conventions of :mod:`regimes._stats.intervals` (a
curve starts at its normal level; nested regimes that share a boundary side by side);
every stage that reads a fit reads them from here, after :func:`as_tested` has made it
what the tests read: its noise moderated, each regime's level its mean over its cells.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from regimes._stats.intervals import START_CELLS, as_step, candidate_intervals
from regimes._stats.scan import RowFit, mean_levels
from regimes.data.schema import n_boot_floor

__all__ = [
    "KMAX",
    "PRIOR_DF",
    "START_CELLS",
    "WIDTH_CLASSES",
    "as_step",
    "as_tested",
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


PRIOR_DF = 4.0
"""Weight, in degrees of freedom, of the trials' own noise in each curve's cell noise."""


def _moderated(fit: RowFit, sampling: np.ndarray) -> RowFit:
    """Moderate each row's residual variance towards its cells' sampling variance.

    On a short grid the residual variance rests on a few degrees of freedom; the
    trials' own noise, estimated from many, is a floor the cells' noise cannot go under.
    The two are pooled as limma pools a variance with its prior (Smyth, 2004): with
    :data:`PRIOR_DF` degrees of freedom for the sampling variance. Where processes add
    noise beyond the trials, the pooled value is too small, and the bootstrap, which
    pools every draw the same way, carries that into the p-values.
    """
    pooled = (PRIOR_DF * sampling + fit.df * fit.sigma**2) / (PRIOR_DF + fit.df)
    return fit._replace(sigma=np.sqrt(pooled), df=fit.df + PRIOR_DF)


def as_tested(
    fit: RowFit, sampling: np.ndarray, t: int, direction: str, tau0: float, alpha: float
) -> RowFit:
    """Return ``fit`` as its regimes are tested: moderated noise, each regime's mean level.

    A regime nested in another counts in that one's level (:func:`mean_levels`) unless it
    could be reported on its own: in ``direction``, with its one-sided ``t`` p-value
    against ``tau0`` (log ``min_ratio``) under ``alpha``. Its reported p-value is never
    smaller (the null draws' and the false discovery rate's adjustments only raise it),
    so a nested regime counted in is never reported, and one reported is never counted
    in.
    """
    fit = _moderated(fit, sampling)
    used = fit.chosen >= 0
    se = np.maximum(fit.se_unit * fit.sigma[:, None], 1e-12)
    z = np.where(used, (np.abs(fit.coef) - tau0) / se, -np.inf)
    tested = (direction == "both") | ((fit.coef > 0) == (direction == "up"))
    # scipy.stats.t.isf's value, without its checks' cost on every row
    critical = special.stdtrit(fit.df, 1.0 - alpha)
    return mean_levels(fit, t, used & tested & (z > critical[:, None]))
