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

1. the smoother's flexibility by generalised cross-validation (Craven and Wahba, 1979),
   among the smoothers the row is offered (:mod:`regimes._stats.offers`);
2. regimes by greedy forward selection (penalised segmentation of the model): each
   step adds the interval that reduces the residual sum of squares most, and the
   number of steps kept minimises :math:`T \log (\mathrm{RSS}_k / \nu_k) + k h^2`
   (:math:`\nu_k` the residual degrees of freedom), with
   :math:`h^2 = 2 c \log T`, a BIC-like penalty of :math:`c \log T` per change point,
   two per interval (Yao, 1988); at most ``kmax``; nested and neighbouring intervals
   are allowed, so a spike on a step, or right before one, is measured against the
   level around it;
3. the flexibility again by cross-validation with those regimes in the model, and the
   regimes selected again with it (:mod:`regimes._stats.joint`);
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

from regimes._stats.final_fit import final_rows
from regimes._stats.intervals import (
    as_steps,
    candidate_intervals,
    side_by_side,
    slow_starts,
)
from regimes._stats.joint import Menu, choose, joint_choice
from regimes._stats.selection import TINY as _TINY
from regimes._stats.selection import Near, select, select_near
from regimes._stats.smoother import GCV_GAMMA, Smoother
from regimes._stats.stack import Stack, stack_of

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
"""Rows x cells x intervals per chunk: about 300 rows of a 50-cell grid.

Selection and the final fit hold nothing per interval across rows (they are compiled,
a row at a time), but the joint choice offers each row up to 32 smoothers, each pair
with its basis, and at this size a chunk's arrays stay in cache: chunks four times as
large made a 1M-row call of ``bench/speed.py`` 1.25 times as long (4.6 s against
3.6 s, alternated), chunks half as large no faster."""

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


def _fit_one(
    levels: np.ndarray,
    st: Stack,
    h: float,
    kmax: int,
    held: np.ndarray | None,
    near: Near | None = None,
    menu: Menu | None = None,
) -> RowFit:
    """Fit every row: smoother by GCV, selection; where it selected, trend and regimes jointly.

    Where the first selection kept a regime, every smoother the row is offered (``menu``;
    None: all of ``st``) gets its own selection and the best pair wins
    (:func:`~regimes._stats.joint.joint_choice`): a bent curve that one stiff trend
    leaves as a step is offered to a flexible trend without one (families ``curvature``
    and ``mixed`` of ``bench/shapes.py``); so is a row whose first smoother is hinged (a
    hinge can take in part of a step and leave nothing to select). Elsewhere the joint
    choice would repeat the first. Rows whose smoother is ``held`` only select their
    regimes.
    """
    which, bare = choose(levels, st, menu) if held is None else (held.copy(), None)
    if near is None:
        chosen = select(levels, st, which, h * h, kmax)
    else:
        chosen = select_near(levels, st, which, near, h * h, kmax)
    selected = np.any(chosen >= 0, axis=1)
    again = np.flatnonzero((selected | st.hinged[which]) & (held is None))
    if again.size:
        offered = None if menu is None else (menu[0][again], menu[1])
        assert bare is not None  # rows are chosen again only where none was held
        first = (which[again], chosen[again], bare[again])
        which[again], chosen[again] = joint_choice(levels[again], st, first, offered, h * h)
    # the same model written by the conventions: steps first, then the peaks at the
    # onset or end of another regime side by side with it, and slow starts read as
    # such (their estimates decide)
    chosen = as_steps(chosen, levels.shape[1])
    fit = _final_fit(levels, st, which, chosen)
    moved = side_by_side(chosen, fit.delta, levels.shape[1])
    slow = slow_starts(chosen, fit.delta, levels.shape[1])
    moved = np.where(moved == chosen, slow, moved)
    rows = np.flatnonzero((moved != chosen).any(axis=1))
    return _refitted(levels, st, fit, rows, moved[rows])


def _refitted(
    levels: np.ndarray,
    st: Stack,
    fit: RowFit,
    rows: np.ndarray,
    chosen: np.ndarray,
) -> RowFit:
    """Return ``fit`` with ``rows`` fitted again with the intervals ``chosen``."""
    if not rows.size:
        return fit
    part = _final_fit(levels[rows], st, fit.which[rows], chosen)
    fields = []
    for whole, refitted in zip(fit, part, strict=True):
        field = whole.copy()
        field[rows] = refitted
        fields.append(field)
    return RowFit(*fields)


def _final_fit(levels: np.ndarray, st: Stack, which: np.ndarray, chosen: np.ndarray) -> RowFit:
    """Return :func:`~regimes._stats.final_fit.final_rows` of every row, as a :class:`RowFit`."""
    delta, se_unit, sigma, df, trend, cov = final_rows(levels, st, which, chosen)
    return RowFit(chosen.copy(), delta, se_unit, sigma, df, which.copy(), trend, delta, cov)


def refit_with(levels: np.ndarray, sm: Smoother, which: np.ndarray, chosen: np.ndarray) -> RowFit:
    """Return each row of ``levels`` fitted with the intervals ``chosen`` on its smoother ``which``.

    Nothing is selected: a reading of the rows that the caller writes (the regimes of
    another fit, with one more or one less).
    """
    return _final_fit(levels, stack_of(sm), which, chosen)


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
    return _refitted(levels, stack_of(sm), fit, rows, chosen)


def fit_rows(
    levels: np.ndarray,
    sm: Smoother,
    h: float,
    kmax: int,
    held: np.ndarray | None = None,
    near: Near | None = None,
    menu: Menu | None = None,
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
    menu : tuple of numpy.ndarray, optional
        Without ``held``: each row's menu ``(K,)`` and the smoothers of ``sm`` each menu
        offers ``(M, S)`` (:class:`~regimes._stats.offers.Offers`); by default every row
        is offered every smoother.

    Returns
    -------
    RowFit
    """
    intervals = candidate_intervals(sm.size)
    st = stack_of(sm)
    # rows per chunk (rows selecting near their blocks' regimes hold few intervals)
    n = 1 if near is not None else max(intervals[0].size, 1)
    chunk = min(_MAX_ROWS, max(1, _ROW_CELLS // (sm.size * n)))
    parts = [
        _fit_one(
            levels[i : i + chunk],
            st,
            h,
            kmax,
            None if held is None else held[i : i + chunk],
            None if near is None else (near[0][i : i + chunk], near[1]),
            None if menu is None else (menu[0][i : i + chunk], menu[1]),
        )
        for i in range(0, levels.shape[0], chunk)
    ]
    return RowFit(*(np.concatenate(field) for field in zip(*parts, strict=True)))
