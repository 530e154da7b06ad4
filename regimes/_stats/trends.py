"""Smooth trends of a curve's log cell levels, and the coordinate they are smooth in.

**Coordinate** (:func:`trend_coordinate`). Latency is close to a power of the budget, so
its log is close to a straight line in ``log x``: the trend coordinate is ``log x`` when
every ``x`` is positive, else ``x`` itself.

**Trend** (:class:`SmoothTrend`). A polynomial in the coordinate (degree from
:func:`default_degree`), fitted with Tukey's biweight so that anomalous cells lose their
weight. Two fits:

* :func:`difference_trends` fits the polynomial to the curve's *first differences*: a
  jump touches one difference only, so neither a plateau over most of the grid nor an
  early step bends it. It is the starting point of segmentation.
* :func:`level_trends` fits the levels themselves with a free level per segment (the
  shifts absorb the steps; Frisch-Waugh centring within segments), the efficient
  estimate once the breaks are known. It is linear in the levels at the final robust
  weights, so the trend's own uncertainty enters every contrast built on it.

Both are batched: one call fits every curve of one length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import NamedTuple

import numpy as np

__all__ = [
    "SmoothTrend",
    "centre_within",
    "default_degree",
    "difference_trend",
    "difference_trends",
    "grouped_trends",
    "level_trend",
    "level_trends",
    "segment_index",
    "trend_coordinate",
]


def trend_coordinate(x: np.ndarray) -> np.ndarray:
    """``log x`` when every ``x`` is positive, else ``x`` (as floats)."""
    x = np.asarray(x)
    return np.log(x) if bool(np.all(x > 0)) else x.astype(float)


@dataclass(frozen=True)
class SmoothTrend:
    r"""A curve's smooth trend :math:`G = B\,M\,\ell`, linear in the levels.

    ``basis`` (T x k) holds the polynomial columns and ``coef_map`` (k x T) maps levels
    to their coefficients at the fit's final robust weights, so any contrast of the
    residuals :math:`c^\top(\ell - G)` is the contrast :func:`adjust` ``(c)`` of the
    levels themselves, and its variance includes the trend's own uncertainty.
    """

    values: np.ndarray
    basis: np.ndarray
    coef_map: np.ndarray

    def adjust(self, c: np.ndarray) -> np.ndarray:
        """Coefficients on the levels of the residual contrast ``c @ (level - G)``."""
        return c - (c @ self.basis) @ self.coef_map

    def linear_ends(
        self, u: np.ndarray, lead: int, trail: int, lead_degree: int = 1
    ) -> SmoothTrend:
        """Continue the trend straight over its first ``lead`` and last ``trail`` cells.

        A polynomial is least reliable where it is extrapolated: at the ends of the grid,
        over cells (one or two) whose own level is free, its curvature is unchecked. There
        the trend becomes the straight line, in ``u``, through its values at the three
        cells next to them, which keeps it linear in the levels. ``lead_degree = 2``
        continues the start with the parabola through those three values instead: the
        trend's own curvature there, carried on (the alternative continuation of
        docs/method.md, section 7).
        """
        t = u.size
        if t < lead + trail + 3 or (lead == 0 and trail == 0):
            return self
        values, basis = self.values.copy(), self.basis.copy()
        for cells, near, degree in (
            (np.arange(lead), np.arange(lead, lead + 3), lead_degree),
            (np.arange(t - trail, t), np.arange(t - trail - 3, t - trail), 1),
        ):
            if cells.size == 0:
                continue
            design = np.vander(u[near], degree + 1, increasing=True)
            weights = np.vander(u[cells], degree + 1, increasing=True) @ np.linalg.pinv(design)
            values[cells] = weights @ values[near]
            basis[cells] = weights @ basis[near]
        return SmoothTrend(values, basis, self.coef_map)

    @classmethod
    def fixed(cls, values: np.ndarray) -> SmoothTrend:
        """Take a trend as known (its uncertainty ignored), e.g. from another fit."""
        values = np.asarray(values, dtype=float)
        return cls(values, np.zeros((values.size, 0)), np.zeros((0, values.size)))


_BIWEIGHT_C = 4.685
"""Tukey biweight tuning constant: 95 % efficiency at the normal."""


def default_degree(n_cells: int) -> int:
    """Trend degree for a curve of ``n_cells``: 2 below 20 cells, 3 below 32, else 4.

    The log of ``a + b x + c x^2`` is a sigmoid-like function of ``log x`` when the fixed
    cost matters; over a 50-fold budget range a quadratic misfits it by up to 5 %
    (several standard errors with 20 trials), a quartic by under 0.3 %. Short curves
    keep a low degree: where breaks leave few differences, a high-degree polynomial
    swings wildly.
    """
    if n_cells < 4:
        return 1
    return 2 if n_cells < 20 else 3 if n_cells < 32 else 4


def _degrees(n_cells: int, free_cells: np.ndarray) -> np.ndarray:
    """Per curve: :func:`default_degree`, lowered until each coefficient has 4 cells."""
    degree = np.full(free_cells.shape, default_degree(n_cells))
    while True:
        short = (degree > 1) & (free_cells < 4 * (degree + 1))
        if not short.any():
            return degree
        degree[short] -= 1


def _basis(u: np.ndarray, degree: int) -> np.ndarray:
    """Power basis without constant of each row of ``u``: shape (curves, cells, degree)."""
    bits = np.ascontiguousarray(u, dtype=float).view(np.uint64)
    if u.shape[0] > 1 and bool((bits == bits[:1]).all()):
        # curves on one grid (bit for bit) share one basis: each row's arithmetic is the
        # first row's, so its powers are computed once
        return np.repeat(_basis(u[:1], degree), u.shape[0], axis=0)
    centre = u.mean(axis=1, keepdims=True)
    spread = np.ptp(u, axis=1, keepdims=True)
    v = (u - centre) / np.where(spread > 0, spread, 1.0)
    return np.stack([v**k for k in range(1, degree + 1)], axis=2)


def segment_index(breaks: Sequence[Sequence[int]], n_cells: int) -> np.ndarray:
    """Segment number of every cell (curves x cells): how many breaks are at or before it."""
    starts = np.zeros((len(breaks), n_cells + 1), dtype=np.int64)
    rows = np.repeat(np.arange(len(breaks)), [len(b) for b in breaks])
    cuts = np.fromiter(chain.from_iterable(breaks), dtype=np.int64, count=rows.size)
    # a count per break start, summed along the curve: one pass, not a slice per break
    np.add.at(starts, (rows, np.minimum(cuts, n_cells)), 1)
    return np.cumsum(starts[:, :n_cells], axis=1)


def centre_within(values: np.ndarray, weight: np.ndarray, segment_ids: np.ndarray) -> np.ndarray:
    """Subtract each segment's weighted mean (per curve) from ``values`` (G, N[, P])."""
    p = values.shape[2] if values.ndim == 3 else 1
    return _centre_many((values,), weight, _segment_bins(segment_ids, p))[0]


class _Bins(NamedTuple):
    """Bincount bins of every cell's segment (``flat``) and of its ``p`` design columns."""

    flat: np.ndarray
    columns: np.ndarray
    p: int


def _segment_bins(segment_ids: np.ndarray, p: int) -> _Bins:
    """Build the bins :func:`_centre_many` sums in, once for many weights."""
    g, n = segment_ids.shape
    flat = (segment_ids + n * np.arange(g)[:, None]).ravel()
    return _Bins(flat, (flat[:, None] * p + np.arange(p)).ravel(), p)


def _centre_many(arrays: Sequence[np.ndarray], weight: np.ndarray, bins: _Bins) -> list[np.ndarray]:
    """:func:`centre_within` of several arrays at one set of weights and segments.

    The segments' weight totals are summed once for all of them, and the ``P`` columns
    of a 3-D array in one ``bincount`` (bin ``segment * P + column``): each bin still
    sums its own cells in cell order, so the means are those of one column at a time.
    """
    g, n = weight.shape
    flat, p = bins.flat, bins.p
    total = np.bincount(flat, weights=weight.ravel(), minlength=g * n)
    safe = np.where(total > 0, total, 1.0)
    out = []
    for values in arrays:
        if values.ndim == 2:
            means = np.bincount(flat, weights=(weight * values).ravel(), minlength=g * n) / safe
            out.append(values - means[flat].reshape(g, n))
            continue
        sums = np.bincount(
            bins.columns, weights=(weight[..., None] * values).ravel(), minlength=g * n * p
        )
        # in place, and a flat gather: indexing rows of a 2-D array of means is slower
        per_cell = sums.reshape(g * n, p)
        np.divide(per_cell, safe[:, None], out=per_cell)
        out.append(values - sums[bins.columns].reshape(g, n, p))
    return out


def _row_medians(z: np.ndarray) -> np.ndarray:
    """``np.median(z, axis=1, keepdims=True)`` from one sort of the rows.

    Rows of a few dozen values sort several times faster than numpy's median partitions
    them; the median is the same mean of the two middle values (of the middle one twice
    for odd rows, which is exact), and a row holding NaN gives NaN, as numpy's does.
    """
    n = z.shape[1]
    ordered = np.sort(z, axis=1)
    middle = np.mean(ordered[:, [(n - 1) // 2, n // 2]], axis=1, keepdims=True)
    return np.where(np.isnan(ordered[:, -1:]), np.nan, middle)


def _biweight_step(
    design: np.ndarray,
    values: np.ndarray,
    sd: np.ndarray,
    prior: np.ndarray,
    active: np.ndarray,
    bins: _Bins | None,
    weight: np.ndarray,
    median: Callable[..., np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """One IRLS step of :func:`_batched_biweight`: coefficients and the next weights."""
    k = design.shape[2]
    x, y = (design, values)
    if bins is not None:
        x, y = _centre_many((design, values), weight, bins)
    xw = x * weight[..., None]
    xw_t = np.swapaxes(xw, 1, 2)
    normal = xw_t @ x
    scale_diag = np.trace(normal, axis1=1, axis2=2)[:, None, None] / k + 1e-300
    ridge = 1e-10 * np.eye(k)
    coef = np.linalg.solve(normal + ridge * scale_diag, xw_t @ y[..., None])[..., 0]
    z = np.where(active, (y - (x @ coef[..., None])[..., 0]) / sd, np.nan)
    centre = median(z)
    scale = np.maximum(1.0, 1.4826 * median(np.abs(z - centre)))
    r = np.nan_to_num(z / (_BIWEIGHT_C * scale), nan=2.0)
    bi = np.where(np.abs(r) < 1.0, (1.0 - r**2) ** 2, 0.0)
    new_weight = prior * bi
    # a curve left with too few points keeps its previous weights
    enough = (np.count_nonzero(new_weight, axis=1) > k)[:, None]
    return coef, np.where(enough, new_weight, weight)


def _batched_biweight(
    design: np.ndarray,
    values: np.ndarray,
    variance: np.ndarray,
    active: np.ndarray,
    segment_ids: np.ndarray | None = None,
    iterations: int = 8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tukey-biweight IRLS for many curves at once, prior weights ``active / variance``.

    ``design`` is (curves, points, coefficients). With ``segment_ids`` every column and
    the values are centred within segments at the current weights, which fits a free
    level per segment without a column per segment (Frisch-Waugh). The noise scale is
    floored at 1: it is known, and may only be inflated, never shrunk to chase outliers.
    Hand-written rather than ``statsmodels.RLM`` because one batched solve serves
    thousands of curves, where a Python loop of RLM fits costs milliseconds each.
    Returns coefficients (curves, k), final weights and the final (centred) design.
    """
    prior = np.where(active, 1.0 / variance, 0.0)
    median = _row_medians if bool(active.all()) else partial(np.nanmedian, axis=1, keepdims=True)
    weight = prior.copy()
    final = np.zeros((design.shape[0], design.shape[2]))
    # each curve stops when its own weights settle, so a curve's fit never depends on
    # which other curves share its batch; every step works on the unsettled rows only
    # (each row's arithmetic is its own, so dropping settled rows changes no result)
    live = np.arange(design.shape[0])
    rows = (design, values, np.sqrt(variance), prior, active, segment_ids)
    k = design.shape[2]
    bins = _segment_bins(segment_ids, k) if segment_ids is not None else None
    for _ in range(iterations):
        coef, new_weight = _biweight_step(*rows[:5], bins, weight[live], median)
        final[live] = coef
        moving = ~np.all(np.isclose(new_weight, weight[live], rtol=1e-6, atol=0.0), axis=1)
        weight[live] = new_weight
        if not moving.any():
            break
        if not moving.all():
            live = live[moving]
            rows = tuple(None if a is None else a[moving] for a in rows)  # type: ignore[assignment]
            bins = _segment_bins(rows[5], k) if rows[5] is not None else None
    x = centre_within(design, weight, segment_ids) if segment_ids is not None else design
    return final, weight, x


def difference_trends(
    u: np.ndarray,
    level: np.ndarray,
    total_var: np.ndarray,
    breaks: Sequence[Sequence[int]] | None = None,
) -> np.ndarray:
    """:func:`difference_trend` for curves of equal length, rows of 2-D arrays."""
    g, t = u.shape
    breaks = breaks if breaks is not None else [()] * g
    keep = np.ones((g, t - 1), dtype=bool)
    for row, cuts in enumerate(breaks):
        for b in cuts:
            keep[row, b - 1] = False
    degrees = _degrees(t, keep.sum(axis=1) + 1)
    out = np.empty((g, t))
    for degree in np.unique(degrees):
        rows = degrees == degree
        basis = _basis(u[rows], int(degree))
        design = basis[:, 1:] - basis[:, :-1]
        coef, _, _ = _batched_biweight(
            design,
            np.diff(level[rows], axis=1),
            total_var[rows, 1:] + total_var[rows, :-1],
            keep[rows],
        )
        trend = np.einsum("gtp,gp->gt", basis, coef)
        out[rows] = trend + np.median(level[rows] - trend, axis=1, keepdims=True)
    return out


def difference_trend(
    u: np.ndarray,
    level: np.ndarray,
    total_var: np.ndarray,
    breaks: Sequence[int] = (),
) -> np.ndarray:
    r"""Smooth trend of one curve, fitted to its *first differences*; returned at ``u``.

    The trend :math:`G` is a polynomial in ``u`` without constant (degree from
    :func:`default_degree`); its coefficients are fitted (Tukey biweight IRLS, weights
    from :math:`v_t + v_{t-1}`) to the rises
    :math:`\ell_t - \ell_{t-1} \approx G(u_t) - G(u_{t-1})`. A jump touches one
    difference only, so a plateau over most of the grid or a step early on does not
    bend the trend, where a robust fit of the levels themselves would follow the
    majority. Differences across ``breaks`` are left out.

    Such a fit uses the levels inefficiently (neighbouring differences share a cell),
    so it is the starting point of :func:`segment_curve`, not its end. The result is
    defined up to a constant; it is returned with median residual 0.
    """
    u = np.asarray(u, dtype=float)
    if u.size < 2:
        return np.asarray(level, dtype=float).copy()
    return difference_trends(
        u[None], np.asarray(level, float)[None], np.asarray(total_var, float)[None], [list(breaks)]
    )[0]


def level_trends(
    u: np.ndarray,
    level: np.ndarray,
    total_var: np.ndarray,
    breaks: Sequence[Sequence[int]],
) -> list[SmoothTrend]:
    """:func:`level_trend` for curves of equal length, rows of 2-D arrays."""
    return grouped_trends(u, level, total_var, segment_index(breaks, u.shape[1]))


def grouped_trends(
    u: np.ndarray, level: np.ndarray, total_var: np.ndarray, groups: np.ndarray
) -> list[SmoothTrend]:
    """Fit smooth trends with a free level per group of cells, for curves of equal length.

    ``groups`` (curves x cells) labels each cell ``0 .. G-1``; cells of one label share a
    level, which need not be contiguous (the normal cells on either side of an anomaly).
    The constant puts group 0 on the trend. Otherwise as :func:`level_trend`.
    """
    g, t = u.shape
    ids = np.asarray(groups, dtype=np.int64)
    degrees = _degrees(t, t - ids.max(axis=1))
    out: list[SmoothTrend | None] = [None] * g
    active = np.ones((g, t), dtype=bool)
    for degree in np.unique(degrees):
        rows = np.flatnonzero(degrees == degree)
        basis = _basis(u[rows], int(degree))
        coef, weight, centred = _batched_biweight(
            basis, level[rows], total_var[rows], active[rows], ids[rows]
        )
        xw = centred * weight[..., None]
        normal = np.swapaxes(xw, 1, 2) @ centred
        coef_map = np.linalg.pinv(normal) @ np.swapaxes(xw, 1, 2)
        values = np.einsum("gtp,gp->gt", basis, coef)
        # the constant puts the first segment on the trend (later ones keep their shifts);
        # it matters when segmenting, where residuals are divided by unequal deviations
        first = (ids[rows] == 0) * weight
        offset = np.sum(first * (level[rows] - values), axis=1) / np.maximum(
            first.sum(axis=1), 1e-300
        )
        values = values + offset[:, None]
        for k, row in enumerate(rows):
            out[row] = SmoothTrend(values=values[k], basis=basis[k], coef_map=coef_map[k])
    return out  # type: ignore[return-value]


def level_trend(
    u: np.ndarray,
    level: np.ndarray,
    total_var: np.ndarray,
    breaks: Sequence[int],
) -> SmoothTrend:
    """Smooth part of a robust fit of the levels by a polynomial plus a shift per break.

    Given the breaks this is the efficient estimate of the trend's shape (a fit to
    differences ignores that neighbouring differences share a cell, and drifts); the
    shifts absorb the steps, so the returned smooth part still leaves them in
    ``level - trend``. The shifts are fitted by centring within segments (Frisch-Waugh),
    and the degree is lowered until every coefficient has four cells. The trend is
    linear in the levels at the final robust weights; see :class:`SmoothTrend`.
    """
    return level_trends(
        np.asarray(u, float)[None],
        np.asarray(level, float)[None],
        np.asarray(total_var, float)[None],
        [list(breaks)],
    )[0]
