r"""The smooth trend: a penalised (Whittaker) smoother in the trend coordinate.

On one grid of cells at positions :math:`u_1 < \dots < u_T` (rescaled to [0, 1]) the
trend :math:`g` of the cell levels :math:`\ell` minimises

.. math::

    \lVert \ell - g \rVert^2 + \lambda \lVert D g \rVert^2,

with :math:`D` the second divided differences of :math:`g` (Whittaker, 1923; Eilers,
2003), each weighted by the square root of the span of :math:`u` it stands for, so
that :math:`\lVert Dg \rVert^2` is the discrete :math:`\int g''(u)^2\,du`, the roughness
of the cubic smoothing spline (Green and Silverman, 1994). :math:`\lambda \to \infty`
gives a straight line in :math:`u`; a smaller :math:`\lambda` lets the slope change,
so a hinge (a steeper slope from some budget on) or the bend of latency at short
budgets costs one large second difference, while a level shift of a few cells costs
several. The fit is linear in the levels,
:math:`g = S_\lambda \ell`; the residual maker :math:`A_\lambda = I - S_\lambda`
carries every statistic (:mod:`regimes._stats.scan`). Each :math:`\lambda` is named by
its effective degrees of freedom :math:`\operatorname{tr} S_\lambda`: from nearly a
straight line (2.05) to 8, at most a third of the cells plus one; the choice between
them is made with the regimes (:mod:`regimes._stats.scan`), so a flexible trend is
chosen for a bent curve, not to chase a spike the regimes already explain.

References
----------
Whittaker, E. T. (1923). On a new method of graduation. *Proc. Edinburgh Math. Soc.*
41, 63-75. Eilers, P. H. C. (2003). A perfect smoother. *Anal. Chem.* 75, 3631-3636.
Green, P. J. and Silverman, B. W. (1994). *Nonparametric Regression and Generalized
Linear Models.* Chapman and Hall.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "EDF_GRID",
    "HINGE_FACTORS",
    "Knot",
    "Smoother",
    "choose_knots",
    "hinge_slopes",
    "hinged_smoothers",
    "last_knot",
    "near_cells",
    "smoother_for",
]

GCV_GAMMA = 1.4
"""Cost of a degree of freedom in cross-validation: 1.4 rather than 1 keeps the trend
from following the noise on short grids (Kim and Gu, 2004)."""

EDF_GRID = (2.05, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)
"""Effective degrees of freedom the trend may take: at most a third of the cells plus one,
and three fewer than the cells."""


def _second_differences(u: np.ndarray) -> np.ndarray:
    r"""Return the (T-2) x T second divided differences on ``u``, weighted for :math:`\int g''^2`.

    Row :math:`i` estimates :math:`g''` about :math:`u_{i+1}` and stands for the span
    :math:`(h_i + h_{i+1})/2` of :math:`u`. Unweighted, a curvature over the first two
    budgets of a linear grid (:math:`\log 2` apart in :math:`\log x`) cost no more than
    the same curvature over its last two (about :math:`1/T` apart), though it bends the
    trend over some twenty times the span: flexible trends bent to a slow first budget
    and took it in.
    """
    h = np.diff(u)
    t = u.size
    d = np.zeros((max(t - 2, 0), t))
    for i in range(t - 2):
        scale = 2.0 / (h[i] + h[i + 1]) * np.sqrt(0.5 * (h[i] + h[i + 1]))
        d[i, i : i + 3] = scale * np.array([1 / h[i], -(1 / h[i] + 1 / h[i + 1]), 1 / h[i + 1]])
    return d


def _lambda_for(eig: np.ndarray, edf: float) -> float:
    """Return the penalty whose smoother has ``edf`` effective degrees of freedom (bisection)."""
    low, high = -12.0, 16.0
    for _ in range(80):
        mid = 0.5 * (low + high)
        trace = float(np.sum(1.0 / (1.0 + 10.0**mid * eig)))
        low, high = (mid, high) if trace > edf else (low, mid)
    return float(10.0 ** (0.5 * (low + high)))


@dataclass(frozen=True)
class Smoother:
    r"""The residual makers of one grid, one per allowed trend flexibility.

    Attributes
    ----------
    u : numpy.ndarray
        The grid's trend coordinate, rescaled to [0, 1].
    edf : numpy.ndarray
        Effective degrees of freedom of each smoother, ``(L,)``.
    residual : numpy.ndarray
        :math:`A_\lambda = I - S_\lambda` for each, ``(L, T, T)``, symmetric.
    knot : tuple of (int, float), or None
        The hinge :func:`choose_knots` chose; None: no hinged smoothers.
    knots : numpy.ndarray
        The knot of each smoother, ``(L,)``, -1 where unhinged: the ladder hinged at
        ``knot`` and at each neighbour that leaves :data:`KNOT_MARGIN` cells on either
        side (the knot itself may leave :data:`KNOT_AFTER` after it).
    """

    u: np.ndarray
    edf: np.ndarray
    residual: np.ndarray
    knot: Knot | None
    knots: np.ndarray

    @property
    def hinged(self) -> np.ndarray:
        """Whether each smoother is hinged, ``(L,)``."""
        return self.knots >= 0

    @property
    def size(self) -> int:
        """Number of cells ``T``."""
        return int(self.u.size)

    def at_least(self, which: int) -> Smoother:
        """Return the smoothers at least as flexible as smoother ``which``."""
        return Smoother(
            self.u, self.edf[which:], self.residual[which:], self.knot, self.knots[which:]
        )

    def trend(self, levels: np.ndarray, which: np.ndarray) -> np.ndarray:
        """Return the trend ``S l`` of each row of ``levels`` with smoother ``which[row]``."""
        fitted = np.einsum("kij,kj->ki", self.residual[which], levels)
        return levels - fitted


def _residual_makers(eig: np.ndarray, vec: np.ndarray, lams: list[float]) -> list[np.ndarray]:
    r"""Return :math:`A_\lambda = I - S_\lambda` for each penalty, from the penalty's eigenpairs."""
    return [(vec * (lam * eig / (1.0 + lam * eig))) @ vec.T for lam in lams]


def _eigen(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    eig, vec = np.linalg.eigh(d.T @ d)
    return np.clip(eig, 0.0, None), vec


def _scaled(u_key: tuple[float, ...]) -> np.ndarray:
    u = np.asarray(u_key)
    span = u[-1] - u[0]
    return (u - u[0]) / span if span > 0 else np.linspace(0.0, 1.0, u.size)


@lru_cache(maxsize=256)
def _ladder(u_key: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray, tuple[float, ...]]:
    """Return the grid's unhinged residual makers, their edf and their penalties."""
    u = _scaled(u_key)
    eig, vec = _eigen(_second_differences(u))
    cap = max(EDF_GRID[0], min(u.size - 3.0, u.size / 3.0 + 1.0))
    edfs = [e for e in EDF_GRID if e <= cap] or [EDF_GRID[0]]
    lams = [_lambda_for(eig, edf) if u.size > 2 else 0.0 for edf in edfs]
    return np.stack(_residual_makers(eig, vec, lams)), np.asarray(edfs), tuple(lams)


HINGE_FACTORS = (1.5, 2.5)
"""Slope ratios whose shapes a hinge regressor may take (its size is fitted): how soon
the rise levels off is chosen with the knot (:func:`choose_knots`). Steeper shapes
rise within a step or two of a geometric grid almost as a step does: offered 4 too,
hinges took steps in (``bench/trust.py`` seed 1: recall of family ``drift`` 0.80 →
0.76, ``curvature`` 0.83 → 0.79), and 8 took a 2x step on a powers-of-two grid in
(``tests/regimes/stats/test_hinge.py``)."""

Knot = tuple[int, float, tuple[int, ...]]
"""A hinge: the cell where the slope starts to grow, the shape's slope ratio, and the
knots in the last two grid steps where the ladder is offered hinged too
(:func:`choose_knots`)."""


def hinge_regressor(u: np.ndarray, knot: int, factor: float) -> np.ndarray:
    r"""Return the log-latency shape of a slope change at cell ``knot``, in budget units.

    Latency linear in the budget :math:`x` whose slope grows :math:`m`-fold from
    :math:`x_0` on, :math:`a + bx + (m-1)b(x - x_0)_+`, lies above its line by the
    factor :math:`1 + (m-1)(x - x_0)_+/x` (where :math:`a \ll bx`): on the log scale a
    kink at :math:`x_0` that then levels off towards :math:`\log m`, a shape no
    second-difference penalty lets a stiff trend take. :math:`m` = ``factor`` sets how
    soon the rise levels off, the regressor's coefficient its size; a fixed cost
    :math:`a` beside :math:`bx` makes the rise level off later, as a smaller :math:`m`
    does. ``u`` is :math:`\log x`.
    """
    x = np.exp(np.asarray(u, dtype=float) - float(np.max(u)))
    return np.log1p((factor - 1.0) * np.maximum(0.0, x - x[knot]) / x)


@lru_cache(maxsize=1024)
def _hinged(u_key: tuple[float, ...], knot: int, factor: float) -> np.ndarray:
    r"""Return the ladder's residual makers with the hinge regressor :math:`f` unpenalised.

    Minimising :math:`\lVert \ell - g - \beta f \rVert^2 + \lambda \lVert Dg \rVert^2`
    over :math:`g` leaves :math:`(\ell - \beta f)^\top A (\ell - \beta f)`, and over
    :math:`\beta`: :math:`\ell^\top (A - A f f^\top A / f^\top A f)\,\ell`, whose
    matrix is also the residual maker (a partial spline; Green and Silverman, 1994).
    """
    f = hinge_regressor(np.asarray(u_key), knot, factor)
    return np.stack([_partial(a, f, a @ f) for a in _ladder(u_key)[0]])


def _partial(a: np.ndarray, f: np.ndarray, af: np.ndarray) -> np.ndarray:
    r"""Return :math:`A - A f f^\top A / f^\top A f` for ``a`` = :math:`A`, ``af`` = :math:`Af`."""
    return a - np.outer(af, af) / max(float(f @ af), 1e-300)


@lru_cache(maxsize=1024)
def _cached(u_key: tuple[float, ...], knot: Knot | None) -> Smoother:
    pairs = () if knot is None else tuple((k, knot[1]) for k in near_cells(knot, len(u_key)))
    return _with_hinges(u_key, pairs, knot)


def _with_hinges(
    u_key: tuple[float, ...], pairs: tuple[tuple[int, float], ...], knot: Knot | None
) -> Smoother:
    """Return the ladder, then the ladder hinged at each (cell, shape) of ``pairs``."""
    u = _scaled(u_key)
    ladder, edf, _ = _ladder(u_key)
    blocks = [_hinged(u_key, cell, factor) for cell, factor in pairs]
    residual = np.ascontiguousarray(np.concatenate([ladder, *blocks]))
    residual.setflags(write=False)
    edf = np.concatenate([edf, *[u.size - np.trace(b, axis1=1, axis2=2) for b in blocks]])
    cells = np.repeat([cell for cell, _ in pairs], ladder.shape[0])
    knots = np.concatenate([np.full(ladder.shape[0], -1), cells]).astype(int)
    return Smoother(u=u, edf=edf, residual=residual, knot=knot, knots=knots)


def near_cells(knot: Knot, t: int) -> list[int]:
    """Return the cells where the ladder is offered hinged for ``knot``, in order."""
    # a knot's place is a parameter of the joint choice too: the robust choice of it may
    # leave the first cell of the steeper slope out, one cell late, and cannot see a
    # hinge in the last two steps
    cell, _, late = knot
    near = [k for k in (cell - 1, cell + 1) if KNOT_MARGIN <= k < t - KNOT_MARGIN]
    return sorted({cell, *near, *late})


def hinged_smoothers(u: np.ndarray, pairs: list[tuple[int, float]]) -> Smoother:
    """Return the grid's ladder, then the ladder hinged at each (cell, shape) of ``pairs``.

    In blocks of the ladder's length, in the order of ``pairs``: what
    :func:`smoother_for` offers one knot, for the knots of many rows at once
    (:mod:`regimes._stats.offers`).
    """
    return _with_hinges(_key(u), tuple(pairs), None)


def _key(u: np.ndarray) -> tuple[float, ...]:
    return tuple(np.round(np.asarray(u, dtype=float), 12).tolist())


def smoother_for(u: np.ndarray, knot: Knot | None = None) -> Smoother:
    """Return the smoothers of grid ``u`` (cached: curves on one grid share them).

    Parameters
    ----------
    u : numpy.ndarray
        Increasing trend coordinates of the grid's cells (at least 3).
    knot : tuple of (int, float), optional
        A hinge (:func:`choose_knots`): the cell where the trend's slope may grow, and
        the shape of the rise; the ladder is offered again with the hinge regressor
        unpenalised, at that cell and at either neighbour.

    Returns
    -------
    Smoother
    """
    return _cached(_key(u), knot)


KNOT_MARGIN = 2
"""Fewest cells before a hinge's knot."""

KNOT_AFTER = 1
"""Fewest cells after a hinge's knot: on a geometric grid the last step can hold a hinge,
which a trend without one leaves as a one-budget regime. Such a knot, and the one a step
before it, are offered where :func:`choose_knots` chooses them, or beside the chosen one
where a hinge there is plausible (:func:`late_knots`; the neighbours the joint choice
offers beside a knot leave :data:`KNOT_MARGIN` after them)."""


def late_knots(t: int) -> tuple[int, int]:
    """Return the knots of hinges in the last two steps of a grid of ``t`` cells.

    The robust score that places a knot cannot see a rise in the last one or two cells
    (of a grid's median residual), so where a hinge there is plausible the ladder is
    offered hinged at both, beside the chosen knot (:func:`choose_knots`).
    """
    return (last_knot(t) - 1, last_knot(t))


def last_knot(t: int) -> int:
    """Return the knot of a hinge in the last step of a grid of ``t`` cells."""
    return t - 1 - KNOT_AFTER


HINGE_MAX = 5.0
"""Steepest growth of the slope a hinge in the last grid step may take, as the ratio of
the slopes after and before its knot (:func:`_last_step_growth`): beyond it the rise is
a regime. Such a hinge fits that budget alone, whatever its height: uncapped, it took in
one-budget rises at the end of linear grids (``bench/accuracy.py``, "edge: last budget
2-4x", recall 0.99 -> 0.32 of 200 curves), which a slope 13 or more times steeper
would need there; the attention costs that hinge real sweeps steepen it 2-4 times
(family ``curvature`` of ``bench/shapes.py``)."""

KNOT_PRICE = 3.0
"""Degrees of freedom a hinge costs in the joint choice of trend and regimes (the knot's
choice only says where it would be): one for its size, two for its place (what
selection's default penalty charges a change point). At 2, a hinge took in steps: in
``bench/shapes.py`` family ``drift`` recall of 1.3-3x steps was 0.78 against 0.80 at 3
(0.83 with no hinge)."""


_SCORE_CELLS = 4_000_000
"""Knots x rows x cells (and knots x cells x cells) scored at once by
:func:`choose_knots`: a 300-cell grid offers 592 knots and shapes, whose stiff smoothers
alone took 0.4 GB, and 3.9 GB cached with their whole ladders."""


def hinge_slopes(
    u: np.ndarray, trend: np.ndarray, sm: Smoother, which: int
) -> tuple[int, float, float] | None:
    """Return the knot of a hinged trend and the trend's mean slopes in ``u`` on either side.

    None where smoother ``which`` of ``sm`` holds no hinge.
    """
    if not sm.hinged[which]:
        return None
    k = int(sm.knots[which])
    before = (trend[k] - trend[0]) / (u[k] - u[0])
    after = (trend[-1] - trend[k]) / (u[-1] - u[k])
    return k, float(before), float(after)


def _robust_score(levels: np.ndarray, residual: np.ndarray) -> np.ndarray:
    r"""Per smoother and row: :math:`T \log \mathrm{GCV}_{rob} + \mathrm{edf} \log T`."""
    # the GCV with the residuals' squared MAD for their mean square, as the first choice
    # of a smoother makes it (a spike not yet explained must not choose the knot)
    t = levels.shape[1]
    e = np.abs(np.matmul(levels, residual))  # (W, K, T), as BLAS products
    # np.median's value, from one partition: on a knot and shape per smoother its
    # checks and copies cost twice the partition
    lo, hi = (t - 1) // 2, t // 2
    e.partition([lo, hi], axis=2)
    rss = t * (1.4826 * 0.5 * (e[:, :, lo] + e[:, :, hi])) ** 2
    used = t - np.trace(residual, axis1=1, axis2=2)
    gcv = t * rss / np.maximum(t - GCV_GAMMA * used, 1e-12)[:, None] ** 2
    return t * np.log(np.maximum(gcv, 1e-300)) + (used * np.log(t))[:, None]


def choose_knots(u: np.ndarray, levels: np.ndarray) -> list[Knot | None]:
    r"""Return, per row of ``levels`` ``(K, T)``, where and how its trend may hinge, or None.

    ``u`` is :math:`\log x`. Every knot with :data:`KNOT_MARGIN` cells before it and
    :data:`KNOT_AFTER` after is tried with the stiffest smoother and the hinge regressor
    of each shape in :data:`HINGE_FACTORS`, where the slope grows there (the regressor's
    coefficient is positive; in the last step by at most :data:`HINGE_MAX`); the best,
    by the score the joint choice of trend and regimes prices a trend with, :math:`T
    \log \mathrm{GCV} + \mathrm{edf} \log T`, robustly (the squared median absolute
    residual for the mean square, so that a spike does not choose it), is the row's
    knot, with the knots of the last two steps where a hinge is plausible too (the
    robust score cannot see a rise in one or two cells: such hinges are offered beside
    the knot, :func:`late_knots`); None where the slope grows at no knot. One shape did
    not fit every hinge: a slope 3.9 times steeper fitted with the shape of 2.5 left a
    step beside the hinge (`bench/trust.py`, family ``mixed``, seed 3). This chooses
    where a hinge would be, not whether: the joint choice offers the smoothers hinged
    there and at either neighbour (the robust score may place the knot a cell late)
    beside the others, at :data:`KNOT_PRICE` degrees of freedom. Kept only where it
    beat every smoother without one here, a hinge lost to a flexible trend that the
    joint choice then passed over for a stiff one and a step (docs/method.md,
    section 2).
    """
    t = levels.shape[1]
    knots = [(k, m) for k in range(KNOT_MARGIN, t - KNOT_AFTER) for m in HINGE_FACTORS]
    if not knots:
        return [None] * levels.shape[0]
    key, size = _key(u), levels.size
    per = max(1, min(_SCORE_CELLS // size, _SCORE_CELLS // (t * t)))
    # the cached ladder's grid: the rounded coordinates it was built on
    ladder, grid = _ladder(key)[0], np.asarray(key)
    growth = _last_step_growth(levels, ladder[-1], grid)
    hinge = np.concatenate(
        [
            _knot_scores(levels, ladder[0], growth, grid, knots[i : i + per])
            for i in range(0, len(knots), per)
        ]
    )
    best = hinge.argmin(axis=0)
    grows = np.isfinite(hinge[best, np.arange(levels.shape[0])])
    # the robust score cannot see a rise in the last one or two cells of T, and places
    # such a hinge earlier: each of the two knots is offered too where a hinge there is
    # plausible (its slope grows; in the last step at most HINGE_MAX-fold)
    ends = [k for k in late_knots(t) if k >= KNOT_MARGIN]
    plausible = [np.isfinite(hinge[[c == k for c, _ in knots]]).any(axis=0) for k in ends]
    k_rows = levels.shape[0]
    late = [
        tuple(k for k, p in zip(ends, plausible, strict=True) if p[row]) for row in range(k_rows)
    ]
    return [
        (*knots[b], lt) if g else None
        for b, g, lt in zip(best.tolist(), grows.tolist(), late, strict=True)
    ]


def _last_step_growth(levels: np.ndarray, flexible: np.ndarray, u: np.ndarray) -> np.ndarray:
    r"""Per row of ``levels``, the slope ratio a hinge in the last grid step would take.

    Latency :math:`a + bx` whose slope grows :math:`m`-fold from the last budget but
    one, :math:`x_0`, rises to the last, :math:`x_T`, by the factor
    :math:`R = 1 + (m - 1)(1 - x_0/x_T)` over its line with no fixed cost (which only
    steepens it), so :math:`m = 1 + (R - 1)/(1 - x_0/x_T)`. :math:`\log R` is read as
    the last level's deleted residual under the most flexible smoother of the ladder,
    :math:`(A\ell)_T / A_{TT}`: its excess over the trend of the other budgets,
    extrapolated. Read over the stiffest smoother, a line, the rise of a curve convex on
    the log scale took its bend in, and hinges 3-4 times steeper passed the cap as
    regimes at the last budget (docs/method.md, section 2).
    """
    x = np.exp(u - np.max(u))
    rise = (levels @ flexible[:, -1]) / max(float(flexible[-1, -1]), 1e-12)
    with np.errstate(over="ignore"):
        return 1.0 + np.expm1(rise) / (1.0 - x[-2])


def _knot_scores(
    levels: np.ndarray,
    stiff: np.ndarray,
    growth: np.ndarray,
    u: np.ndarray,
    knots: list[tuple[int, float]],
) -> np.ndarray:
    """Return the robust score of each knot and shape ``(W, K)``, inf where no hinge fits.

    A hinge fits where the slope grows there, and in the last step by at most
    :data:`HINGE_MAX`.

    ``stiff``: the stiffest unhinged smoother, to which each hinge regressor is added;
    ``growth``: each row's :func:`_last_step_growth`.
    """
    fs = [hinge_regressor(u, k, m) for k, m in knots]
    afs = [stiff @ f for f in fs]
    hinged = np.stack([_partial(stiff, f, af) for f, af in zip(fs, afs, strict=True)])
    scores = _robust_score(levels, hinged)
    # a hinge is a slope that grows: one that falls would take in a spike's recovery
    fit = (levels @ np.stack(afs).T).T  # f'A l, (W, K)
    scores[fit <= 0.0] = np.inf
    # ... and, in the last grid step, grows by at most HINGE_MAX (a knot with more cells
    # after it is told from a rise by the shape of its rise)
    last = np.array([k == last_knot(u.size) for k, _ in knots])
    scores[last[:, None] & (growth > HINGE_MAX)[None, :]] = np.inf
    return scores
