r"""The regime model of one grid, fitted to many rows at once.

A row is the cell levels :math:`\ell` of one curve (observed, or one bootstrap draw):

.. math::

    \ell = g + Z\delta + e,

a smooth trend :math:`g` (:mod:`regimes._stats.smoother`), sparse piecewise-constant
departures :math:`Z\delta` (one indicator column per regime: an interval of cells) and
noise. For a fixed smoother, minimising over :math:`g` leaves the criterion
:math:`(\ell - Z\delta)^\top A (\ell - Z\delta)` with :math:`A = I - S`, so adding the
indicator :math:`z` of any interval reduces it by
:math:`(z^\top A r)^2 / z^\top A z`, with :math:`r` the current residual: one cumulative
sum gives it for every interval of the grid at once.

The fit, each step vectorised over rows:

1. the smoother's flexibility by generalised cross-validation (Craven and Wahba, 1979);
2. regimes by greedy forward selection (penalised segmentation of the model): each
   step adds the interval that reduces the residual sum of squares most, and the
   number of steps kept minimises :math:`T \log (\mathrm{RSS}_k / \nu_k) + k h^2`
   (:math:`\nu_k` the residual degrees of freedom), with
   :math:`h^2 = 2 c \log T`, a BIC-like penalty of :math:`c \log T` per change point,
   two per interval (Yao, 1988); at most ``kmax``; nested and neighbouring intervals
   are allowed, so a spike on a step, or right before one, is measured against the
   level around it;
3. the flexibility again by cross-validation with those regimes in the model, and the
   regimes selected again with it;
4. the intervals written by the conventions of :mod:`regimes._stats.intervals` (a step
   from the curve's normal level; nested pairs that share a boundary side by side), then
   :math:`\hat\delta = (Z^\top A Z)^{-1} Z^\top A \ell` with the sandwich variance
   :math:`\sigma^2 (Z^\top A Z)^{-1} Z^\top A^2 Z (Z^\top A Z)^{-1}` and
   :math:`\hat\sigma^2 = \lVert e \rVert^2 / \operatorname{tr}(A_Z^2)`, where
   :math:`e = A_Z \ell` is the residual of the joint fit.

Selection makes a naive test of :math:`\hat\delta` invalid; :mod:`regimes.detect`
calibrates it by running this same fit on bootstrap draws (docs/method.md).

References
----------
Craven, P. and Wahba, G. (1979). Smoothing noisy data with spline functions. *Numer.
Math.* 31, 377-403. Yao, Y.-C. (1988). Estimating the number of change-points via
Schwarz' criterion. *Stat. Probab. Lett.* 6, 181-189. Kim, Y.-J. and Gu, C. (2004).
Smoothing spline Gaussian regression: more scalable computation via efficient
approximation. *J. R. Stat. Soc. B* 66, 337-356.

The selection (:mod:`regimes._stats.selection`) is written here rather than taken from
``ruptures``: its segmentations are piecewise constant around a fixed signal, while this
model fits the trend and the regimes jointly, and every step runs on all bootstrap draws
of a grid at once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from regimes._stats.intervals import (
    as_steps,
    candidate_intervals,
    interval_indicators,
    side_by_side,
    slow_starts,
)
from regimes._stats.selection import TINY as _TINY
from regimes._stats.selection import Grid as _Grid
from regimes._stats.selection import Near, Scratch, explained_floor, scratch, select, select_near
from regimes._stats.smoother import GCV_GAMMA, KNOT_PRICE, Smoother, last_knot

__all__ = [
    "GCV_GAMMA",
    "RowFit",
    "difference_scale",
    "fit_rows",
    "refit_with",
    "refit_without",
    "selection_threshold",
]

_ROW_CELLS = 20_000_000
"""Rows x cells x intervals per chunk: bounds the memory of the per-interval arrays.

About 300 rows of a 50-cell grid, whose per-interval arrays hold 3 MB each. A chunk is
shared among the smoothers a fit offers (up to 32), and a quarter of this split each
smoother's rows into products of a few rows: 1.2 times the time of a 1M-row sweep."""

_MAX_ROWS = 2000
"""Most rows per chunk, however short the grid: on a 9-cell grid the bound above allows
49,000, whose bases, one per row and smoother offered, outgrow the caches (the power
tables of 200 curves took 3.2 s in such chunks, 2.7 s in chunks of 2,000, 2.8 s of
1,000)."""


class RowFit(NamedTuple):
    r"""The fitted model of each row.

    ``chosen``: interval indices, ``(K, kmax)``, -1 where unused; ``delta`` and
    ``se_unit`` (the standard error for unit noise) per chosen interval: its coefficient,
    or once :func:`mean_levels` has read the fit, its level over the trend across its
    cells; ``sigma``, ``df``: the residual scale and its degrees of freedom; ``which``:
    the smoother; ``trend``: the fitted trend :math:`g`, ``(K, T)``;
    ``coef``: each interval's coefficient :math:`\hat\delta`, the level of its cells
    outside the intervals nested in it over the level around it (the fitted values are
    the trend plus every coefficient over its cells), and ``cov_unit`` their covariance
    for unit noise ``(K, kmax, kmax)``, 0 where an interval is unused.
    """

    chosen: np.ndarray
    delta: np.ndarray
    se_unit: np.ndarray
    sigma: np.ndarray
    df: np.ndarray
    which: np.ndarray
    trend: np.ndarray
    coef: np.ndarray
    cov_unit: np.ndarray


def selection_threshold(t: int, penalty: float) -> float:
    """Return the standardised reduction an interval must exceed to enter the model."""
    return float(np.sqrt(2.0 * penalty * np.log(max(t, 3))))


class _Stack(NamedTuple):
    """The smoothers' arrays of :class:`_Grid`, stacked ``(S, ...)``: each row gathers its own.

    ``a``: the smoothers' ``A``; ``trace``: their traces; ``hinged``: whether each holds
    a hinge; ``a_squared``: the sum of the squares of each smoother's ``A``;
    ``last_step``: whether its hinge is in the grid's last step (one cell after the knot).
    """

    grids: list[_Grid]
    zaz: np.ndarray
    floor: np.ndarray
    a_cols: np.ndarray
    prefix2: np.ndarray
    a: np.ndarray
    trace: np.ndarray
    hinged: np.ndarray
    a_squared: np.ndarray
    last_step: np.ndarray


def _grid(
    a: np.ndarray, intervals: tuple[np.ndarray, np.ndarray], z: np.ndarray, knot: int
) -> _Grid:
    """Return what selection reads of smoother ``a``, hinged at ``knot`` (-1: unhinged)."""
    return _stacked(a[None], np.array([knot]), intervals, z).grids[0]


def _stacked(
    residual: np.ndarray, knots: np.ndarray, intervals: tuple[np.ndarray, np.ndarray], z: np.ndarray
) -> _Stack:
    """Return what selection reads of each smoother ``(S, T, T)``, hinged at ``knots``.

    Built for every smoother at once: a grid offers up to 32 smoothers (the ladder, and
    the ladder hinged at a knot and at either neighbour), and the prefix sums of each
    cost little next to each numpy call's own overhead, paid once per call here.
    """
    s, t, _ = residual.shape
    starts, ends = intervals
    # stored as rows: gathering rows is cheaper than gathering columns
    a_cols = np.zeros((s, t + 1, t))
    a_cols[:, 1:, :] = np.cumsum(residual, axis=2).transpose(0, 2, 1)
    p = np.zeros((s, t + 1, t + 1))
    p[:, 1:, 1:] = np.cumsum(np.cumsum(residual, axis=1), axis=2)
    e1 = ends + 1
    zaz = p[:, e1, e1] - p[:, starts, e1] - p[:, e1, starts] + p[:, starts, starts]
    floor = explained_floor(zaz)
    for knot in sorted(set(knots[knots >= 0].tolist())):
        # a regime from the knot or the cell after it, beside a hinge there, is a hinge a
        # cell away (or a step) read as two parts: a hinged trend never holds one
        near = (starts == knot) | (starts == knot + 1)
        near |= (starts == 0) & ((ends == knot - 1) | (ends == knot))  # their complements
        floor[knots == knot] = np.where(near, np.inf, floor[knots == knot])
    grids = [
        _Grid(residual[w], a_cols[w], zaz[w], floor[w], p[w], starts, ends, z, bool(k >= 0))
        for w, k in enumerate(knots.tolist())
    ]
    squared = np.array([np.sum(g.a**2) for g in grids])
    trace = np.array([np.trace(g.a) for g in grids])
    last = knots == last_knot(t)
    return _Stack(grids, zaz, floor, a_cols, p, residual, trace, knots >= 0, squared, last)


_RECENT = 2
"""Smoothers whose :class:`_Stack` is kept: a curve group's data, null draws and model
draws are fitted on one smoother, one after another. Few: on a 300-cell grid one
stack holds about 60 MB."""

_recent: dict[int, tuple[Smoother, _Stack]] = {}


def _stack_of(sm: Smoother) -> _Stack:
    """Return :func:`_stacked` of ``sm``, kept for the last :data:`_RECENT` smoothers.

    Keyed by identity (a smoother's arrays are not hashable; grids share one object,
    :func:`regimes._stats.smoother.smoother_for`), the smoother kept beside its stack so
    that its identity cannot pass to another while the entry lives. Built afresh, the
    stacks took 6 % of a 1M-row call.
    """
    hit = _recent.get(id(sm))
    if hit is not None and hit[0] is sm:
        return hit[1]
    t = sm.size
    st = _stacked(sm.residual, sm.knots, candidate_intervals(t), interval_indicators(t))
    _recent[id(sm)] = (sm, st)
    while len(_recent) > _RECENT:
        del _recent[next(iter(_recent))]
    return st


def _sums(values: np.ndarray, g: _Grid) -> np.ndarray:
    """``z'v`` for every candidate interval ``z``, each row of ``values`` ``(K, T)``."""
    # one matrix product (BLAS) instead of differences of prefix sums gathered per
    # interval: no index arrays to walk, and each sum is over its own cells only
    return values @ g.indicators


def _basis(st: _Stack, w: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    r"""Orthonormalise the chosen intervals in the metric of ``A`` (Gram-Schmidt).

    Row ``k`` on smoother ``w[k]`` of ``st``. Returns ``Q`` ``(K, kmax, T)`` with
    :math:`A_Z = A - Q^\top Q` (rows of zeros for unused intervals).
    """
    k_rows, kmax = chosen.shape
    t, g = st.a_cols.shape[2], st.grids[0]
    q = np.zeros((k_rows, kmax, t))
    prefix = np.zeros((k_rows, kmax, t + 1))
    rows = np.arange(k_rows)
    for j in range(kmax):
        idx = np.maximum(chosen[:, j], 0)
        den = st.zaz[w, idx]
        vec = st.a_cols[w, g.ends[idx] + 1] - st.a_cols[w, g.starts[idx]]
        if j:
            # the first interval has no earlier ones to be made orthogonal to
            zq = prefix[rows, :j, g.ends[idx] + 1] - prefix[rows, :j, g.starts[idx]]
            den = den - np.add.reduce(np.square(zq), axis=1)
            vec -= np.einsum("kj,kjt->kt", zq, q[:, :j])
        ok = (chosen[:, j] >= 0) & (den > st.floor[w, idx])
        # q starts at zero: an unused or explained interval keeps its row of zeros
        np.divide(vec, np.sqrt(np.where(ok, den, 1.0))[:, None], out=q[:, j], where=ok[:, None])
        if j + 1 < kmax:
            # the last interval's sums would serve a next one only
            prefix[:, j, 1:] = np.cumsum(q[:, j], axis=1)
    return q


def difference_scale(u: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Noise scale of each row from its unit-norm second differences, by their MAD.

    The weights of each difference vanish on straight lines in ``u``, and a level shift
    touches two differences only, so neither a bend nor a plateau over most of the grid
    moves it (Gasser, Sroka and Jennen-Steinmetz, 1986).
    """
    h = np.diff(u)
    w = np.stack([1 / h[:-1], -(1 / h[:-1] + 1 / h[1:]), 1 / h[1:]], axis=1)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    d = w[:, 0] * levels[:, :-2] + w[:, 1] * levels[:, 1:-1] + w[:, 2] * levels[:, 2:]
    return np.maximum(1.4826 * np.median(np.abs(d), axis=1), _TINY)


def _median(x: np.ndarray) -> np.ndarray:
    """``np.median(x, axis=1)``, to the bit, from one sort.

    On rows of a few dozen cells a sort costs a third of what ``np.median``'s partition
    around three pivots and its checks do.
    """
    t = x.shape[1]
    s = np.sort(x, axis=1)
    lo, hi = (t - 1) // 2, t // 2
    mid = s[:, lo] if lo == hi else (s[:, lo] + s[:, hi]) / 2
    # a NaN sorts last, and makes the median NaN
    return np.where(np.isnan(s[:, -1]), np.nan, mid)


def _gcv(levels: np.ndarray, st: _Stack, q: np.ndarray) -> np.ndarray:
    r"""Generalised cross-validation score of each row under every smoother, with regimes.

    :math:`T\,\mathrm{RSS} / (T - \gamma\,\nu)^2` with :math:`\nu` the degrees of
    freedom of trend and regimes and :math:`\gamma` = :data:`GCV_GAMMA`; ``q``: the
    regimes' basis under each smoother (:func:`_basis`), ``(S, K, kmax, T)``. Returns
    ``(S, K)``. Without regimes, :func:`_choose` scores robustly.
    """
    t = levels.shape[1]
    fitted = np.einsum("skjt,skj->skt", q, np.einsum("skjt,kt->skj", q, levels))
    e = np.matmul(levels, st.a) - fitted
    used = (t - st.trace)[:, None] + np.sum(q**2, axis=(2, 3))
    rss = np.sum(e**2, axis=2)
    return t * rss / np.maximum(t - GCV_GAMMA * used, _TINY) ** 2


def _final_rows(
    levels: np.ndarray, st: _Stack, w: np.ndarray, chosen: np.ndarray, q: np.ndarray | None
) -> tuple[np.ndarray, ...]:
    """Estimates, unit standard errors, residual scale, df, trend and covariance of each row.

    Row ``k`` holds the intervals ``chosen[k]`` on smoother ``w[k]`` of ``st``, rows
    ordered by smoother; ``q``: their basis (:func:`_basis`), where the joint choice
    built it already.

    The matrix products are made per smoother, on that smoother's rows (how BLAS rounds a
    product depends on its shape); everything else once over all rows.
    """
    k_rows, kmax = chosen.shape
    idx = np.maximum(chosen, 0)
    used = chosen >= 0
    s, e1 = st.grids[0].starts[idx], st.grids[0].ends[idx] + 1
    p, ws = st.prefix2, w[:, None, None]
    m = (
        p[ws, e1[:, :, None], e1[:, None, :]]
        - p[ws, s[:, :, None], e1[:, None, :]]
        - p[ws, e1[:, :, None], s[:, None, :]]
        + p[ws, s[:, :, None], s[:, None, :]]
    )
    pair = used[:, :, None] & used[:, None, :]
    m = np.where(pair, m, 0.0) + np.where(~used, 1.0, 0.0)[:, :, None] * np.eye(kmax)
    m_inv = np.linalg.pinv(m, hermitian=True)
    q = _basis(st, w, chosen) if q is None else q
    r0, zar, qa = np.empty(levels.shape), np.empty(chosen.shape), np.empty(q.shape)
    edges = np.searchsorted(w, np.arange(len(st.grids) + 1)).tolist()
    for g, a, b in zip(st.grids, edges[:-1], edges[1:], strict=True):
        if a < b:
            np.matmul(levels[a:b], g.a, out=r0[a:b])
            zar[a:b] = np.take_along_axis(_sums(r0[a:b], g), idx[a:b], axis=1)
            np.matmul(q[a:b], g.a, out=qa[a:b])
    zar = np.where(used, zar, 0.0)
    delta = np.einsum("kab,kb->ka", m_inv, zar)
    az = (st.a_cols[w[:, None], e1] - st.a_cols[w[:, None], s]) * used[:, :, None]
    cov = m_inv @ (az @ np.swapaxes(az, 1, 2)) @ m_inv
    se_unit = np.sqrt(np.maximum(np.diagonal(cov, axis1=1, axis2=2), 0.0))
    e = r0 - np.einsum("kjt,kj->kt", q, np.einsum("kjt,kt->kj", q, levels))
    df = (
        st.a_squared[w]
        - 2.0 * np.einsum("kjt,kjt->k", qa, q)
        + np.sum((q @ np.swapaxes(q, 1, 2)) ** 2, axis=(1, 2))
    )
    df = np.maximum(df, _TINY)
    sigma = np.sqrt(np.sum(e**2, axis=1) / df)
    cells = np.arange(levels.shape[1])[None, :, None]
    z = (cells >= np.where(used, s, levels.shape[1])[:, None, :]) & (
        cells < np.where(used, e1, 0)[:, None, :]
    )
    trend = levels - e - np.einsum("kti,ki->kt", z.astype(float), np.where(used, delta, 0.0))
    cov = np.where(pair, cov, 0.0)
    return np.where(used, delta, np.nan), np.where(used, se_unit, np.nan), sigma, df, trend, cov


def _choose(levels: np.ndarray, st: _Stack) -> np.ndarray:
    r"""Return the smoother of each row with the smallest robust cross-validation score.

    :math:`T\,\mathrm{RSS} / (T - \gamma\,\nu)^2` as :func:`_gcv`, with the residual
    sum of squares replaced by its robust counterpart (the squared median absolute
    residual, times ``T``), so that a spike the regimes have yet to explain does not pull
    the choice towards a trend that chases it. For every smoother at once: the stacked
    product is one product per smoother, as a call of its own makes it, and one sort
    serves every median.
    """
    t = levels.shape[1]
    e = np.abs(np.matmul(levels, st.a))  # (S, K, T)
    rss = t * (1.4826 * _median(e.reshape(-1, t)).reshape(e.shape[:2])) ** 2
    used = t - st.trace
    return np.argmin(t * rss / np.maximum(t - GCV_GAMMA * used, _TINY)[:, None] ** 2, axis=0)


def _select_all(
    levels: np.ndarray, grids: list[_Grid], which: np.ndarray, h: float, kmax: int, work: Scratch
) -> np.ndarray:
    chosen = np.full((levels.shape[0], kmax), -1)
    sets = [(w, which == w) for w in range(len(grids))]
    sets = [(w, rows) for w, rows in sets if rows.any()]
    picked = select([(levels[rows], grids[w]) for w, rows in sets], h * h, kmax, work)
    for (_, rows), part in zip(sets, picked, strict=True):
        chosen[rows] = part
    return chosen


def _joint(
    levels: np.ndarray, st: _Stack, chosen: np.ndarray, q: np.ndarray, h2: float
) -> np.ndarray:
    r"""Score of each smoother's trend and regimes together ``(S, K)``, smaller is better.

    :math:`T \log \mathrm{GCV} + k h^2 + \mathrm{edf} \log T`: the cross-validation
    score with the regimes in the model, each regime's selection penalty, and a BIC
    price for each degree of freedom of the trend, so that a flexible trend that takes
    a bend in costs what a regime over it costs, and one that takes a single cell at an
    end of the grid in costs more than the regime. A hinge's place is a parameter too:
    a hinged trend pays :data:`~regimes._stats.smoother.KNOT_PRICE` for the hinge's
    degree of freedom. ``chosen`` ``(S, K, kmax)`` and ``q``: each smoother's regimes
    and their basis.
    """
    t = levels.shape[1]
    k = np.sum(chosen >= 0, axis=2)
    edf = t - st.trace + (KNOT_PRICE - 1.0) * st.hinged
    gcv = t * np.log(np.maximum(_gcv(levels, st, q), _TINY * _TINY))
    return gcv + h2 * k + np.log(t) * edf[:, None]


def _fit_one(
    levels: np.ndarray,
    st: _Stack,
    h: float,
    kmax: int,
    held: np.ndarray | None,
    work: Scratch,
    near: Near | None = None,
) -> RowFit:
    """Fit every row: smoother by GCV, selection; where it selected, trend and regimes jointly.

    Where the first selection kept a regime, every smoother gets its own selection and
    the pair with the smallest :func:`_joint` score wins: a bent curve that one stiff
    trend leaves as a step is offered to a flexible trend without one (families
    ``curvature`` and ``mixed`` of ``bench/shapes.py``); so is a row whose first
    smoother is hinged: the unhinged ones with their regimes, the hinged ones without.
    Elsewhere the joint choice would repeat the first. Rows whose smoother is ``held``
    only select their regimes. ``st``: the grid's smoothers.
    """
    k_rows, grids = levels.shape[0], st.grids
    which = _choose(levels, st) if held is None else held.copy()
    if near is None:
        chosen = _select_all(levels, grids, which, h, kmax, work)
    else:
        chosen = select_near(levels, grids, which, near, h * h, kmax)
    # a hinge can take in part of a step and leave nothing to select: a row whose first
    # smoother is hinged is offered the others all the same, the unhinged ones with
    # their regimes (a hinged one's regimes would answer a hinge, not a step)
    selected = np.any(chosen >= 0, axis=1)
    again = np.flatnonzero((selected | st.hinged[which]) & (held is None))
    basis = np.zeros((k_rows, kmax, levels.shape[1]))
    if again.size:
        sub, first, kept = levels[again], which[again], selected[again]
        picks = np.repeat(chosen[again][None], len(grids), axis=0)
        # a row's own first smoother has made its selection already; one not offered
        # a smoother's regimes is scored on it without any
        others = [(w, (first != w) & (kept | ~st.hinged[w])) for w in range(len(grids))]
        others = [(w, other) for w, other in others if other.any()]
        picked = select([(sub[other], grids[w]) for w, other in others], h * h, kmax, work)
        for (w, other), part in zip(others, picked, strict=True):
            picks[w, other] = part
        # each row's basis is its own (no sum runs across rows): the winner's serves the
        # final fit, and the rows without a regime have an empty one
        smoother = np.repeat(np.arange(len(grids)), again.size)
        bases = _basis(st, smoother, picks.reshape(-1, kmax)).reshape((*picks.shape, -1))
        scores = _joint(sub, st, picks, bases, h * h)
        if st.last_step.any():
            # hinged in the last step: scored without regimes too (docs/method.md, 2)
            empty, none = np.full_like(picks, -1), np.zeros_like(bases)
            bare = np.where(st.last_step[:, None], _joint(sub, st, empty, none, h * h), np.inf)
            scores = np.concatenate([scores, bare])
            picks, bases = np.concatenate([picks, empty]), np.concatenate([bases, none])
        best = np.argmin(scores, axis=0)
        which[again] = best % len(grids)
        chosen[again] = picks[best, np.arange(again.size)]
        basis[again] = bases[best, np.arange(again.size)]
    # the same model written by the conventions: steps first, then the peaks at the
    # onset or end of another regime side by side with it, and slow starts read as
    # such (their estimates decide)
    chosen = as_steps(chosen, levels.shape[1])
    q = None if held is not None else basis
    fit = _final_by_smoother(levels, st, which, chosen, q)
    moved = side_by_side(chosen, fit.delta, levels.shape[1])
    slow = slow_starts(chosen, fit.delta, levels.shape[1])
    moved = np.where(moved == chosen, slow, moved)
    rows = np.flatnonzero((moved != chosen).any(axis=1))
    return _refitted(levels, st, fit, rows, moved[rows], None if q is None else q[rows])


def _refitted(
    levels: np.ndarray,
    st: _Stack,
    fit: RowFit,
    rows: np.ndarray,
    chosen: np.ndarray,
    q: np.ndarray | None,
) -> RowFit:
    """Return ``fit`` with ``rows`` fitted again with the intervals ``chosen`` (basis ``q``)."""
    if not rows.size:
        return fit
    part = _final_by_smoother(levels[rows], st, fit.which[rows], chosen, q)
    fields = []
    for whole, refitted in zip(fit, part, strict=True):
        field = whole.copy()
        field[rows] = refitted
        fields.append(field)
    return RowFit(*fields)


def _final_by_smoother(
    levels: np.ndarray,
    st: _Stack,
    which: np.ndarray,
    chosen: np.ndarray,
    q: np.ndarray | None,
) -> RowFit:
    """Return :func:`_final_rows` of every row on its own smoother, as a :class:`RowFit`."""
    # stable: each smoother's rows keep their order, as in a product over them alone
    order = np.argsort(which, kind="stable")
    parts = _final_rows(
        levels[order], st, which[order], chosen[order], None if q is None else q[order]
    )
    fields = []
    for part in parts:
        field = np.empty_like(part)
        field[order] = part
        fields.append(field)
    delta, se_unit, sigma, df, trend, cov = fields
    return RowFit(chosen.copy(), delta, se_unit, sigma, df, which.copy(), trend, delta, cov)


def refit_with(levels: np.ndarray, sm: Smoother, which: np.ndarray, chosen: np.ndarray) -> RowFit:
    """Return each row of ``levels`` fitted with the intervals ``chosen`` on its smoother ``which``.

    Nothing is selected: a reading of the rows that the caller writes (the regimes of
    another fit, with one more or one less).
    """
    return _final_by_smoother(levels, _stack_of(sm), which, chosen, None)


def refit_without(levels: np.ndarray, sm: Smoother, fit: RowFit, drop: np.ndarray) -> RowFit:
    """Return ``fit`` with the rows that ``drop`` regimes fitted again without them.

    Parameters
    ----------
    levels : numpy.ndarray
        The rows ``fit`` was fitted to, ``(K, T)``.
    sm : Smoother
        Their grid's smoothers (each row keeps its own, ``fit.which``).
    fit : RowFit
        As :func:`fit_rows` returns it.
    drop : numpy.ndarray
        ``(K, kmax)``: the regimes to leave out.

    Returns
    -------
    RowFit
        The rows without a regime to drop as they were; the others with their remaining
        regimes first, estimates, noise and trend of the model without the dropped ones.
    """
    rows = np.flatnonzero(drop.any(axis=1))
    chosen = np.where(drop[rows], -1, fit.chosen[rows])
    chosen = np.take_along_axis(chosen, np.argsort(chosen < 0, axis=1, kind="stable"), axis=1)
    return _refitted(levels, _stack_of(sm), fit, rows, chosen, None)


def fit_rows(
    levels: np.ndarray,
    sm: Smoother,
    h: float,
    kmax: int,
    held: np.ndarray | None = None,
    near: Near | None = None,
) -> RowFit:
    """Fit the regime model to every row of ``levels`` ``(K, T)`` on grid ``sm``.

    Parameters
    ----------
    levels : numpy.ndarray
        Cell levels, one row per curve or bootstrap draw.
    sm : Smoother
        The grid's smoothers.
    h : float
        Selection threshold (:func:`selection_threshold`).
    kmax : int
        Most regimes per row.
    held : numpy.ndarray, optional
        Each row's smoother ``(K,)``, held instead of chosen: only the regimes are
        selected.
    near : Near, optional
        With ``held``: each row's block ``(K,)`` and, per block, the candidate intervals
        (indices of :func:`~regimes._stats.intervals.candidate_intervals`) its rows
        select among; by default every candidate.

    Returns
    -------
    RowFit
    """
    intervals = candidate_intervals(sm.size)
    st = _stack_of(sm)
    # rows per chunk: bounded by the memory of the per-interval arrays (rows selecting
    # near their blocks' regimes hold few intervals, and their own work arrays)
    n = 1 if near is not None else max(intervals[0].size, 1)
    chunk = min(_MAX_ROWS, max(1, _ROW_CELLS // (sm.size * n)))
    # the joint choice offers each row to every other smoother: up to S times its rows
    offered = levels.shape[0] * (sm.edf.size if held is None else 1)
    work = scratch(min(chunk, offered), n, kmax)
    parts = [
        _fit_one(
            levels[i : i + chunk],
            st,
            h,
            kmax,
            None if held is None else held[i : i + chunk],
            work,
            None if near is None else (near[0][i : i + chunk], near[1]),
        )
        for i in range(0, levels.shape[0], chunk)
    ]
    return RowFit(*(np.concatenate(field) for field in zip(*parts, strict=True)))
