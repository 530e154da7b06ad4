r"""The smooth trend: a penalised (Whittaker) smoother in the trend coordinate.

On one grid of cells at positions :math:`u_1 < \dots < u_T` (rescaled to [0, 1]) the
trend :math:`g` of the cell levels :math:`\ell` minimises

.. math::

    \lVert \ell - g \rVert^2 + \lambda \lVert D g \rVert^2,

with :math:`D` the second divided differences of :math:`g` (Whittaker, 1923; Eilers,
2003). :math:`\lambda \to \infty` gives a straight line in :math:`u`; a smaller
:math:`\lambda` lets the slope change, so a hinge (a steeper slope from some budget on)
or the bend of latency at short budgets costs one large second difference, while a
level shift of a few cells costs several. The fit is linear in the levels,
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
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["EDF_GRID", "Smoother", "smoother_for"]

EDF_GRID = (2.05, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)
"""Effective degrees of freedom the trend may take: at most a third of the cells plus one,
and three fewer than the cells."""


def _second_differences(u: np.ndarray) -> np.ndarray:
    """Return the (T-2) x T matrix of second divided differences on positions ``u``."""
    h = np.diff(u)
    t = u.size
    d = np.zeros((max(t - 2, 0), t))
    for i in range(t - 2):
        scale = 2.0 / (h[i] + h[i + 1])
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
    """

    u: np.ndarray
    edf: np.ndarray
    residual: np.ndarray

    @property
    def size(self) -> int:
        """Number of cells ``T``."""
        return int(self.u.size)

    def at_least(self, which: int) -> Smoother:
        """Return the smoothers at least as flexible as smoother ``which``."""
        return Smoother(u=self.u, edf=self.edf[which:], residual=self.residual[which:])

    def trend(self, levels: np.ndarray, which: np.ndarray) -> np.ndarray:
        """Return the trend ``S l`` of each row of ``levels`` with smoother ``which[row]``."""
        fitted = np.einsum("kij,kj->ki", self.residual[which], levels)
        return levels - fitted


@lru_cache(maxsize=256)
def _cached(u_key: tuple[float, ...]) -> Smoother:
    u = np.asarray(u_key)
    span = u[-1] - u[0]
    scaled = (u - u[0]) / span if span > 0 else np.linspace(0.0, 1.0, u.size)
    d = _second_differences(scaled)
    penalty = d.T @ d
    eig, vec = np.linalg.eigh(penalty)
    eig = np.clip(eig, 0.0, None)
    cap = max(EDF_GRID[0], min(u.size - 3.0, u.size / 3.0 + 1.0))
    edfs = [e for e in EDF_GRID if e <= cap] or [EDF_GRID[0]]
    mats = []
    for edf in edfs:
        lam = _lambda_for(eig, edf) if u.size > 2 else 0.0
        shrink = lam * eig / (1.0 + lam * eig)
        mats.append((vec * shrink) @ vec.T)
    residual = np.stack(mats)
    residual.setflags(write=False)
    return Smoother(u=scaled, edf=np.asarray(edfs), residual=residual)


def smoother_for(u: np.ndarray) -> Smoother:
    """Return the smoothers of grid ``u`` (cached: curves on one grid share them).

    Parameters
    ----------
    u : numpy.ndarray
        Increasing trend coordinates of the grid's cells (at least 3).

    Returns
    -------
    Smoother
    """
    return _cached(tuple(np.round(np.asarray(u, dtype=float), 12).tolist()))
