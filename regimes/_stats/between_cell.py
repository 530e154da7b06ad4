r"""The between-cell ("process") variance :math:`\tau^2` of a curve.

Cells wobble around any smooth trend by more than their replication noise: a kernel
choice, a cache state, the allocator. That wobble, shared by a curve's cells, enters
every contrast's variance next to the cells' sampling variances
(:mod:`regimes._stats.contrasts`). It is estimated robustly, so a few jumps do not move
it (:func:`between_cell_variance`): from the spread of the cells around the fitted
trend and segments, or, before segmenting, from second differences that annihilate
straight lines; either way the total minus the sampling part. The scale is the Qn
estimator of Rousseeuw and Croux (1993), vectorised over curves (:func:`qn_scale_rows`).
A curve too short for its own estimate borrows the median of the others
(:func:`curve_taus`). A test of a fixed interval estimates it without the interval's
cells (:func:`interval_tau`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from regimes._stats.curves import Curve
from regimes._stats.trends import SmoothTrend, default_degree

__all__ = [
    "between_cell_variance",
    "curve_taus",
    "fill_missing_taus",
    "interval_tau",
    "qn_scale_rows",
]

_QN_CONSTANT = float(1.0 / (np.sqrt(2.0) * stats.norm.ppf(5.0 / 8.0)))


def qn_scale_rows(values: np.ndarray) -> np.ndarray:
    """Qn scale (Croux & Rousseeuw) of each row of a 2-D array, NaN-free rows.

    Same estimator and constant as :func:`statsmodels.robust.scale.qn_scale`; written
    here because that one applies a Python function per row, which costs a quarter of a
    millisecond per curve, while one vectorised partition serves all curves of a length.
    """
    values = np.atleast_2d(np.asarray(values, dtype=float))
    n = values.shape[1]
    if n < 2:
        return np.full(values.shape[0], np.nan)
    if n > 400:
        # all pairs would cost n^2 memory; statsmodels has the O(n log n) algorithm
        from statsmodels.robust.scale import qn_scale

        return np.asarray([qn_scale(row) for row in values], dtype=float)
    h = n // 2 + 1
    k = h * (h - 1) // 2
    i, j = np.triu_indices(n, k=1)
    diffs = np.abs(values[:, i] - values[:, j])
    return _QN_CONSTANT * np.partition(diffs, k - 1, axis=1)[:, k - 1]


def _second_difference_weights(u: np.ndarray) -> np.ndarray:
    """Rows of unit-norm weights on (t-1, t, t+1) that vanish on straight lines in u."""
    h1 = np.diff(u)[:-1]
    h2 = np.diff(u)[1:]
    w = np.stack([1.0 / h1, -(1.0 / h1 + 1.0 / h2), 1.0 / h2], axis=1)
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def between_cell_variance(
    u: np.ndarray,
    level: np.ndarray,
    var: np.ndarray,
    breaks: Sequence[int] | None = None,
    smooth: np.ndarray | None = None,
) -> tuple[float, float]:
    r""":math:`(\tau^2, df)` of one curve, or ``(nan, 0)`` with too few cells.

    Without ``breaks``: MAD (about the median) of the unit-norm second differences,
    which tolerates the few large values a jump creates even when they come in
    same-signed pairs (a pairwise scale such as Qn does not); df: the differences
    overlap (about half as many independent ones) and the MAD is 37 % efficient.

    With ``breaks`` and the curve's ``smooth`` trend: the residuals
    :math:`\ell_t - G_t` minus their segment's mean, inflated by
    :math:`1/\sqrt{1 - 1/m}` for a segment of ``m`` cells, are nearly independent with
    variance :math:`v_t + \tau^2`; their Qn scale (82 % efficient) gives the total.
    Used when it has at least 4 degrees of freedom; it has about twice those of the
    second differences, which matters on short curves where :math:`\tau^2` dominates.

    Either way :math:`\tau^2` is the total minus the median sampling variance.
    """
    u = np.asarray(u, dtype=float)
    t = u.size
    if breaks is not None and smooth is not None:
        edges = [0, *[int(b) for b in breaks], t]
        parts, sampling = [], []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            m = hi - lo
            if m < 2:
                continue
            r = level[lo:hi] - smooth[lo:hi]
            parts.append((r - r.mean()) / np.sqrt(1.0 - 1.0 / m))
            sampling.append(var[lo:hi])
        dof = 0.82 * sum(p.size - 1 for p in parts)
        if dof >= 4:
            total = float(qn_scale_rows(np.concatenate(parts)[None, :])[0] ** 2)
            return max(0.0, total - float(np.median(np.concatenate(sampling)))), dof
    if t < 5:
        return float("nan"), 0.0
    w = _second_difference_weights(u)
    d2 = w[:, 0] * level[:-2] + w[:, 1] * level[1:-1] + w[:, 2] * level[2:]
    sampling_d2 = w[:, 0] ** 2 * var[:-2] + w[:, 1] ** 2 * var[1:-1] + w[:, 2] ** 2 * var[2:]
    spread = 1.4826 * float(np.median(np.abs(d2 - np.median(d2))))
    tau2 = max(0.0, spread**2 - float(np.median(sampling_d2)))
    return tau2, max(1.0, 0.5 * 0.37 * d2.size)


def fill_missing_taus(taus: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Fill in the between-cell variance of curves too short for their own.

    Replaces their ``(nan, 0)`` by the median ``(tau2, df)`` of the others (``(0, 0)`` when no
    curve has one).
    """
    known = [t for t in taus if math.isfinite(t[0])]
    fallback = (
        (float(np.median([t[0] for t in known])), float(np.median([t[1] for t in known])))
        if known
        else (0.0, 0.0)
    )
    return [t if math.isfinite(t[0]) else fallback for t in taus]


def curve_taus(curves: Sequence[Curve]) -> list[tuple[float, float]]:
    """Estimate each curve's whole-curve between-cell variance ``(tau2, df)``.

    With the fallback of :func:`fill_missing_taus`.
    """
    return fill_missing_taus([between_cell_variance(c.u, c.level, c.var) for c in curves])


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
      (:func:`between_cell_variance` with ``breaks`` and ``smooth``),
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
    r"""Estimate ``(tau2, df, sampling)`` around a least-squares polynomial.

    The polynomial goes through the cells; or ``None`` without a residual degree of freedom.

    The degree is :func:`regimes._stats.trends.default_degree` lowered until each
    coefficient has four cells (a line below 8 cells). With hat values :math:`h_i`,
    :math:`E[\mathrm{RSS}] = \sum_i (1 - h_i)(v_i + \tau^2)`, so
    :math:`\hat\tau^2 = \max(0, (\mathrm{RSS} - \sum_i (1 - h_i) v_i) / (n - p))` with
    :math:`n - p` degrees of freedom; ``sampling`` is :math:`\sum_i (1-h_i) v_i/(n-p)`.
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
    r"""Carry the uncertainty of an estimated total variance into ``(tau2, df)``.

    For :func:`regimes._stats.contrasts.contrast_test`: keeps the uncertainty of the estimated
    *total* :math:`s^2 = \tau^2 + v`.

    :math:`\hat\tau^2 = s^2 - v` varies as :math:`s^2` does, :math:`2 s^4 / d`, so its
    Satterthwaite df is :math:`d\,(\hat\tau^2 / s^2)^2`; at :math:`\hat\tau^2 = 0` a
    vanishing floor keeps that term, whose share of the contrast's variance
    does not depend on the floor.
    """
    total = tau2 + sampling
    if not (math.isfinite(total) and total > 0 and df > 0):
        return max(0.0, tau2), df
    tau2 = max(tau2, 1e-9 * total)
    return tau2, df * (tau2 / total) ** 2
