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
from regimes._stats.scan import RowFit, refit_without
from regimes._stats.smoother import Smoother
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
    "mean_levels",
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

    A draw finds the regime where its regime of the same sign that covers most of the
    regime's cells covers at least half of them: a regime nested in a longer one (a
    spike on a step) is one of its own, not the longer one measured short, whose level
    would spread the interval to the nested one's (``bench/accuracy.py``, a spike on a
    step: the step's interval was 1.62 times as high as low in the median without
    this match, 1.13 with it).
    """
    s, e, delta, _ = regime
    a, b, d = canonical(found, t)
    overlap = np.minimum(b, e) - np.maximum(a, s) + 1
    overlap = np.where(np.sign(np.nan_to_num(d)) == np.sign(delta), overlap, 0)
    best = np.argmax(overlap, axis=1)
    rows = np.flatnonzero(2 * overlap[np.arange(overlap.shape[0]), best] >= e - s + 1)
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


def mean_levels(fit: RowFit, t: int, apart: np.ndarray) -> RowFit:
    r"""Return ``fit`` with each regime's level the mean over its cells.

    With a regime :math:`i` nested in a regime :math:`j`, the coefficient
    :math:`\delta_j` is the level of the cells of :math:`j` outside :math:`i`. Unless
    :math:`i` is ``apart`` (a regime of its own, measured apart), its cells count in
    :math:`j`'s level, the mean over its :math:`w_j` cells,
    :math:`\delta_j + \sum_i (w_i / w_j)\,\delta_i`, with variance
    :math:`L\Sigma L^\top` for that contrast :math:`L`. A regime that only overlaps
    :math:`j` stays out of its level: over a flank budget it is no part of the regime
    (``bench/accuracy.py``, the published case: the ratio interval covered 0.877 of 593
    detections with overlaps counted in, 0.904 with nested regimes alone); where it
    could not be reported, :func:`as_tested` has left it out of the model before.

    Parameters
    ----------
    fit : RowFit
        As :func:`regimes._stats.scan.fit_rows` returns it: ``delta`` and ``se_unit``
        the coefficients'.
    t : int
        Cells of the grid.
    apart : numpy.ndarray
        ``(K, kmax)``: which regimes are left out of the level of a regime they are
        nested in.

    Returns
    -------
    RowFit
        With ``delta`` and ``se_unit`` the levels' (``coef`` and ``cov_unit`` as they were).
    """
    used = fit.chosen >= 0
    s, e, _ = canonical(fit, t)
    e1 = e + 1
    width = np.where(used, e1 - s, 1)
    # [k, j, i]: regime i strictly inside regime j, and counted in its level
    part = (
        used[:, None, :]
        & used[:, :, None]
        & (s[:, None, :] >= s[:, :, None])
        & (e1[:, None, :] <= e1[:, :, None])
        & (width[:, None, :] < width[:, :, None])
        & ~apart[:, None, :]
    )
    rows = np.flatnonzero(part.any(axis=(1, 2)))
    if not rows.size:
        return fit
    d = np.where(used[rows], fit.coef[rows], 0.0)
    contrast = np.eye(d.shape[1]) + part[rows] * (width[rows, None, :] / width[rows, :, None])
    spread = contrast @ fit.cov_unit[rows] @ np.swapaxes(contrast, 1, 2)
    delta, se_unit = fit.delta.copy(), fit.se_unit.copy()
    unused = ~used[rows]
    delta[rows] = np.where(unused, np.nan, np.einsum("kji,ki->kj", contrast, d))
    se = np.sqrt(np.maximum(np.diagonal(spread, axis1=1, axis2=2), 0.0))
    se_unit[rows] = np.where(unused, np.nan, se)
    return fit._replace(delta=delta, se_unit=se_unit)


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


def _reportable(
    fit: RowFit, sampling: np.ndarray, direction: str, tau0: float, alpha: float
) -> tuple[RowFit, np.ndarray]:
    """Return ``fit`` with its noise moderated, and which regimes could be reported.

    In ``direction``, with a one-sided ``t`` p-value against ``tau0`` under ``alpha``.
    """
    fit = _moderated(fit, sampling)
    used = fit.chosen >= 0
    se = np.maximum(fit.se_unit * fit.sigma[:, None], 1e-12)
    z = np.where(used, (np.abs(fit.coef) - tau0) / se, -np.inf)
    tested = (direction == "both") | ((fit.coef > 0) == (direction == "up"))
    # scipy.stats.t.isf's value, without its checks' cost on every row
    critical = special.stdtrit(fit.df, 1.0 - alpha)
    return fit, used & tested & (z > critical[:, None])


def _across(fit: RowFit, t: int, reportable: np.ndarray) -> np.ndarray:
    """Which regimes could not be reported and overlap one that could, neither inside the other."""
    s, e, _ = canonical(fit, t)
    si, ei, sj, ej = s[:, :, None], e[:, :, None], s[:, None, :], e[:, None, :]
    overlap = np.minimum(ei, ej) >= np.maximum(si, sj)
    nested = ((si >= sj) & (ei <= ej)) | ((sj >= si) & (ej <= ei))
    partly = np.any(overlap & ~nested & reportable[:, None, :], axis=2)
    return (fit.chosen >= 0) & ~reportable & partly


def as_tested(
    fit: RowFit,
    levels: np.ndarray,
    sm: Smoother,
    sampling: np.ndarray,
    direction: str,
    tau0: float,
    alpha: float,
) -> RowFit:
    """Return ``fit`` as its regimes are tested: moderated noise, each regime's mean level.

    A regime could be reported on its own when it lies in ``direction`` with its
    one-sided ``t`` p-value against ``tau0`` (log ``min_ratio``) under ``alpha``. Its
    reported p-value is never smaller (the null draws' and the false discovery rate's
    adjustments only raise it), so a regime that could not be reported never is. Such a
    regime that overlaps a reportable one partly is left out of the model, and its rows
    (``levels``, on the smoothers ``sm``) fitted again without it: it would set a step
    inside the reportable one that no test supports. One nested in another counts in
    that one's level (:func:`mean_levels`); a reportable one never does.
    """
    moderated, reportable = _reportable(fit, sampling, direction, tau0, alpha)
    across = _across(fit, sm.size, reportable)
    if across.any():
        fit = refit_without(levels, sm, fit, across)
        moderated, reportable = _reportable(fit, sampling, direction, tau0, alpha)
    return mean_levels(moderated, sm.size, reportable)
